"""Queries whose sink is a lake or warehouse table: foreachBatch into Delta Lake or Snowflake.

Each micro-batch becomes an Arrow table in the driver and one commit in the table, tagged with the
query's app id and the batch id (adapters/tables), so a batch Spark replays after a crash is skipped.
Streams append; changelogs and aggregations (a primary key) are merged on the key, and a row whose
__keep is false (a changelog's delete, a group left empty) deletes its key.
"""

from __future__ import annotations

import sys
from typing import Any

from dsflow.adapters.spark.frames import KEEP
from dsflow.adapters.spark.spec import QuerySpec
from dsflow.adapters.tables import TableRef, app_id, table_format


def sink_ref(spec: QuerySpec) -> TableRef:
    sink = spec.sink
    return TableRef(sink.kind, sink.topic, dict(sink.client_config), dict(sink.options))


def table_writer(spec: QuerySpec):
    """The foreachBatch function: one commit per micro-batch, skipped when the table already has it."""
    ref = sink_ref(spec)
    fmt = table_format(ref.format)
    columns = list(spec.sink.columns)
    key = list(spec.sink.key_columns)
    writer_id = app_id(spec.name, spec.checkpoint)

    def write(batch, batch_id: int) -> None:
        keep = [KEEP] if KEEP in batch.columns else []  # a changelog's deletes: __keep false
        data = batch.select(*[f"`{c}`" for c in columns + keep]).toArrow()
        if not fmt.write_batch(ref, data, key, writer_id, batch_id):
            print(f"batch {batch_id} is already in {ref.location}; skipped (a replay)", file=sys.stderr, flush=True)

    return write


def start_table(spec: QuerySpec, result, trigger: dict[str, Any]):
    """Start a query writing a table (created from the result's schema if apply has not yet)."""
    ref = sink_ref(spec)
    fmt = table_format(ref.format)
    if not fmt.exists(ref):
        types = {f.name: f.dataType.simpleString().upper() for f in result.schema.fields}
        fmt.create(ref, [(c, types.get(c, "STRING")) for c in spec.sink.columns], list(spec.sink.key_columns))
    return (result.writeStream.foreachBatch(table_writer(spec))
            .outputMode(spec.sink.output_mode)
            .option("checkpointLocation", spec.checkpoint)
            .queryName(spec.name.replace(".", "_"))
            .trigger(**trigger)
            .start())
