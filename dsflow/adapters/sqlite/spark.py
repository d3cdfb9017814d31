"""The query driver's side of a materialized view kept by dsflow itself (no store; adapters/spark/facets.py,
LOCAL_VIEWS): a table in the SQLite file beside the state, written by foreachBatch one transaction per
micro-batch (mv.py). It reads no sources."""

from __future__ import annotations

from typing import Any


class SqliteViews:
    kinds = ("sqlite",)
    async_checkpoint = False

    def sink_spec(self, project: Any, query: Any, store: Any, relation: Any, columns: list[str]) -> Any:
        from dsflow.adapters.spark.spec import SinkSpec
        from dsflow.adapters.sqlite.mv import database_path

        database = database_path(project.root, project.state_path, project.environment)
        return SinkSpec(topic=relation.topic, client_config={}, columns=columns, kind="sqlite",
                        output_mode=query.output_mode, key_columns=list(relation.primary_key),
                        database=str(database))

    def data_sources(self) -> list[type]:
        return []

    def sink_rows(self, result: Any, sink: Any) -> Any:
        return result

    def start(self, spec: Any, frame: Any, trigger: dict[str, Any], options: dict[str, str]) -> Any:
        from dsflow.adapters.spark.frames import start_view

        return start_view(spec, frame, trigger, self)

    def ensure_table(self, sink: Any, columns: list[tuple[str, str]]) -> None:
        from dsflow.adapters.sqlite import mv

        mv.ensure_table(sink.database, sink.topic, columns, sink.key_columns)

    def write_batch(self, sink: Any, rows: list[tuple], deletes: list[tuple], replace: dict[str, bool],
                    checkpoint: str, batch_id: int) -> None:
        from dsflow.adapters.sqlite import mv

        mv.write_batch(sink.database, sink.topic, sink.columns, sink.key_columns, rows, checkpoint, batch_id,
                       deletes=deletes, **replace)

    def lag_reader(self) -> None:
        return None


SPARK = SqliteViews()
