"""Where a lake store keeps its tables, checked for URLs it cannot reach (DSF-E250).

A `filesystem` or `databricks` store's `path` is a local folder (relative to the project, or absolute); an `s3`
store's `bucket` is a bare bucket name and its `prefix` a key prefix; a Delta table's `'delta.path'` is a path
under its store's root, an absolute folder or an `s3://` URI. Anything written as another URL (`abfss://...`,
`az://...`, `gs://...`, `file://...`) used to be taken for a relative local folder (`apply` made it under the
project); it is an error with the key's file:line instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from dsflow.errors import Diagnostic, Location

URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
"""A URL's scheme (a Windows drive letter 'C:\\' has no '//')."""

STORE_PATH_KEYS: dict[str, dict[str, str]] = {
    # store type -> {key: what it holds}
    "filesystem": {"path": "a local folder (relative to the project, or absolute)"},
    "databricks": {"path": "a local folder (relative to the project, or absolute)",
                   "bucket": "a bare S3 bucket name", "prefix": "a key prefix in the bucket"},
    "s3": {"bucket": "a bare S3 bucket name", "prefix": "a key prefix in the bucket"},
}
TABLE_PATH_SCHEMES = ("s3",)
"""The URL schemes a Delta table's 'delta.path' may name (delta-rs with the store's S3 settings)."""


def scheme_of(value: str) -> str | None:
    """The URL scheme `value` starts with (lower case), or None for a plain path or name."""
    found = URL.match(value.strip())
    return found.group(1).lower() if found else None


def _unsupported_hint(scheme: str, supported: str) -> str:
    later = " Azure Data Lake Storage (abfss://, az://) is not supported yet: it is a later task (issue 24)." \
        if scheme in ("abfss", "abfs", "az", "adl", "wasb", "wasbs") else ""
    return f"supported: {supported}.{later}"


def store_path_diagnostics(name: str, type_: str, properties: dict[str, str],
                           where: Callable[[str], Location | None]) -> list[Diagnostic]:
    """DSF-E250 for each of the store's folder settings written as a URL (`where(key)`: the key's location)."""
    out = []
    for key, holds in STORE_PATH_KEYS.get(type_, {}).items():
        scheme = scheme_of(properties.get(key, ""))
        if scheme is None:
            continue
        if key == "bucket" and scheme == "s3":
            hint = f"write the bucket name alone: {key}: {properties[key].strip()[len('s3://'):].split('/')[0]}"
        else:
            hint = _unsupported_hint(scheme, f"{holds}; S3 through an s3 store (bucket, prefix)")
        out.append(Diagnostic("DSF-E250", f"the {key} of the {type_} store '{name}' is a {scheme}:// URL; a "
                              f"{type_} store's {key} is {holds}, never a URL", where(key), hint=hint))
    return out


def table_path_diagnostic(fqn: str, key: str, path: str, store: str, where: Location | None) -> Diagnostic | None:
    """DSF-E250 when a Delta table's path is a URL of a scheme other than s3://."""
    scheme = scheme_of(path)
    if scheme is None or scheme in TABLE_PATH_SCHEMES:
        return None
    return Diagnostic("DSF-E250", f"the '{key}' of table '{fqn}' (store '{store}') is a {scheme}:// URL, which "
                      "Delta tables cannot be written to", where,
                      hint=_unsupported_hint(scheme, "a path under the store's root, an absolute folder, or s3://"))
