"""Lake and warehouse tables: what CREATE TABLE ... AS SELECT writes, and what `dsflow entity` browses.

One module per table format, each implementing `TableFormat`; a store kind's `table_format` (core/stores.py) names
the format of its tables. This folder implements two (`FORMATS`); a format with a folder of its own is that
kind's `tables` facet:

    delta      Delta Lake (delta-rs) on a local folder, s3://, or abfss:// (store types filesystem, s3, adls,
               databricks)
    snowflake  Snowflake tables through snowflake-connector-python

A `TableRef` is everything a format needs to find one table: it is built by apply (executors) and,
from the sink spec, by the query driver. Every micro-batch is written once: the batch id is recorded
with the data in one commit (a Delta transaction action, a ledger row in the same Snowflake
transaction, summary properties of a snapshot), so a batch replayed after a crash is skipped.
"""

from __future__ import annotations

import importlib

from dsflow.adapters.tables.base import (
    TableFormat, TableRef, added_columns, app_id, delta_root, latest_per_key, table_ref,
)
from dsflow.core import stores
from dsflow.errors import DsflowError

__all__ = ["FORMATS", "TableFormat", "TableRef", "added_columns", "app_id", "delta_root",
           "latest_per_key", "store_format", "table_format", "table_ref"]


FORMATS: dict[str, str] = {
    "delta": "dsflow.adapters.tables.delta:DeltaFormat",
    "snowflake": "dsflow.adapters.tables.snowflake:SnowflakeFormat",
}
"""Table format -> "module:class" implementing TableFormat here (imported when first asked)."""


def table_format(name: str) -> TableFormat:
    """The TableFormat of a format: one of this folder's, or the `tables` facet of the kind whose format it is (a
    format's folder may import adapters/tables/base.py without a cycle)."""
    if name in FORMATS:
        module, _, cls = FORMATS[name].partition(":")
        return getattr(importlib.import_module(module), cls)()
    home = stores.format_home(name)
    implementation = home.facet("tables") if home is not None else None
    if implementation is None:
        raise DsflowError("DSF-E750", f"unknown table format '{name}'", hint="see docs/project.md (Table stores)")
    return implementation()


def store_format(store_type: str) -> str:
    """The table format of a store type's tables (DSF-E750 if it holds none)."""
    found = stores.table_format_of(store_type)
    if found is None:
        raise DsflowError("DSF-E750", f"a {store_type} store holds no tables")
    return found
