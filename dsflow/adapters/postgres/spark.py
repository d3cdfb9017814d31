"""PostgreSQL's side of the query driver (the `spark` facet, adapters/spark/facets.py): a table's changes read by
the `dsflow_postgres_cdc` data source (reading.py), and a materialized view kept in a PostgreSQL table, written
by foreachBatch one transaction per micro-batch (mv.py); a CREATE TABLE ... AS SELECT's table is written like
every table format's (adapters/tables/spark.py, the `postgresql` format: tables.py here)."""

from __future__ import annotations

import json
from typing import Any

from dsflow.adapters.spark.facets import SparkFacet

DB, SCHEMA = "postgresql.db.name", "postgresql.schema.name"
TABLE_FORMAT = "postgresql"
"""The sink kind of a table relation: its table format (core/stores.py)."""


class PostgresSpark:
    # a change stream (source); a view's table, a table (sinks)
    kinds: tuple[str, ...] = ("postgres_cdc", "postgres", TABLE_FORMAT)
    async_checkpoint = False

    def client_option(self, setting: str) -> str:
        return f"pg.{setting}"

    def source_fields(self, project: Any, query: Any, store: Any, relation: Any) -> dict[str, Any]:
        """The table's changes instead of a topic; a changelog made of them gets its key fields (spark/cdc.py)."""
        from dsflow.adapters.spark.cdc import key_option
        from dsflow.sql.cdc import cdc_tables, image_types

        opts = relation.table_options
        return {"kind": "postgres_cdc", "client_config": dict(store.properties), "options": {
            "database": opts[DB], "tables": ",".join(f"{s}.{t}" for s, t in cdc_tables(opts)),
            "slot": opts["postgresql.slot.name"], "publication": opts["postgresql.publication.name"],
            "fields": json.dumps(image_types(relation)), **key_option(project, query)}}

    def sink_spec(self, project: Any, query: Any, store: Any, relation: Any, columns: list[str]) -> Any:
        """A table's sink (kind: its table format), or a materialized view's (kind `postgres`)."""
        from dsflow.adapters.spark.spec import SinkSpec

        if relation.kind == "table":
            from dsflow.adapters.tables.spark import table_sink_spec

            return table_sink_spec(project, query, store, relation, columns)
        return SinkSpec(topic=relation.topic, client_config=dict(store.properties), columns=columns, kind="postgres",
                        output_mode=query.output_mode, key_columns=list(relation.primary_key),
                        options=dict(relation.table_options))

    def data_sources(self) -> list[type]:
        from dsflow.adapters.postgres.datasource import PostgresCdcDataSource

        return [PostgresCdcDataSource]

    def stream(self, spark: Any, spec: Any, source: Any) -> Any:
        from dsflow.adapters.postgres.reading import cdc_stream

        return cdc_stream(spark, spec, source)

    def value_layout(self, source: Any) -> str:
        from dsflow.formats.decoding import value_layout

        return value_layout(source.value_format, source.value_columns, source.dlq_topic, parses_json=False)

    def sink_rows(self, result: Any, sink: Any) -> Any:
        return result

    def start(self, spec: Any, frame: Any, trigger: dict[str, Any], options: dict[str, str]) -> Any:
        if spec.sink.kind == TABLE_FORMAT:
            from dsflow.adapters.tables.spark import start_table

            return start_table(spec, frame, trigger)
        from dsflow.adapters.spark.frames import start_view

        return start_view(spec, frame, trigger, self)

    def ensure_table(self, sink: Any, columns: list[tuple[str, str]]) -> None:
        from dsflow.adapters.postgres import mv

        mv.ensure_table(sink.client_config, sink.options.get(DB), sink.options[SCHEMA], sink.topic, columns,
                        sink.key_columns)

    def write_batch(self, sink: Any, rows: list[tuple], deletes: list[tuple], replace: dict[str, bool],
                    checkpoint: str, batch_id: int) -> None:
        from dsflow.adapters.postgres import mv

        extra: dict[str, Any] = {**({"deletes": deletes} if deletes else {}), **replace}
        mv.write_batch(sink.client_config, sink.options.get(DB), sink.options[SCHEMA], sink.topic, sink.columns,
                       sink.key_columns, rows, checkpoint, batch_id, **extra)

    def lag_reader(self) -> Any:
        from dsflow.adapters.postgres.lag import WalBehind

        return WalBehind()


# a change stream's facet has no send_rows (only stores whose rules say `row_dead_letters` take dead-lettered rows)
SPARK: SparkFacet = PostgresSpark()  # type: ignore[assignment]
