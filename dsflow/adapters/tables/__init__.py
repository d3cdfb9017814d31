"""Lake and warehouse tables: what CREATE TABLE ... AS SELECT writes, and what `dsflow entity` browses.

One module per table format, each implementing `TableFormat`; `STORE_FORMATS` names the format of each store type,
`FORMATS` where each format is implemented:

    delta      Delta Lake (delta-rs) on a local folder or s3:// (store types filesystem, s3, databricks)
    snowflake  Snowflake tables through snowflake-connector-python
    iceberg    Apache Iceberg tables through pyiceberg's SQL catalog (store type iceberg; adapters/iceberg/)

A `TableRef` is everything a format needs to find one table: it is built by apply (executors) and,
from the sink spec, by the query driver. Every micro-batch is written once: the batch id is recorded
with the data in one commit (a Delta transaction action, a ledger row in the same Snowflake
transaction, summary properties of an Iceberg snapshot), so a batch replayed after a crash is skipped.
"""

from __future__ import annotations

import importlib

from dsflow.adapters.tables.base import (
    STORE_FORMATS, TableFormat, TableRef, added_columns, app_id, delta_root, latest_per_key, table_ref,
)
from dsflow.errors import DsflowError

__all__ = ["FORMATS", "STORE_FORMATS", "TableFormat", "TableRef", "added_columns", "app_id", "delta_root",
           "latest_per_key", "table_format", "table_ref"]


FORMATS: dict[str, str] = {
    "delta": "dsflow.adapters.tables.delta:DeltaFormat",
    "snowflake": "dsflow.adapters.tables.snowflake:SnowflakeFormat",
    "iceberg": "dsflow.adapters.iceberg.tables:IcebergFormat",
}
"""Table format -> "module:class" implementing TableFormat (imported when first asked; a format's folder may import
adapters/tables/base.py without a cycle)."""


def table_format(name: str) -> TableFormat:
    if name not in FORMATS:
        raise DsflowError("DSF-E750", f"unknown table format '{name}'", hint="see docs/project.md (Table stores)")
    module, _, cls = FORMATS[name].partition(":")
    return getattr(importlib.import_module(module), cls)()
