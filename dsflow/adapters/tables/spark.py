"""Lake and warehouse tables' side of the query driver (the `spark` facet, adapters/spark/facets.py).

A table is read as the stream of its appended rows by the format's Python data source (`dsflow_<format>`, the
facet's `reader`: reading.py here for Delta), with the store's settings as `store.<setting>` options.

A query writing a table goes through foreachBatch: each micro-batch becomes an Arrow table in the driver and one
commit in the table, tagged with the query's app id and the batch id (`TableFormat.write_batch`), so a batch Spark
replays after a crash is skipped. Streams append; changelogs and aggregations (a primary key) are merged on the
key, and a row whose __keep is false (a changelog's delete, a group left empty) deletes its key.
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass
from typing import Any

from dsflow.adapters.spark.gate import spark_query_name

STORE_PREFIX = "store."
"""A store setting passed to a table's data source as the option `store.<setting>`."""


@dataclass(frozen=True)
class TableSpark:
    """The facet of the stores whose relations are tables in the formats `kinds` (adapters/tables/__init__.py)."""

    kinds: tuple[str, ...]
    reader: str
    """"module:class" of the Python data source that reads its tables as streams."""
    location_option: str = "path"
    """The reader's option naming the table: its location (a folder, an URI), or its name in a catalog."""
    async_checkpoint: bool = False

    def client_option(self, setting: str) -> str:
        return f"{STORE_PREFIX}{setting}"

    def source_fields(self, project: Any, query: Any, store: Any, relation: Any) -> dict[str, Any]:
        if relation.kind != "table":
            return {"client_config": store.client_config()}
        from dsflow.adapters.tables import table_ref

        ref = table_ref(project.root, store, relation)
        return {"kind": ref.format, "client_config": dict(store.properties), "options": {
            self.location_option: ref.location,
            "value.columns": json.dumps([[c.name, c.type] for c in relation.columns])}}

    def sink_spec(self, project: Any, query: Any, store: Any, relation: Any, columns: list[str]) -> Any:
        return table_sink_spec(project, query, store, relation, columns)

    def data_sources(self) -> list[type]:
        module, _, name = self.reader.partition(":")
        return [getattr(importlib.import_module(module), name)]

    def stream(self, spark: Any, spec: Any, source: Any) -> Any:
        """The table's appended rows: its options, store settings and start offsets."""
        from dsflow.adapters.spark.gate import gate_options

        reader = spark.readStream.format(f"dsflow_{source.kind}").option("starting.position",
                                                                          source.starting_position)
        for key, value in source.options.items():
            reader = reader.option(key, value)
        for key, value in source.client_config.items():
            reader = reader.option(self.client_option(key), value)
        if source.starting_offsets:
            reader = reader.option("starting.offsets", json.dumps(source.starting_offsets))
        return reader.options(**gate_options(spec.name)).load()

    def value_layout(self, source: Any) -> str:
        from dsflow.formats.decoding import STRUCT

        return STRUCT  # a table's rows arrive as columns

    def sink_rows(self, result: Any, sink: Any) -> Any:
        return result

    def start(self, spec: Any, frame: Any, trigger: dict[str, Any], options: dict[str, str]) -> Any:
        return start_table(spec, frame, trigger)

    def lag_reader(self) -> None:
        return None


def table_sink_spec(project: Any, query: Any, store: Any, relation: Any, columns: list[str]) -> Any:
    """The sink of a query writing a table relation: its table format is the sink's kind."""
    from dsflow.adapters.spark.spec import SinkSpec
    from dsflow.adapters.tables import table_ref

    ref = table_ref(project.root, store, relation)
    return SinkSpec(topic=ref.location, client_config=ref.settings, columns=columns, kind=ref.format,
                    output_mode=query.output_mode, key_columns=list(relation.primary_key), options=ref.options)


def start_table(spec: Any, frame: Any, trigger: dict[str, Any]) -> Any:
    """Start a query writing a table (created from the result's schema if apply has not yet)."""
    from dsflow.adapters.tables import table_format

    ref = sink_ref(spec)
    fmt = table_format(ref.format)
    if not fmt.exists(ref):
        types = {f.name: f.dataType.simpleString().upper() for f in frame.schema.fields}
        fmt.create(ref, [(c, types.get(c, "STRING")) for c in spec.sink.columns], list(spec.sink.key_columns))
    return (frame.writeStream.foreachBatch(table_writer(spec))
            .outputMode(spec.sink.output_mode)
            .option("checkpointLocation", spec.checkpoint)
            .queryName(spark_query_name(spec.name))
            .trigger(**trigger)
            .start())


def sink_ref(spec: Any) -> Any:
    from dsflow.adapters.tables import TableRef

    sink = spec.sink
    return TableRef(sink.kind, sink.topic, dict(sink.client_config), dict(sink.options))


def table_writer(spec: Any):
    """The foreachBatch function: one commit per micro-batch, skipped when the table already has it."""
    from dsflow.adapters.spark.frames import KEEP
    from dsflow.adapters.tables import app_id, table_format

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


SPARK = TableSpark(kinds=("delta", "snowflake"), reader="dsflow.adapters.tables.reading:DeltaDataSource")
