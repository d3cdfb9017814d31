"""Table stores and CREATE TABLE ... AS SELECT: the settings a store needs and where a table lives.

Table stores keep their settings in `properties`: an `s3` or `filesystem` store holds Delta Lake tables
under its root (s3://bucket/prefix or a local folder), a `databricks` store does too and may register
each table in a Unity Catalog, a `snowflake` store is an account, an `iceberg` store a warehouse and a SQL catalog
(its tables NAMESPACE.TABLE: 'iceberg.namespace.name', default the relation's schema). The WITH properties of a CREATE TABLE
follow DeltaStream's names ('databricks.table.name', 'snowflake.db.name', ...); 'delta.path' places a
Delta table at a path under the store's root, or at a full URI.
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core.model import Column, Relation, Store
from dsflow.errors import Diagnostic, Location
from dsflow.load.lakepaths import AZURE_SCHEMES, adls_checks, scheme_of, split_azure_url, table_path_diagnostic
from dsflow.load.suggest import did_you_mean

DELTA_STORES = {"s3", "filesystem", "databricks", "adls"}
TABLE_STORES = DELTA_STORES | {"snowflake", "iceberg"}
READABLE_STORES = DELTA_STORES | {"iceberg"}
"""Stores whose tables queries read as the streams of their appends (adapters/tables/reading.py, iceberg/reading.py)."""
_S3 = {"bucket", "prefix", "endpoint_url", "region", "access_key_id", "secret_access_key", "session_token"}
_AZURE = {"account_key", "sas_token", "client_id", "client_secret", "tenant_id", "endpoint"}
STORE_SETTINGS: dict[str, tuple[set[str], set[str]]] = {
    # type: (required, allowed)
    "s3": ({"bucket"}, _S3),
    "filesystem": ({"path"}, {"path"}),
    # Azure Data Lake Storage (adapters/tables/adls.py): Delta tables under abfss://CONTAINER@ACCOUNT.../PREFIX
    "adls": ({"account", "container"}, {"account", "container", "prefix"} | _AZURE),
    "databricks": (set(), _S3 | {"path", "host", "token", "warehouse_id", "catalog"}),
    "snowflake": ({"account"}, {"account", "user", "password", "warehouse", "role", "database", "schema", "host",
                                "port", "protocol", "authenticator", "token"}),
    # a CDC source (load/queries.py) and entities; connection settings as libpq names them, or one dsn
    # Kinesis streams (adapters/kinesis); credentials through {{ env_var('...') }}, or the AWS default chain
    "kinesis": (set(), {"region", "endpoint", "access_key_id", "secret_access_key", "session_token"}),
    "postgresql": (set(), {"dsn", "host", "port", "database", "dbname", "user", "username", "password", "sslmode"}),
    # Iceberg tables (adapters/iceberg/catalog.py): a warehouse and pyiceberg's SQL catalog; S3 as for s3 stores
    "iceberg": ({"warehouse"}, {"warehouse", "catalog_uri", "catalog_name"} | (_S3 - {"bucket", "prefix"}) | _AZURE),
}
DELTA_PROPS = {"delta.path", "table.data.file.location"}
DATABRICKS_PROPS = {"databricks.catalog.name", "databricks.schema.name", "databricks.table.name"}
SNOWFLAKE_PROPS = {"snowflake.db.name", "snowflake.schema.name", "snowflake.table.name"}
ICEBERG_PROPS = {"iceberg.namespace.name", "iceberg.table.name"}
TABLE_PROPS = {"store"} | DELTA_PROPS | DATABRICKS_PROPS | SNOWFLAKE_PROPS | ICEBERG_PROPS
STORE_TABLE_PROPS = {"snowflake": SNOWFLAKE_PROPS, "databricks": DELTA_PROPS | DATABRICKS_PROPS,
                     "iceberg": ICEBERG_PROPS}
"""The WITH properties a table takes, by store type (Delta stores: DELTA_PROPS)."""

Report = Callable[[Diagnostic], None]


def store_settings_diagnostics(name: str, type_: str, bootstrap: str, properties: dict[str, str],
                               location: Location | None) -> list[Diagnostic]:
    """A Kafka store needs bootstrap_servers; a table store needs its own settings and nothing else."""
    if type_ == "kafka":
        if not bootstrap:
            return [Diagnostic("DSF-E011", f"missing required key 'bootstrap_servers' of kafka store '{name}'",
                               location, hint="add bootstrap_servers: host:port")]
        return []
    if type_ not in STORE_SETTINGS:
        return []
    required, allowed = STORE_SETTINGS[type_]
    out = []
    if bootstrap:
        out.append(Diagnostic("DSF-E095", f"bootstrap_servers is not a setting of the {type_} store '{name}'",
                              location, hint="remove it; see docs/project.md (Table stores)"))
    for key in sorted(set(properties) - allowed):
        out.append(Diagnostic("DSF-E095", f"unknown property '{key}' of the {type_} store '{name}'", location,
                              hint=did_you_mean(key, allowed) or f"allowed: {', '.join(sorted(allowed))}"))
    for key in sorted(required - set(properties)):
        out.append(Diagnostic("DSF-E095", f"the {type_} store '{name}' needs the property '{key}'", location,
                              hint="see docs/project.md (Table stores)"))
    if type_ == "databricks" and not ({"bucket", "path"} & set(properties)):
        out.append(Diagnostic("DSF-E095", f"the databricks store '{name}' needs 'bucket' (S3) or 'path' (a local "
                              "folder) for its tables' files", location, hint="see docs/project.md (Table stores)"))
    return out + [Diagnostic(code, f"the {type_} store '{name}': {text}", location, hint=hint)
                  for code, text, hint in STORE_CHECKS.get(type_, _no_checks)(properties)]


def _no_checks(properties: dict[str, str]) -> list[tuple[str, str, str]]:
    return []


def _iceberg_checks(properties: dict[str, str]) -> list[tuple[str, str, str]]:
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
    return _iceberg_adls_checks(warehouse, properties)


def _iceberg_adls_checks(warehouse: str, properties: dict[str, str]) -> list[tuple[str, str, str]]:
    """An Iceberg warehouse on ADLS is abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX (pyiceberg's adlfs
    FileIO knows no az://) with one credential; Azure settings on another warehouse would not be used."""
    scheme = scheme_of(warehouse)
    azure = sorted(k for k in _AZURE if properties.get(k))
    if scheme not in AZURE_SCHEMES:
        return [("DSF-E395", f"the Azure setting(s) {', '.join(azure)} would not be used: the warehouse {warehouse} "
                 "is not on Azure Data Lake Storage", "remove them, or put the warehouse on abfss://")] if azure else []
    parts = split_azure_url(warehouse)
    if parts is None or parts[1] is None:
        return [("DSF-E394", f"the warehouse {warehouse} is not abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX",
                 "Iceberg metadata names files by absolute URI, and pyiceberg's Azure FileIO (adlfs) reads abfs[s]:// "
                 "URIs with the account in the host: write the warehouse that way")]
    return [check for check in adls_checks({**properties, "account": parts[1], "container": parts[0]})]


STORE_CHECKS: dict[str, Callable[[dict[str, str]], list[tuple[str, str, str]]]] = {"iceberg": _iceberg_checks,
                                                                                    "adls": adls_checks}
"""Store type -> its own property checks beyond required/allowed: (code, message, hint) of each problem."""


def table_relation(fqn: str, columns: tuple[Column, ...], primary_key: tuple[str, ...], props: dict[str, str],
                   stores: dict[str, Store], default_store: str | None, location: Location | None,
                   prop_location: Callable[[str], Location | None], report: Report) -> Relation | None:
    """The relation a CREATE TABLE ... AS SELECT writes: a Delta table or a Snowflake table."""
    store_name = props.get("store") or default_store
    store = stores.get(store_name or "")
    where = prop_location("store") or location
    if store is None:
        report(Diagnostic("DSF-E021", f"unknown store '{store_name}' for '{fqn}'", where,
                          hint=did_you_mean(store_name or "", stores)))
        return None
    if store.type not in TABLE_STORES:
        report(Diagnostic("DSF-E096", f"table '{fqn}' is in the {store.type} store '{store.name}'", where,
                          hint="CREATE TABLE ... AS SELECT writes to an s3, filesystem, adls, databricks, snowflake "
                               "or iceberg store: name one with 'store' = '...'"))
        return None
    allowed = {"store"} | STORE_TABLE_PROPS.get(store.type, DELTA_PROPS)
    for key in sorted(set(props) - allowed):
        if key in TABLE_PROPS:
            report(Diagnostic("DSF-E097", f"'{key}' does not apply to the {store.type} store '{store.name}'",
                              prop_location(key) or location, hint=f"allowed here: {', '.join(sorted(allowed))}"))
    name = fqn.rsplit(".", 1)[-1]
    if store.type == "snowflake":
        options = _snowflake_options(fqn, props, store, location, report)
        if options is None:
            return None
        topic = ".".join(options[k] for k in ("snowflake.db.name", "snowflake.schema.name", "snowflake.table.name"))
    elif store.type == "iceberg":
        options = {"iceberg.namespace.name": props.get("iceberg.namespace.name") or fqn.split(".")[1],
                   "iceberg.table.name": props.get("iceberg.table.name") or name}
        topic = f"{options['iceberg.namespace.name']}.{options['iceberg.table.name']}"
    else:
        path = props.get("delta.path") or props.get("table.data.file.location") or name
        key = "delta.path" if props.get("delta.path") else "table.data.file.location"
        bad_path = table_path_diagnostic(fqn, key, path, store.name, prop_location(key) or location,
                                         dict(store.properties) if store.type == "adls" else None)
        if bad_path is not None:
            report(bad_path)
            return None
        options = {"delta.path": path}
        if store.type == "databricks":
            options.update(_databricks_options(fqn, props, store))
        topic = path
    return Relation(fqn=fqn, kind="table", columns=columns, primary_key=primary_key, store=store.name, topic=topic,
                    table_options=options, location=location)


def _snowflake_options(fqn: str, props: dict[str, str], store: Store, location: Location | None,
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


def _databricks_options(fqn: str, props: dict[str, str], store: Store) -> dict[str, str]:
    _, schema, name = fqn.split(".")
    catalog = props.get("databricks.catalog.name") or store.properties.get("catalog") or ""
    return {"databricks.catalog.name": catalog, "databricks.schema.name": props.get("databricks.schema.name") or schema,
            "databricks.table.name": props.get("databricks.table.name") or name}


def check_not_read(sources, relations: dict[str, Relation], stores: dict[str, Store], location: Location | None,
                   report: Report) -> None:
    """A query reads a Delta table (s3, filesystem, databricks stores) or an Iceberg table as the stream of its
    appended rows; other tables are sinks only, and a table a query merges into (a key) has no appends to follow."""
    for source in sources:
        relation = relations.get(source.relation)
        if relation is None or relation.kind != "table":
            continue
        store = stores.get(relation.store)
        kind = store.type if store is not None else "?"
        if kind not in READABLE_STORES:
            report(Diagnostic("DSF-E099", f"'{relation.fqn}' is a table in the store '{relation.store}'; queries "
                              "cannot read tables", location,
                              hint="read the stream or changelog the table is written from instead"))
        elif relation.defined_by_query and relation.primary_key:
            report(Diagnostic("DSF-E382", f"'{relation.fqn}' is merged into on ({', '.join(relation.primary_key)}) by "
                              "its query, so its commits are not appends a query can read as a stream", location,
                              hint="read the changelog or stream it is written from, or read an append-only table"))
