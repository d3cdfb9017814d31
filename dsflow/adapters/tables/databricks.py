"""Optional registration of a databricks store's Delta tables in its Unity Catalog.

The table's files are written like any Delta table (adapters/tables/delta.py). When the store names a
workspace (`host`, `token`, `warehouse_id`) and the table a catalog ('databricks.catalog.name' or the
store's `catalog`), apply runs `CREATE TABLE IF NOT EXISTS catalog.schema.table USING DELTA LOCATION ...`
through the SQL Statement Execution API, and destroy drops it. Without a workspace, registration is
skipped and apply records why: the Delta table is still written and readable at its location.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from dsflow.adapters.tables import TableRef
from dsflow.errors import DsflowError

SKIPPED = "skipped: no workspace configured (store properties host, token, warehouse_id and a catalog)"


def catalog_name(ref: TableRef) -> str | None:
    catalog = ref.options.get("databricks.catalog.name")
    if not catalog:
        return None
    schema, table = ref.options.get("databricks.schema.name"), ref.options.get("databricks.table.name")
    return ".".join(f"`{p}`" for p in (catalog, schema, table))


def configured(ref: TableRef) -> bool:
    return bool(ref.settings.get("host") and ref.settings.get("token") and ref.settings.get("warehouse_id")
                and catalog_name(ref))


def register(ref: TableRef) -> str:
    """Register the table in the catalog; returns what happened, for state and `dsflow status`."""
    if not configured(ref):
        return SKIPPED
    _statement(ref, f"CREATE TABLE IF NOT EXISTS {catalog_name(ref)} USING DELTA LOCATION '{ref.location}'")
    return f"registered as {catalog_name(ref)}"


def unregister(ref: TableRef) -> None:
    if configured(ref):
        _statement(ref, f"DROP TABLE IF EXISTS {catalog_name(ref)}")


def _statement(ref: TableRef, sql: str) -> None:
    host = ref.settings["host"].rstrip("/")
    if "://" not in host:
        host = "https://" + host
    body = json.dumps({"warehouse_id": ref.settings["warehouse_id"], "statement": sql,
                       "wait_timeout": "30s"}).encode()
    request = urllib.request.Request(f"{host}/api/2.0/sql/statements", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {ref.settings['token']}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise DsflowError("DSF-E755", f"Databricks workspace {host} did not run '{sql}': {err}",
                          hint="check the store's host, token and warehouse_id") from err
    state = (answer.get("status") or {}).get("state")
    if state != "SUCCEEDED":
        error = (answer.get("status") or {}).get("error") or answer
        raise DsflowError("DSF-E755", f"Databricks workspace {host} did not run '{sql}': {state}: {error}",
                          hint="check the catalog and schema exist and the token may create tables there")
