"""An `iceberg` store's catalog: pyiceberg's SQL catalog (SQLAlchemy) over a warehouse.

Store properties (checked by load/tables.py):

    warehouse          where data and metadata files go: an absolute folder or s3://bucket/prefix (Iceberg
                       metadata names files by absolute path, so a relative folder would break on the next cwd)
    catalog_uri        the SQLAlchemy URI of the catalog database: `sqlite:////abs/catalog.db` or
                       `postgresql+psycopg2://user:pass@host/db`; default for a local warehouse:
                       `sqlite:///<warehouse>/catalog.db` (an s3:// warehouse must name one)
    catalog_name       the catalog's name in its database (default `dsflow`): several catalogs may share one
    endpoint_url, region, access_key_id, secret_access_key, session_token
                       an s3:// warehouse's object store (pyiceberg's s3.* properties)
    account_key, sas_token, client_id, client_secret, tenant_id, endpoint
                       an abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX warehouse's credentials (pyiceberg's
                       fsspec FileIO with adlfs: its adls.* properties; adapters/tables/adls.py)
"""

from __future__ import annotations

from typing import Any

from dsflow.errors import DsflowError

S3_PROPERTIES = {"endpoint_url": "s3.endpoint", "region": "s3.region", "access_key_id": "s3.access-key-id",
                 "secret_access_key": "s3.secret-access-key", "session_token": "s3.session-token"}


def warehouse_uri(settings: dict[str, str]) -> str:
    """The warehouse as pyiceberg wants it: file:///abs/path or s3://bucket/prefix."""
    warehouse = settings.get("warehouse", "").rstrip("/")
    if "://" in warehouse:
        return warehouse
    if not warehouse.startswith("/"):
        raise DsflowError("DSF-E230", f"the iceberg warehouse '{warehouse}' is not an absolute folder or URI",
                          hint="set the store's 'warehouse' to /abs/path or s3://bucket/prefix")
    return "file://" + warehouse


def catalog_uri(settings: dict[str, str]) -> str:
    """The catalog database's SQLAlchemy URI: the store's, or a SQLite file in a local warehouse."""
    if settings.get("catalog_uri"):
        return settings["catalog_uri"]
    warehouse = warehouse_uri(settings)
    if not warehouse.startswith("file://"):
        raise DsflowError("DSF-E231", f"the iceberg warehouse {warehouse} needs a 'catalog_uri'",
                          hint="name the catalog database, e.g. postgresql+psycopg2://user@host/db "
                               "or sqlite:////abs/catalog.db")
    return f"sqlite:///{warehouse[len('file://'):]}/catalog.db"


_OPEN: dict[tuple[tuple[str, str], ...], Any] = {}
"""Catalogs opened in this process, by settings: one SQLAlchemy engine (and pool) per catalog, not one per batch."""


def catalog(settings: dict[str, str]) -> Any:
    """The store's pyiceberg SqlCatalog (its tables created in the catalog database on first use)."""
    key = tuple(sorted(settings.items()))
    if key not in _OPEN:
        _OPEN[key] = _open(settings)
    return _OPEN[key]


def _open(settings: dict[str, str]) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    properties = {"uri": catalog_uri(settings), "warehouse": warehouse_uri(settings)}
    if properties["warehouse"].startswith("file://"):
        from pathlib import Path

        Path(properties["warehouse"][len("file://"):]).mkdir(parents=True, exist_ok=True)
    properties |= {option: settings[key] for key, option in S3_PROPERTIES.items() if settings.get(key)}
    properties |= _adls_properties(settings, properties["warehouse"])
    try:
        return SqlCatalog(settings.get("catalog_name") or "dsflow", **properties)
    except Exception as err:  # noqa: BLE001 - SQLAlchemy raises per dialect (no driver, refused, bad URI)
        raise DsflowError("DSF-E232", f"cannot open the iceberg catalog at {_safe(properties['uri'])}: {err}",
                          hint="check the store's catalog_uri (a SQLAlchemy URI) and that its database is up") from err


def _adls_properties(settings: dict[str, str], warehouse: str) -> dict[str, str]:
    """An abfss:// warehouse: pyiceberg's fsspec FileIO (adlfs) and its adls.* credentials."""
    from dsflow.adapters.tables import adls

    if not adls.is_azure(warehouse):
        return {}
    return {"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"} | adls.fsspec_properties(
        settings, adls.account_of(warehouse, settings))


def identifier(location: str) -> tuple[str, str]:
    """(namespace, table) of a table location `namespace.table` (the namespace may itself hold dots)."""
    namespace, _, table = location.rpartition(".")
    if not namespace or not table:
        raise DsflowError("DSF-E233", f"'{location}' is not an iceberg table NAMESPACE.TABLE",
                          hint="list what is there with 'dsflow entity list --store NAME'")
    return namespace, table


def _safe(uri: str) -> str:
    """A catalog URI without its password, for messages."""
    head, at, tail = uri.rpartition("@")
    if not at or "://" not in head:
        return uri
    scheme, _, credentials = head.partition("://")
    return f"{scheme}://{credentials.partition(':')[0]}:***@{tail}"
