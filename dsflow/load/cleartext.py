"""Secrets written in clear text in project files: found by a setting's name or by what its value holds.

A value rendered from `env_var()` is a secret dsflow knows (redacted and scrubbed everywhere); the same value
typed into a file is in git, in every plan and in the state. Loading refuses it (DSF-E060) wherever a value can
carry credentials: store properties and addresses, schema registries, the state backend's settings,
`runtime.spark_conf`, and SQL WITH properties. tests/unit/test_cleartext_secrets.py holds the table of forms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SECRET_NAME = re.compile(
    r"(password|passwd|secret|token|api[._-]?key|credential|private[._-]?key|jaas|key[._-]pem|user[._-]?info"
    r"|connection[._-]?string|account[._-]?key|sas[._-]?key|auth[._-]?header)", re.I)
"""Setting names whose value is a secret whatever it looks like (`sasl.password`, `basic.auth.user.info`, ...)."""

SECRET_VALUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a URL with a password", re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@", re.I)),
    ("a password= setting", re.compile(r"(?<![a-z_.])(password|passwd|pwd)\s*=\s*[\"']?[^\s\"';]", re.I)),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("an OAuth client secret", re.compile(r"client[._-]?secret\s*[=:]", re.I)),
    ("an Azure account key or SAS signature", re.compile(r"(AccountKey|SharedAccessKey|SharedAccessSignature)\s*=|"
                                                          r"[?&]sig=", re.I)),
    ("a bearer token", re.compile(r"\bbearer\s+[A-Za-z0-9._~+/=-]{8,}", re.I)),
    ("an AWS secret key", re.compile(r"aws_secret_access_key\s*[=:]", re.I)),
)
"""What in a value is a credential wherever it is written (a DSN, a JAAS or OAuth config, a URL)."""


def clear_text_secret(name: str, value: object, known: Iterable[str], by_name: bool = True) -> str | None:
    """Why `value` (of setting `name`) is a secret written in clear text, or None. A value holding a secret dsflow
    rendered from env_var() (`known`) is not; `by_name=False` looks at the value only (an address, a URL)."""
    text = "" if value is None else str(value)
    if not text.strip() or any(secret and secret in text for secret in known):
        return None
    if by_name and SECRET_NAME.search(name):
        return "its name says it is a secret"
    for what, pattern in SECRET_VALUES:
        if pattern.search(text):
            return f"its value holds {what}"
    return None
