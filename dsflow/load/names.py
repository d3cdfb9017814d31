"""Checks of names: empty relation names, and the physical names a store accepts (DSF-E205..E208).

A name the broker or the warehouse would refuse (or, worse, accept in a form nobody meant: a unicode topic name,
a 303-character one) is a validation error at the place it is written, not a failure in the middle of an apply.
Which names a store accepts is its kind's rules (core/stores.py, the `rules` facet): `check_log_name` for the
log a stream or changelog lives in, `check_table` for a table's identifiers, `check_dead_letter_topic` for a
query's 'dlq.topic'. A kind without such a rule accepts any name.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from dsflow.core import stores as registry
from dsflow.errors import Diagnostic, Location
from dsflow.load.rules import rule
from dsflow.core.suggest import shortened

Report = Callable[[Diagnostic], None]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_name_parts(parts: tuple[str, ...], fqn: str, where: Location | None, report: Report) -> bool:
    """DSF-E205: a relation name with an empty part (`CREATE STREAM ""`, `analytics."".x`), a control character,
    or a `.` inside a quoted part (`"a.b"`: the name would read as more parts than it has)."""
    if all(part.strip() and "." not in part and not _CONTROL.search(part) for part in parts):
        return True
    report(Diagnostic("DSF-E205", f"the relation name {'.'.join(parts)!r} has an empty part, a '.' inside a part or "
                      "a control character",
                      where, hint="name it with letters, digits and '_' (quote it only if it needs other characters)"))
    return False


def why_invalid(name: str, limit: int, allowed: str) -> str:
    """Why `name` is not a valid physical name of at most `limit` characters of `allowed` ones (for a message)."""
    if not name:
        return "it is empty"
    if len(name) > limit:
        return f"it is {len(name)} characters long (at most {limit})"
    bad = sorted({c for c in name if not re.fullmatch(r"[a-zA-Z0-9._-]", c)})
    shown = shortened([repr(c) for c in bad], 5)
    return f"{shown} {'is' if len(bad) == 1 else 'are'} not allowed (only {allowed})"


def check_physical_names(relations, queries, stores: dict, report: Report) -> None:
    """Every relation's object name on its store (DSF-E206..E208) and every query's 'dlq.topic' (DSF-E206)."""
    for relation in relations:
        kind = getattr(stores.get(relation.store), "type", None)
        if relation.kind in ("stream", "changelog") and (check := rule(kind, "check_log_name")) is not None:
            check(relation.topic, relation.fqn, relation.location, report)
        elif relation.kind == "table" and (check := rule(kind, "check_table")) is not None:
            check(kind, relation, report)
    checks = [c for t in registry.kinds_that(registry.Capability.DEAD_LETTERS)
              if (c := rule(t, "check_dead_letter_topic")) is not None]
    for query in queries:
        if query.dlq_topic is not None:
            for check in checks:
                check(query.dlq_topic, f"the 'dlq.topic' of '{query.fqn}'", query.location, report)
