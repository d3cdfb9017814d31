"""Where a lake store keeps its tables, checked for URLs it cannot reach (DSF-E250), and an `adls` store's
account, container and credentials (DSF-E390..E392).

A `filesystem` or `databricks` store's `path` is a local folder (relative to the project, or absolute); an `s3`
store's `bucket` is a bare bucket name and its `prefix` a key prefix; an `adls` store's `account` and `container`
are bare names; a Delta table's `'delta.path'` is a path under its store's root, an absolute folder, an `s3://`
URI, or (in an `adls` store) an `abfss://` / `az://` URI of the store's account. Anything written as another URL
(`gs://...`, `file://...`, `abfss://` on a local store) used to be taken for a relative local folder (`apply`
made it under the project); it is an error with the key's file:line instead.
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
AZURE_SCHEMES = ("abfss", "abfs", "az")
"""The URL schemes of Azure Data Lake Storage paths an `adls` store's tables may name (delta-rs' Azure store)."""
AZURE_URL = re.compile(r"^(abfss?)://([^@/]+)@([^./]+)\.(?:dfs|blob)\.core\.windows\.net(?:/(.*))?$"
                       r"|^az://([^/@]+)(?:/(.*))?$")
"""abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH (or .blob.) and az://CONTAINER/PATH."""
ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
CONTAINER = re.compile(r"^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$")


def scheme_of(value: str) -> str | None:
    """The URL scheme `value` starts with (lower case), or None for a plain path or name."""
    found = URL.match(value.strip())
    return found.group(1).lower() if found else None


def _unsupported_hint(scheme: str, supported: str) -> str:
    azure = " Azure Data Lake Storage (abfss://, az://) is an adls store (account, container, prefix): see " \
        "docs/project.md (Table stores)." if scheme in ("abfss", "abfs", "az", "adl", "wasb", "wasbs") else ""
    return f"supported: {supported}.{azure}"


def split_azure_url(url: str) -> tuple[str, str | None, str] | None:
    """(container, account or None for az://, path) of an Azure Data Lake Storage URL, None for another value."""
    found = AZURE_URL.match(url.strip())
    if found is None:
        return None
    if found.group(1):
        return found.group(2), found.group(3), (found.group(4) or "").strip("/")
    return found.group(5), None, (found.group(6) or "").strip("/")


def adls_root(settings: dict[str, str]) -> str:
    """Where an adls store keeps its tables: abfss://CONTAINER@ACCOUNT.dfs.core.windows.net[/PREFIX]."""
    prefix = settings.get("prefix", "").strip("/")
    return f"abfss://{settings['container']}@{settings['account']}.dfs.core.windows.net" + (f"/{prefix}" if prefix
                                                                                           else "")


def azure_checks(properties: dict[str, str]) -> list[tuple[str, str, str]]:
    """An adls store's account and container are Azure names (DSF-E390); its credentials are one of an account
    key, a SAS token or a service principal (DSF-E391); its endpoint an http(s) URL (DSF-E390)."""
    out = []
    for key, pattern, rule in (("account", ACCOUNT, "3-24 lower-case letters and digits"),
                               ("container", CONTAINER, "3-63 lower-case letters, digits and single hyphens")):
        value = properties.get(key, "")
        if value and not pattern.match(value):
            out.append(("DSF-E390", f"'{value}' is not an Azure storage {key} name ({rule})",
                        f"write the bare {key} name (abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX is "
                        "account: ACCOUNT, container: CONTAINER, prefix: PREFIX)"))
    endpoint = properties.get("endpoint", "")
    if endpoint and scheme_of(endpoint) not in ("http", "https"):
        out.append(("DSF-E390", f"endpoint '{endpoint}' is not an http(s) URL",
                    "the Blob service URL of the account, e.g. http://127.0.0.1:10000/devstoreaccount1 (Azurite)"))
    return out + _credential_checks(properties)


PRINCIPAL = ("client_id", "client_secret", "tenant_id")


def _credential_checks(properties: dict[str, str]) -> list[tuple[str, str, str]]:
    """DSF-E391 unless exactly one of an account key, a SAS token or a whole service principal is given."""
    principal = [k for k in PRINCIPAL if properties.get(k)]
    kinds = [k for k in ("account_key", "sas_token") if properties.get(k)] + (["service principal"] if principal
                                                                              else [])
    if len(kinds) == 1 and len(principal) in (0, 3):
        return []
    lacks = f" (the service principal lacks {', '.join(k for k in PRINCIPAL if k not in principal)})" \
        if principal and len(principal) != 3 else ""
    return [("DSF-E391", "needs exactly one credential: account_key, sas_token, or a service principal (client_id, "
             f"client_secret, tenant_id); found: {', '.join(kinds) or 'none'}{lacks}",
             "give one, each secret from {{ env_var('...') }}")]


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


def table_path_diagnostic(fqn: str, key: str, path: str, store: str, where: Location | None,
                          adls: dict[str, str] | None = None) -> Diagnostic | None:
    """DSF-E250 when a Delta table's path is a URL its store cannot reach: a scheme other than s3:// (an adls
    store's settings `adls`: abfss:// or az://, DSF-E392 for another account than the store's)."""
    scheme = scheme_of(path)
    if adls is not None and scheme is not None:
        return _adls_table_path(fqn, key, path, store, where, adls)
    if scheme is None or scheme in TABLE_PATH_SCHEMES:
        return None
    return Diagnostic("DSF-E250", f"the '{key}' of table '{fqn}' (store '{store}') is a {scheme}:// URL, which "
                      "Delta tables cannot be written to", where,
                      hint=_unsupported_hint(scheme, "a path under the store's root, an absolute folder, or s3://"))


def _adls_table_path(fqn: str, key: str, path: str, store: str, where: Location | None,
                     settings: dict[str, str]) -> Diagnostic | None:
    """An adls store's table at a URL: abfss:// or az:// of the store's account (its credentials are the account's)."""
    parts = split_azure_url(path)
    if parts is None:
        return Diagnostic("DSF-E250", f"the '{key}' of table '{fqn}' (adls store '{store}') is a {scheme_of(path)}:// "
                          "URL the store cannot reach", where,
                          hint="supported: a path under the store's root, abfss://CONTAINER@ACCOUNT.dfs.core.windows"
                               ".net/PATH or az://CONTAINER/PATH")
    account = parts[1]
    if account is not None and account != settings.get("account"):
        return Diagnostic("DSF-E392", f"the '{key}' of table '{fqn}' names the storage account '{account}', but its "
                          f"adls store '{store}' is account '{settings.get('account')}'", where,
                          hint="a store's credentials are its account's: declare an adls store for that account")
    return None
