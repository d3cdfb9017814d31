"""Secret values (from `env_var()`): the keyed marker that stands for them, and scrubbing them out of text.

A secret never enters a resource, a state or a plan in clear: `Redactor.mark` replaces it with
`sensitive:hmac:<16 hex>`, an HMAC-SHA256 under a random key kept in the state backend (never printed). The
marker changes when the value changes, so a plan still sees the change, but someone holding a plan or a state
without the key cannot test guesses at the value. `legacy_mark` is the unkeyed marker of dsflow before
2026-11-25 (`sensitive:<12 hex>` of SHA-256), recognised only to migrate states that hold it.

`register` / `scrub` keep the secret values this process knows, and replace them in any text shown to a
user (error messages, logs). This is the one piece of process-wide state here: the values are registered
where they are read (project loading, a query driver's or data generator's environment).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

MARKER = "sensitive:"
HMAC_MARKER = "sensitive:hmac:"
UNKEYED_MARKER = "sensitive:unkeyed"
"""What a secret becomes where no key was asked for (a graph of the resources): no hash at all."""
SCRUBBED = "<secret>"
"""What a secret becomes in a message or a log line."""
MIN_SCRUB_LENGTH = 4
"""Shorter values are not scrubbed from text (a secret '1' would blank out every digit 1 of a message)."""

_LEGACY = re.compile(r"^sensitive:[0-9a-f]{12}$")


@dataclass(frozen=True)
class Redactor:
    """Turns a secret value into its marker; without a key (None), into the bare UNKEYED_MARKER."""

    key: bytes | None = field(default=None, repr=False)

    def mark(self, value: str) -> str:
        if self.key is None:
            return UNKEYED_MARKER
        return HMAC_MARKER + hmac.new(self.key, value.encode(), hashlib.sha256).hexdigest()[:16]


def legacy_mark(value: str) -> str:
    """The marker states written before 2026-11-25 hold (an unsalted SHA-256 prefix); for migration only."""
    return MARKER + hashlib.sha256(value.encode()).hexdigest()[:12]


class LegacyRedactor(Redactor):
    """The unkeyed markers of states written before 2026-11-25 (`legacy_mark`): to recognise them, for migration."""

    def mark(self, value: str) -> str:
        return legacy_mark(value)


def is_legacy_mark(value: object) -> bool:
    return isinstance(value, str) and bool(_LEGACY.match(value))


_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None


def register(values: Iterable[str]) -> None:
    """Remember secret values, so `scrub` hides them; a list (a bootstrap 'a:1,b:2') adds each item too."""
    global _pattern
    found = set()
    for value in values:
        if not value:
            continue
        found.add(value)
        found |= {part.strip() for part in value.split(",")}
        found |= {part.strip().split("://", 1)[-1] for part in value.split(",")}
    found = {v for v in found if len(v) >= MIN_SCRUB_LENGTH}
    with _lock:
        if found - _secrets:
            _secrets.update(found)
            _pattern = _compiled()


def scrub(text: str) -> str:
    """`text` with every registered secret value replaced by SCRUBBED."""
    pattern = _pattern
    if pattern is None or not text:
        return text
    return pattern.sub(SCRUBBED, text)


class ScrubFilter(logging.Filter):
    """A logging filter that scrubs secret values from a record's message (a broker client's log lines name the
    client.id and the broker addresses)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _pattern is not None:
            record.msg, record.args = scrub(record.getMessage()), ()
        return True


def registered() -> frozenset[str]:
    """The values `scrub` hides now (tests)."""
    with _lock:
        return frozenset(_secrets)


def forget(values: Iterable[str]) -> None:
    """Stop scrubbing these values (tests: one process loads many projects, one project's secret is not another's)."""
    global _pattern
    with _lock:
        _secrets.difference_update(values)
        _pattern = _compiled()


def _compiled() -> re.Pattern[str] | None:
    """The pattern of every registered value, the longest first (a list before its items); None for none."""
    ordered = sorted(_secrets, key=len, reverse=True)
    return re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None
