"""The load rules of the lake and warehouse table stores (s3, filesystem, adls, databricks: Delta Lake tables;
snowflake: Snowflake tables): the `rules` facet (core/stores.py), asked with the store's type.

An `s3` or `filesystem` store holds Delta Lake tables under its root (s3://bucket/prefix or a local folder), a
`databricks` store does too and may register each table in a Unity Catalog, an `adls` store under
abfss://CONTAINER@ACCOUNT.../PREFIX, a `snowflake` store is an account. The WITH properties of a CREATE TABLE
follow DeltaStream's names ('databricks.table.name', 'snowflake.db.name', ...); 'delta.path' places a Delta table
at a path under the store's root, or at a full URI.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dsflow.adapters.tables.settings import SETTINGS
from dsflow.adapters.tables.lakepaths import azure_checks, store_path_diagnostics, table_path_diagnostic
from dsflow.errors import Diagnostic, Location
from dsflow.load.store_settings import StoreSettings

Report = Callable[[Diagnostic], None]
Where = Callable[[str], Location | None]

DELTA_PROPS = {"delta.path", "table.data.file.location"}
DATABRICKS_PROPS = {"databricks.catalog.name", "databricks.schema.name", "databricks.table.name"}
SNOWFLAKE_PROPS = {"snowflake.db.name", "snowflake.schema.name", "snowflake.table.name"}
TABLE_PROPS = {"snowflake": SNOWFLAKE_PROPS, "databricks": DELTA_PROPS | DATABRICKS_PROPS}
"""The WITH properties a table takes, by store type (the other Delta stores: DELTA_PROPS)."""

SNOWFLAKE_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,254}")
CATALOG_NAME = re.compile(r"[^\s./\x00-\x1f\x7f]{1,255}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class TableRules:
    """The `rules` facet of the table stores: settings, table properties and options, identifiers (DSF-E208)."""

    merging_sinks = ("a Delta or Snowflake table sink", "a Delta (filesystem, s3, databricks) or Snowflake store")
    """How a table sink that merges a changelog's deletes is named in DSF-E157 (what it is, where to write it)."""

    setting_names = (("table", "delta.path"), ("table", "table.data.file.location"),
                     *(("table", p) for p in ("databricks.catalog.name", "databricks.schema.name",
                                              "databricks.table.name", "snowflake.db.name", "snowflake.schema.name",
                                              "snowflake.table.name")))
    """(object, WITH property) of each setting that places a table (core/settings.py classes them: identity)."""

    def settings(self, store_type: str) -> type[StoreSettings] | None:
        return SETTINGS.get(store_type)

    def store_diagnostics(self, name: str, store_type: str, bootstrap: str, properties: dict[str, str],
                          location: Location | None, where: Where) -> list[Diagnostic]:
        """A databricks store's files (a bucket or a path), an adls store's names and credentials (DSF-E390..E391),
        and folder settings written as URLs (DSF-E250)."""
        out = []
        if store_type == "databricks" and not ({"bucket", "path"} & set(properties)):
            out.append(Diagnostic("DSF-E095", f"the databricks store '{name}' needs 'bucket' (S3) or 'path' (a "
                                  "local folder) for its tables' files", location,
                                  hint="see docs/project.md (Table stores)"))
        if store_type == "adls":
            out += [Diagnostic(code, f"the {store_type} store '{name}': {text}", location, hint=hint)
                    for code, text, hint in azure_checks(properties)]
        return out + store_path_diagnostics(name, store_type, properties, where)

    def table_props(self, store_type: str) -> set[str]:
        return TABLE_PROPS.get(store_type, DELTA_PROPS)

    def table_options(self, fqn: str, props: dict[str, str], store: Any, location: Location | None,
                      prop_location: Where, report: Report) -> tuple[str, dict[str, str]] | None:
        """(the table's name on its store, its table options): DB.SCHEMA.TABLE in Snowflake, else a Delta path."""
        if store.type == "snowflake":
            options = _snowflake_options(fqn, props, store, location, report)
            if options is None:
                return None
            return ".".join(options[k] for k in ("snowflake.db.name", "snowflake.schema.name",
                                                 "snowflake.table.name")), options
        path = props.get("delta.path") or props.get("table.data.file.location") or fqn.rsplit(".", 1)[-1]
        key = "delta.path" if props.get("delta.path") else "table.data.file.location"
        bad_path = table_path_diagnostic(fqn, key, path, store.name, prop_location(key) or location,
                                         dict(store.properties) if store.type == "adls" else None)
        if bad_path is not None:
            report(bad_path)
            return None
        options = {"delta.path": path}
        if store.type == "databricks":
            options.update(_databricks_options(fqn, props, store))
        return path, options

    def check_table(self, store_type: str, relation: Any, report: Report) -> None:
        """DSF-E208: a table identifier the warehouse would refuse (a Snowflake name dsflow writes unquoted, a
        Unity Catalog name, a Delta path without control characters)."""
        options = relation.table_options or {}

        def check(kind: str, name: str) -> None:
            ok, text = _identifier(kind, name)
            if not ok:
                report(Diagnostic("DSF-E208", f"the {kind} name {name!r} of table '{relation.fqn}' is not valid",
                                  relation.location, hint=f"use {text}"))

        if store_type == "snowflake":
            for key in ("snowflake.db.name", "snowflake.schema.name", "snowflake.table.name"):
                check("snowflake", options.get(key, ""))
            return
        check("delta", options.get("delta.path", ""))
        if store_type == "databricks":
            for key in ("databricks.schema.name", "databricks.table.name"):
                check("databricks", options.get(key, ""))
            if options.get("databricks.catalog.name"):
                check("databricks", options["databricks.catalog.name"])


def _identifier(kind: str, name: str) -> tuple[bool, str]:
    if kind == "snowflake":
        return bool(SNOWFLAKE_IDENTIFIER.fullmatch(name)), "a letter or '_', then letters, digits, '_' or '$' " \
                                                           "(at most 255)"
    if kind == "databricks":
        return bool(CATALOG_NAME.fullmatch(name)), "1-255 characters, no space, '.', '/' or control character"
    return bool(name.strip()) and not _CONTROL.search(name), "a path without control characters"


def _snowflake_options(fqn: str, props: dict[str, str], store: Any, location: Location | None,
                       report: Report) -> dict[str, str] | None:
    database = props.get("snowflake.db.name") or store.properties.get("database")
    if not database:
        report(Diagnostic("DSF-E098", f"Snowflake table '{fqn}' has no database", location,
                          hint="add 'snowflake.db.name' = 'DB' to its WITH clause, or 'database' to the store"))
        return None
    schema = props.get("snowflake.schema.name") or store.properties.get("schema") or "PUBLIC"
    table = props.get("snowflake.table.name") or fqn.rsplit(".", 1)[-1]
    return {"snowflake.db.name": database.upper(), "snowflake.schema.name": schema.upper(),
            "snowflake.table.name": table.upper()}


def _databricks_options(fqn: str, props: dict[str, str], store: Any) -> dict[str, str]:
    _, schema, name = fqn.split(".")
    catalog = props.get("databricks.catalog.name") or store.properties.get("catalog") or ""
    return {"databricks.catalog.name": catalog, "databricks.schema.name": props.get("databricks.schema.name") or schema,
            "databricks.table.name": props.get("databricks.table.name") or name}


RULES = TableRules()
