"""The load rules of an `iceberg` store (the `rules` facet, core/stores.py): a warehouse and pyiceberg's SQL
catalog; its tables are NAMESPACE.TABLE ('iceberg.namespace.name', default the relation's schema, and
'iceberg.table.name', default the relation's name)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dsflow.adapters.tables.lakepaths import AZURE_SCHEMES, azure_checks, scheme_of, split_azure_url
from dsflow.adapters.iceberg.settings import IcebergSettings
from dsflow.adapters.tables.settings import AzureAccess
from dsflow.errors import Diagnostic, Location

Report = Callable[[Diagnostic], None]
Where = Callable[[str], Location | None]

TABLE_PROPS = {"iceberg.namespace.name", "iceberg.table.name"}
NAME = re.compile(r"[^./\x00-\x1f\x7f]{1,255}")
"""An Iceberg namespace or table name: no `.`, `/` or control character, at most 255."""


class IcebergRules:
    """The `rules` facet of an iceberg store."""

    setting_names = (("table", "iceberg.namespace.name"), ("table", "iceberg.table.name"))
    """(object, WITH property) of each setting that places a table (core/settings.py classes them: identity)."""

    def settings(self, store_type: str) -> type[IcebergSettings]:
        return IcebergSettings

    def store_diagnostics(self, name: str, store_type: str, bootstrap: str, properties: dict[str, str],
                          location: Location | None, where: Where) -> list[Diagnostic]:
        return [Diagnostic(code, f"the {store_type} store '{name}': {text}", location, hint=hint)
                for code, text, hint in _warehouse_checks(properties)]

    def table_props(self, store_type: str) -> set[str]:
        return TABLE_PROPS

    def table_options(self, fqn: str, props: dict[str, str], store: Any, location: Location | None,
                      prop_location: Where, report: Report) -> tuple[str, dict[str, str]]:
        options = {"iceberg.namespace.name": props.get("iceberg.namespace.name") or fqn.split(".")[1],
                   "iceberg.table.name": props.get("iceberg.table.name") or fqn.rsplit(".", 1)[-1]}
        return f"{options['iceberg.namespace.name']}.{options['iceberg.table.name']}", options

    def check_table(self, store_type: str, relation: Any, report: Report) -> None:
        """DSF-E208: a namespace or table name the catalog would refuse."""
        options = relation.table_options or {}
        for key in ("iceberg.namespace.name", "iceberg.table.name"):
            name = options.get(key, "")
            if not NAME.fullmatch(name):
                report(Diagnostic("DSF-E208", f"the iceberg name {name!r} of table '{relation.fqn}' is not valid",
                                  relation.location, hint="use 1-255 characters, no '.', '/' or control character"))


def _warehouse_checks(properties: dict[str, str]) -> list[tuple[str, str, str]]:
    """An Iceberg warehouse is absolute (its metadata names files by absolute path); an s3:// one names its
    catalog database (the default SQLite file lives in a local warehouse)."""
    warehouse = properties.get("warehouse", "")
    if not warehouse:
        return []
    if "://" not in warehouse and not warehouse.startswith("/"):
        return [("DSF-E230", f"warehouse '{warehouse}' is not an absolute folder or URI",
                 "set 'warehouse' to /abs/path or s3://bucket/prefix (Iceberg metadata names files by absolute path)")]
    if "://" in warehouse and not warehouse.startswith("file://") and not properties.get("catalog_uri"):
        return [("DSF-E231", f"the warehouse {warehouse} needs a 'catalog_uri'",
                 "name the catalog database: postgresql+psycopg2://user@host/db or sqlite:////abs/catalog.db")]
    return _azure_checks(warehouse, properties)


def _azure_checks(warehouse: str, properties: dict[str, str]) -> list[tuple[str, str, str]]:
    """An Iceberg warehouse on Azure Data Lake Storage is abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX
    (pyiceberg's adlfs FileIO knows no az://) with one credential; Azure settings on another warehouse would not be
    used."""
    scheme = scheme_of(warehouse)
    azure = sorted(k for k in AzureAccess.model_fields if properties.get(k))
    if scheme not in AZURE_SCHEMES:
        return [("DSF-E395", f"the Azure setting(s) {', '.join(azure)} would not be used: the warehouse {warehouse} "
                 "is not on Azure Data Lake Storage", "remove them, or put the warehouse on abfss://")] if azure else []
    parts = split_azure_url(warehouse)
    if parts is None or parts[1] is None:
        return [("DSF-E394", f"the warehouse {warehouse} is not abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX",
                 "Iceberg metadata names files by absolute URI, and pyiceberg's Azure FileIO (adlfs) reads abfs[s]:// "
                 "URIs with the account in the host: write the warehouse that way")]
    return list(azure_checks({**properties, "account": parts[1], "container": parts[0]}))


RULES = IcebergRules()
