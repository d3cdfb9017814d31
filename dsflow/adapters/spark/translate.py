"""From a resolved Query to a QuerySpec: DeltaStream SQL rewritten into Spark SQL over temp views."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from dsflow.core.model import Column, Project, Query, Relation
from dsflow.adapters.spark.spec import QuerySpec, SinkSpec, SourceSpec
from dsflow.load.sql import parse_one_select

KEY_COLUMN = "__key"
EVENT_TIME = "__ts"
KAFKA_TIMESTAMP = "__kafka_ts"
WINDOW_COLUMN = "__window"
WINDOW_FIELDS = {"window_start": "start", "window_end": "end"}


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
    """The query's SELECT in Spark SQL over the source views.

    Each source table becomes its view; a window's window_start/window_end become fields of the view's
    __window column (grouped as one, so Spark keeps the watermark); an interval join gets its event-time
    range; COUNT(DISTINCT x) becomes SIZE(COLLECT_SET(x)) (Spark has no streaming distinct aggregate);
    and the source record's key is carried as __key unless the sink key is made of output columns.
    """
    select = parse_one_select(query.select_sql)
    for index, table in enumerate(list(select.find_all(exp.Table))):
        alias = table.alias_or_name
        table.replace(exp.Table(this=exp.to_identifier(view_name(index, query)),
                                alias=exp.TableAlias(this=exp.to_identifier(alias))))
    if query.window is not None:
        _window_columns(select, query.window.source)
    if query.join_within:
        _join_range(select, query)
    for count in list(select.find_all(exp.Count)):
        if isinstance(count.this, exp.Distinct):
            count.replace(exp.func("SIZE", exp.func("COLLECT_SET", count.this.expressions[0])))
    if not query.key_columns:
        select = select.select(_carried_key(query).as_(KEY_COLUMN), copy=False)
    return select.sql(dialect="spark")


def _window_columns(select: exp.Select, alias: str) -> None:
    group = select.args.get("group")
    if group is not None:
        kept = [g for g in group.expressions if not (isinstance(g, exp.Column) and g.table == alias
                                                     and g.name in WINDOW_FIELDS)]
        group.set("expressions", [exp.column(WINDOW_COLUMN, table=alias), *kept])
    for column in list(select.find_all(exp.Column)):
        if column.table == alias and column.name in WINDOW_FIELDS and not column.args.get("db"):
            column.replace(exp.column(WINDOW_FIELDS[column.name], table=WINDOW_COLUMN, db=alias))


def _join_range(select: exp.Select, query: Query) -> None:
    join = select.args["joins"][0]
    left, right = query.sources[0].alias, query.sources[1].alias
    within = spark_duration(query.join_within)
    bound = exp.condition(f"{right}.{EVENT_TIME} BETWEEN {left}.{EVENT_TIME} - INTERVAL {within} "
                          f"AND {left}.{EVENT_TIME} + INTERVAL {within}", dialect="spark")
    join.set("on", exp.and_(join.args["on"], bound))


def _carried_key(query: Query) -> exp.Expr:
    keys = [exp.column(KEY_COLUMN, table=s.alias) for s in query.sources]
    select = parse_one_select(query.select_sql)
    joins = select.args.get("joins") or []
    if len(keys) > 1 and joins and (joins[0].side or "").upper() == "FULL":
        return exp.func("COALESCE", *keys)
    return keys[0]


def spark_duration(text: str) -> str:
    """A duration as Spark reads it everywhere (window, watermark, INTERVAL): whole milliseconds."""
    number, unit = text.split()
    factor = {"milliseconds": 1, "seconds": 1000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000}
    return f"{round(float(number) * factor[unit])} milliseconds"


def spark_interval(text: str) -> str:
    """A trigger interval Spark parses: '500 ms' (accepted by dsflow) becomes '500 milliseconds'."""
    from dsflow.load.select import normalized_duration

    duration = normalized_duration(text)
    unit = text.strip().lstrip("0123456789. ").lower()
    return spark_duration(duration) if duration and unit in ("ms", "s", "sec", "secs", "m", "min", "mins", "h",
                                                              "d") else text


def event_time_sql(relation: Relation) -> str:
    """The event time of a relation's records: its 'timestamp' column (epoch ms or TIMESTAMP) or the record's."""
    column = relation.column(relation.timestamp) if relation.timestamp else None
    if column is None:
        return KAFKA_TIMESTAMP
    if column.type.upper() in ("BIGINT", "INT"):
        return f"timestamp_millis(`{column.name}`)"
    return f"`{column.name}`"


def source_specs(project: Project, query: Query, start: StartAt | None = None) -> list[SourceSpec]:
    start = start or StartAt()
    timed = query.window is not None or query.join_within is not None
    sources = []
    for index, source in enumerate(query.sources):
        relation = project.relation(source.relation)
        store = project.store(relation.store)
        window = None
        if query.window is not None and query.window.source == source.alias:
            size = spark_duration(query.window.size)
            window = [size, spark_duration(query.window.advance) if query.window.advance else size]
        cdc = _cdc_source(store, relation)
        sources.append(SourceSpec(view=view_name(index, query), topic=relation.topic, **cdc,
                                  client_config=dict(store.properties) if cdc else store.client_config(),
                                  schema_ddl=schema_ddl(relation.columns),
                                  starting_position=start.position or source.starting_position,
                                  starting_offsets=start.offsets.get(relation.topic),
                                  starting_timestamp=start.timestamp,
                                  event_time=event_time_sql(relation) if timed else None,
                                  watermark_delay=spark_duration(query.watermark_delay) if timed else None,
                                  window=window))
    return sources


def _cdc_source(store, relation: Relation) -> dict:
    """A postgresql store's stream reads the table's changes (adapters/postgres) instead of a topic."""
    if store.type != "postgresql":
        return {}
    opts = relation.table_options
    return {"kind": "postgres_cdc", "options": {
        "database": opts["postgresql.db.name"], "schema": opts["postgresql.schema.name"],
        "table": opts["postgresql.table.name"], "slot": opts["postgresql.slot.name"],
        "publication": opts["postgresql.publication.name"]}}


def sink_spec(project: Project, query: Query) -> SinkSpec:
    relation = project.relation(query.sink)
    columns = [c.name for c in query.output_columns]
    if relation.kind == "materialized_view":
        from dsflow.adapters.sqlite.mv import database_path

        database = database_path(project.root, project.state_path, project.environment)
        return SinkSpec(topic=relation.topic, client_config={}, columns=columns, kind="sqlite",
                        output_mode=query.output_mode, key_columns=list(relation.primary_key),
                        database=str(database))
    store = project.store(relation.store)
    if relation.kind == "table":
        from dsflow.adapters.tables import table_ref

        ref = table_ref(project.root, store, relation)
        return SinkSpec(topic=ref.location, client_config=ref.settings, columns=columns, kind=ref.format,
                        output_mode=query.output_mode, key_columns=list(relation.primary_key), options=ref.options)
    return SinkSpec(topic=relation.topic, client_config=store.client_config(), columns=columns,
                    output_mode=query.output_mode, key_columns=list(query.key_columns))


def query_spec(project: Project, query: Query, version: str, checkpoint: str, status_path: str,
               start: StartAt | None = None) -> QuerySpec:
    """The driver's spec; `start` positions the sources of a fresh checkpoint (carried offsets or a replay)."""
    return QuerySpec(
        name=query.fqn, version=version, master=project.runtime.spark_master,
        spark_conf={**project.runtime.spark_conf, **query.spark_conf}, checkpoint=checkpoint,
        status_path=status_path, trigger_interval=spark_interval(query.trigger_interval),
        sources=source_specs(project, query, start), sink=sink_spec(project, query),
        select_sql=spark_select(query),
    )
