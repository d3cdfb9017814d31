"""From a resolved Query to a QuerySpec: DeltaStream SQL rewritten into Spark SQL over temp views."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from dsflow.core.model import Column, Project, Query
from dsflow.adapters.spark.spec import QuerySpec, SinkSpec, SourceSpec
from dsflow.load.sql import parse_one_select

KEY_COLUMN = "__key"


@dataclass(frozen=True)
class StartAt:
    """Where a new checkpoint's sources start: carried offsets per topic, a position, or a timestamp."""

    offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    position: str | None = None
    timestamp: int | None = None


def spark_type(sql_type: str) -> str:
    return exp.DataType.build(sql_type).sql(dialect="spark")


def schema_ddl(columns: tuple[Column, ...] | list[Column]) -> str:
    return ", ".join(f"`{c.name}` {spark_type(c.type)}" for c in columns)


def view_name(index: int, query: Query) -> str:
    return f"__src{index}_{query.fqn.replace('.', '_')}"


def spark_select(query: Query) -> str:
    """The query's SELECT with each source table replaced by its view and the key carried through."""
    select = parse_one_select(query.select_sql)
    for index, table in enumerate(list(select.find_all(exp.Table))):
        alias = table.alias_or_name
        table.replace(exp.Table(this=exp.to_identifier(view_name(index, query)),
                                alias=exp.TableAlias(this=exp.to_identifier(alias))))
    alias = query.sources[0].alias
    select = select.select(exp.column(KEY_COLUMN, table=alias).as_(KEY_COLUMN), copy=False)
    return select.sql(dialect="spark")


def query_spec(project: Project, query: Query, version: str, checkpoint: str, status_path: str,
               start: StartAt | None = None) -> QuerySpec:
    """The driver's spec; `start` positions the sources of a fresh checkpoint (carried offsets or a replay)."""
    start = start or StartAt()
    sources = []
    for index, source in enumerate(query.sources):
        relation = project.relation(source.relation)
        store = project.store(relation.store)
        sources.append(SourceSpec(view=view_name(index, query), topic=relation.topic,
                                  client_config=store.client_config(), schema_ddl=schema_ddl(relation.columns),
                                  starting_position=start.position or source.starting_position,
                                  starting_offsets=start.offsets.get(relation.topic),
                                  starting_timestamp=start.timestamp))
    sink_relation = project.relation(query.sink)
    sink_store = project.store(sink_relation.store)
    return QuerySpec(
        name=query.fqn, version=version, master=project.runtime.spark_master,
        spark_conf={**project.runtime.spark_conf, **query.spark_conf}, checkpoint=checkpoint,
        status_path=status_path, trigger_interval=query.trigger_interval, sources=sources,
        sink=SinkSpec(topic=sink_relation.topic, client_config=sink_store.client_config(),
                      columns=[c.name for c in query.output_columns]),
        select_sql=spark_select(query),
    )
