"""From a resolved Query to a QuerySpec: DeltaStream SQL rewritten into Spark SQL over temp views."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from sqlglot import exp

from dsflow.core import stores
from dsflow.core.engines import StartAt
from dsflow.core.model import (
    ChainedChangelogJoin, Column, IntervalJoin, Project, Query, Relation, Source, TemporalJoin, Window,
)
from dsflow.adapters.spark import facets
from dsflow.adapters.spark.changelog_join import aggregated_source, joined_select, view_name as changelog_join_view
from dsflow.adapters.spark.retract import changelog_source, rewrite
from dsflow.adapters.spark.spec import (
    RECORD_TIMESTAMP, ChainStepSpec, ChangelogJoinSpec, ChangelogStepSpec, ExpectationSpec, FunctionSpec, JoinChainSpec,
    QuerySpec,
    RetractSpec,
    SOURCE_TIMESTAMP, SinkSpec, SourceSpec, TemporalSpec, TopNSpec, OverSpec,
)
from dsflow.adapters.spark.nested import nested_select, windowed_join
from dsflow.adapters.spark.stacked import outer_select, stacked_spec
from dsflow.adapters.spark.unions import union_select
from dsflow.sql.aggregates import GLOBAL_KEY
from dsflow.sql.functions import Declared, to_spark
from dsflow.sql.plan import QueryPlan, lower

KEY_COLUMN = "__key"
EVENT_TIME = "__ts"
WINDOW_COLUMN = "__window"
WINDOW_FIELDS = {"window_start": "start", "window_end": "end"}
DELETED = "__deleted"
KEEP = "__keep"
TEMPORAL_ALIAS = "__tj"
ROWS = "__rows"
SOURCE_PARTITION, SOURCE_OFFSET = "__src_partition", "__src_offset"
"""The source record's place, carried to the rows of a query whose DEAD LETTER expectations name it."""
PLACE = ("__partition", "__offset")
"""A stream record's place in its source: its key in a join of streams that is aggregated or ranked."""


def spark_type(sql_type: str) -> str:
    return exp.DataType.build(sql_type).sql(dialect="spark")


def schema_ddl(columns: tuple[Column, ...] | list[Column]) -> str:
    return ", ".join(f"`{c.name}` {spark_type(c.type)}" for c in columns)


def view_name(index: int, query: Query) -> str:
    return f"__src{index}_{query.fqn.replace('.', '_')}"


def spark_select(query: Query, project: Project | None = None) -> str:
    """The query's SELECT in Spark SQL over the source views (`spark_tree`), lowered to its plan here."""
    return spark_tree(lower(query, project), project).sql(dialect="spark")


def spark_tree(plan: QueryPlan, project: Project | None = None) -> exp.Query:
    """The plan's SELECT in Spark SQL over the source views.

    Each source table becomes its view; a window's window_start/window_end become fields of the view's
    __window column (grouped as one, so Spark keeps the watermark); an interval join gets its event-time
    range; an aggregation's HAVING in update mode becomes __keep (`_having`); COUNT(DISTINCT x) becomes
    SIZE(COLLECT_SET(x)) (Spark has no streaming distinct aggregate);
    array subscripts count from 1 and give NULL out of range (`array_subscripts`);
    and the source record's key is carried as __key unless the sink key is made of output columns.
    """
    query = plan.query
    if plan.shape == "union":  # UNION ALL of streams: per branch
        return union_select(plan, project, spark_tree, view_name)
    if plan.shape == "nested":  # per subquery
        return nested_select(plan, project, spark_tree, view_name, _declared(query, project))
    select = _over_views(plan, project)
    if plan.window is not None:
        _window_columns(select, plan.window.source)
    if plan.join_within and not plan.join_chain:
        _join_range(select, query)
        if plan.window is not None:  # a window over the join's rows (sql/windowed_join.py)
            windowed_join(select, query)
    if plan.temporal_join is not None or plan.stream_chain:  # the joined view (temporal.py, join_chain.py)
        select.set("joins", None)
        view = chain_view(query) if plan.stream_chain else temporal_view(query)
        select.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(view),
                                                    alias=exp.TableAlias(this=exp.to_identifier(TEMPORAL_ALIAS)))))
    if plan.changelog_join is not None:  # adapters/spark/changelog_join.py
        joined_select(select, changelog_join_view(query.fqn))
    if query.deletes != "none":
        _deletes(select, query)
    _having(select, query)
    for count in list(select.find_all(exp.Count)):
        if isinstance(count.this, exp.Distinct) and count.find_ancestor(exp.Window) is None:  # OVER: over.py
            count.replace(exp.func("SIZE", exp.func("COLLECT_SET", count.this.expressions[0])))
    if project is not None and carries_position(project, query):  # for DEAD LETTER expectations' headers
        alias = plan.sources[0].alias
        select.select(exp.column("__partition", table=alias).as_(SOURCE_PARTITION),
                      exp.column("__offset", table=alias).as_(SOURCE_OFFSET), copy=False)
    if query.trigger == "realtime":  # one stream, stateless (load/realtime.py): a row per source record
        select.select(exp.column(RECORD_TIMESTAMP, table=plan.sources[0].alias).as_(SOURCE_TIMESTAMP), copy=False)
    if not query.key_columns:
        select = select.select(_carried_key(plan).as_(KEY_COLUMN), copy=False)
    return select


def carries_position(project: Project, query: Query) -> bool:
    """Whether each result row carries its source record's partition and offset: a query with DEAD LETTER
    expectations reading one log whose store sends them (its rows stay one per source record: stateless, no join;
    the store kind's `rules` facet says, asked through the store registry, not the loader)."""
    if not any(e.action == "dead_letter" for e in query.expectations) or len(query.sources) != 1 \
            or query.stateful or query.temporal_join is not None or query.join_chain:
        return False
    relation = project.relation(query.sources[0].relation)
    store = project.store(relation.store) if relation is not None and relation.store else None
    return store is not None and bool(getattr(stores.facet(store.type, "rules"), "row_dead_letters", None))


def _over_views(plan: QueryPlan, project: Project | None) -> exp.Select:
    """The plan's SELECT in Spark's function names, each source table replaced by its view."""
    query = plan.query
    select = to_spark(array_subscripts(plan.select()), _declared(query, project))
    for index, table in enumerate(list(select.find_all(exp.Table))):
        alias = table.alias_or_name
        table.replace(exp.Table(this=exp.to_identifier(view_name(index, query)),
                                alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return cast(exp.Select, select)  # a union's branches come here one by one (union_select)


def retract_spec(project: Project, plan: QueryPlan) -> tuple[str, RetractSpec] | None:
    """A GROUP BY over a changelog, or over a join of two changelogs (its joined view read as a changelog), with
    retractions (adapters/spark/retract.py): (the per-change SELECT, the spec); else None."""
    query = plan.query
    if query.output_mode != "update":
        return None
    if plan.stacked is not None:  # over an aggregating subquery's changelog view (adapters/spark/stacked.py)
        select = _over_views(plan, project)
        return rewrite(select, outer_select(select, query), f"__retract_{query.fqn.replace('.', '_')}")
    first_relation = project.relation(plan.sources[0].relation)
    assert first_relation is not None  # a loaded project's sources name its relations
    if first_relation.kind != "changelog" and plan.changelog_join is None:  # streams joined: sql/keyed_join.py
        return None
    select, first = _over_views(plan, project), plan.sources[0]
    source = aggregated_source(select, changelog_join_view(query.fqn)) if plan.changelog_join is not None else \
        changelog_source(first.alias, first_relation.primary_key)
    return rewrite(select, source, f"__retract_{query.fqn.replace('.', '_')}")


def top_n_spec(project: Project, plan: QueryPlan) -> tuple[str, TopNSpec] | None:
    """A ROW_NUMBER top-N (adapters/spark/topn.py): (the per-record SELECT, the spec); else None."""
    if plan.top_n is None:
        return None
    from dsflow.adapters.spark.topn import rewrite as rank_rewrite

    source = project.relation(plan.sources[0].relation)
    assert source is not None  # a loaded project's sources name its relations
    joined = changelog_join_view(plan.query.fqn) if plan.changelog_join is not None else None  # sql/keyed_join.py
    return rank_rewrite(_over_views(plan, project), plan.top_n, plan.sources[0].alias,
                        source.primary_key if source.kind == "changelog" else None, joined)


def over_spec(project: Project, plan: QueryPlan) -> tuple[str, OverSpec] | None:
    """Bounded OVER aggregates (adapters/spark/over.py): (the per-record SELECT, the spec); else None."""
    if plan.over is None:
        return None
    from dsflow.adapters.spark.over import rewrite as over_rewrite

    columns = tuple(c.model_copy(update={"type": spark_type(c.type)}) for c in plan.columns)
    select = spark_tree(plan, project)
    assert isinstance(select, exp.Select)  # an OVER query's SELECT (sql/over.py)
    return over_rewrite(select, plan.over, plan.sources[0].alias, columns)


def array_subscripts(select: exp.Query) -> exp.Query:
    """`arr[i]` and `ELEMENT_AT(arr, i)` count from 1 in DeltaStream; Spark's `arr[i]` counts from 0 and both fail
    out of range (ANSI mode). Each becomes Spark's `GET(arr, i - 1)`: 0-based, NULL out of range. A subscript of a
    MAP (`m['k']`) stays as it is; the base's type is the one the plan typed it with (sql/plan.py, from the source
    relations' columns), or, untyped, a string subscript is taken for a map key."""
    brackets = [b for b in select.find_all(exp.Bracket) if len(b.expressions) == 1]
    for bracket in brackets:
        base, index = bracket.this, bracket.expressions[0]
        kind = base.type.this if base.type is not None else exp.DType.UNKNOWN
        if kind == exp.DType.MAP or (kind != exp.DType.ARRAY and index.is_string):
            continue
        zero_based = exp.Literal.number(int(index.name) - 1) if index.is_int else \
            exp.Sub(this=exp.paren(index.copy(), copy=False), expression=exp.Literal.number(1))
        bracket.replace(exp.Anonymous(this="GET", expressions=[base.copy(), zero_based]))
    return select


def _window_columns(select: exp.Select, alias: str) -> None:
    group = select.args.get("group")
    if group is not None:
        kept = [g for g in group.expressions if not (isinstance(g, exp.Column) and g.table == alias
                                                     and g.name in WINDOW_FIELDS)]
        group.set("expressions", [exp.column(WINDOW_COLUMN, table=alias), *kept])
    for column in list(select.find_all(exp.Column)):
        if column.table == alias and column.name in WINDOW_FIELDS and not column.args.get("db"):
            column.replace(exp.column(WINDOW_FIELDS[column.name], table=WINDOW_COLUMN, db=alias))


def temporal_view(query: Query) -> str:
    return f"__temporal_{query.fqn.replace('.', '_')}"


def _deletes(select: exp.Select, query: Query) -> None:
    """A changelog read row by row: 'drop' skips tombstones; 'emit' turns the WHERE into __keep, so a tombstone or
    a row that does not match becomes a delete of its key (frames.sink_frame, the view writers)."""
    deleted = exp.column(DELETED, table=query.sources[0].alias)
    where = select.args.get("where")
    if query.deletes == "drop":
        select.where(exp.not_(deleted), copy=False)
        return
    keep: exp.Expr = exp.not_(deleted)
    if where is not None:
        keep = exp.and_(exp.func("COALESCE", exp.paren(where.this), exp.false()), keep)
    select.set("where", None)
    select.select(keep.as_(KEEP), copy=False)


def _having(select: exp.Select, query: Query) -> None:
    """An aggregation in update mode emits a group's new row whenever it changes, so HAVING as a filter would leave
    a group that stops matching at its last matching row. HAVING becomes __keep instead: a false one deletes the
    group's key (a tombstone: frames.sink_frame; a deleted row: the view and table writers). HAVING reads
    aggregates and grouped columns, selected or not (validation refuses a select alias there: DSF-E041), so it
    moves into the select list as it is. A session window's rows are appended once, when the session closes: its
    HAVING stays a filter."""
    having = select.args.get("having")
    if having is None or query.output_mode != "update" or (query.window and (query.window.kind == "session"
                                                                             or query.window.processing_time)):
        return
    select.set("having", None)
    select.select(exp.func("COALESCE", exp.paren(having.this, copy=False), exp.false()).as_(KEEP), copy=False)


def _join_range(select: exp.Select, query: Query) -> None:
    join = select.args["joins"][0]
    left, right = query.sources[0].alias, query.sources[1].alias
    assert query.join_within is not None  # an interval join (its callers check)
    within = spark_duration(query.join_within)
    bound = exp.condition(f"{right}.{EVENT_TIME} BETWEEN {left}.{EVENT_TIME} - INTERVAL {within} "
                          f"AND {left}.{EVENT_TIME} + INTERVAL {within}", dialect="spark")
    join.set("on", exp.and_(join.args["on"], bound))


def _carried_key(plan: QueryPlan) -> exp.Expr:
    if plan.query.output_mode == "update":  # an aggregate without GROUP BY (sql/aggregates.py): its one row's key
        return exp.Literal.string(GLOBAL_KEY)
    if plan.temporal_join is not None or plan.stream_chain:
        return exp.column(KEY_COLUMN, table=TEMPORAL_ALIAS)
    keys = [exp.column(KEY_COLUMN, table=s.alias) for s in plan.sources]
    if len(keys) > 1 and plan.join_sides and plan.join_sides[0] == "FULL":
        return exp.func("COALESCE", *keys)
    return keys[0]


def spark_duration(text: str) -> str:
    """A duration as Spark reads it everywhere (window, watermark, INTERVAL): whole milliseconds."""
    from dsflow.sql.dialect import milliseconds

    return f"{milliseconds(text)} milliseconds"


def spark_interval(text: str) -> str:
    """A trigger interval Spark parses: '500 ms' (accepted by dsflow) becomes '500 milliseconds'."""
    from dsflow.sql.select import normalized_duration

    duration = normalized_duration(text)
    unit = text.strip().lstrip("0123456789. ").lower()
    return spark_duration(duration) if duration and unit in ("ms", "s", "sec", "secs", "m", "min", "mins", "h",
                                                              "d") else text


def event_time_sql(relation: Relation, timestamp: str | None = None) -> str:
    """The event time of a relation's records: the source's or the relation's 'timestamp' column (epoch ms or
    TIMESTAMP), else the record's."""
    timestamp = timestamp or relation.timestamp
    column = relation.column(timestamp) if timestamp else None
    if column is None:
        return RECORD_TIMESTAMP
    if column.type.upper() in ("BIGINT", "INT"):
        return f"timestamp_millis(`{column.name}`)"
    return f"`{column.name}`"


def source_specs(project: Project, plan: QueryPlan, start: StartAt | None = None) -> list[SourceSpec]:
    start = start or StartAt()
    query = plan.query
    timed = plan.window is not None or plan.join_within is not None or plan.temporal_join is not None \
        or bool(plan.nested) or plan.over is not None
    unwatermarked = plan.temporal_join is not None or plan.stream_chain  # a changelog's records are never late
    sources = []
    for index, source in enumerate(query.sources):
        relation = project.relation(source.relation)
        assert relation is not None  # a loaded project's sources name its relations
        store = project.store(relation.store)
        assert store is not None  # and its relations their stores
        window = _window_spec(plan.source_windows[index], source.alias)
        read = facets.for_store(store.type).source_fields(project, query, store, relation)  # kind, client_config..
        if query.deserialization_errors and "dlq_topic" in read:  # a log's reader decodes records
            read["on_error"] = query.deserialization_errors
        ranked = plan.top_n is not None or plan.over is not None or _keyed_streams(query)
        if carries_position(project, query) or ranked:  # ties by place
            read["keep_position"] = True
        if query.trigger == "realtime":  # its records' latency (core/latency.py)
            read["keep_timestamp"] = True
        sources.append(SourceSpec(view=view_name(index, query), topic=relation.topic, **read,
                                  schema_ddl=schema_ddl(relation.columns),
                                  starting_position=start.position or source.starting_position,
                                  starting_offsets=start.offsets.get(relation.topic),
                                  starting_timestamp=start.timestamp,
                                  ending_offsets=start.until.get(relation.topic),
                                  ending_offsets_file=start.until_file,
                                  **_times(query, relation, source, timed, unwatermarked),
                                  lookup=source.lookup,
                                  **window, changelog_key=_changelog_key(relation), gaps=relation.read_gaps))
    return sources


def _keyed_streams(query: Query) -> bool:
    """A regular join of streams aggregated or ranked (sql/keyed_join.py): each record keyed by its place."""
    return (query.changelog_join is not None and query.changelog_join.streams) or query.stacked is not None


PROCESSING_TIME = "current_timestamp()"
"""A processing-time window's time (sql/proctime.py): in a streaming query Spark's batch timestamp, the start of the
micro-batch, the same for all its rows; watermarked with no delay (no row of a later micro-batch is earlier)."""


def _times(query: Query, relation: Relation, source: Source, timed: bool, unwatermarked: bool) -> dict:
    """The source's event time and watermark delay (None: not needed)."""
    if query.window is not None and query.window.processing_time and query.window.source == source.alias:
        return {"event_time": PROCESSING_TIME, "watermark_delay": "0 milliseconds"}
    return {"event_time": event_time_sql(relation, source.timestamp) if timed else None,
            "watermark_delay": spark_duration(query.watermark_delay) if timed and not
            (unwatermarked and relation.kind == "changelog") else None}


def _window_spec(window: Window | None, alias: str) -> dict:
    """The source's window: [size, slide] of a TUMBLE or HOP, or the gap of a SESSION."""
    if window is None or window.source != alias:
        return {}
    size = spark_duration(window.size)
    if window.kind == "session":
        return {"session_gap": size}
    return {"window": [size, spark_duration(window.advance) if window.advance else size]}


def log_format(project: Project, store, relation: Relation, dlq_topic: str | None, key_format: str | None) -> dict:
    """A log source's value format, columns, schema registry, dead-letter target and key format (the store's
    facet says which dead-letter target and key format it takes)."""
    registry = project.schema_registry(store.schema_registry)
    return {"value_format": relation.value_format, "value_columns": [[c.name, c.type] for c in relation.columns],
            "registry": registry.client_config() if registry else {}, "dlq_topic": dlq_topic, "key_format": key_format}


def sink_format(project: Project, relation: Relation) -> dict:
    """A log sink's value format; avro: the schema made from the relation's columns, its subject, the registry."""
    from dsflow.core.formats import REGISTRY_FORMATS, avro_schema

    store = project.store(relation.store)
    assert store is not None  # a loaded project's relations name its stores
    registry = project.schema_registry(store.schema_registry)
    if relation.value_format == "json":
        keyed = {"key_format": relation.key_format} if relation.key_format else {}
        return keyed | ({"registry": registry.client_config()} if registry and relation.key_format in
                        REGISTRY_FORMATS else {})
    settings: dict = {"value_format": relation.value_format, "registry": registry.client_config() if registry else {},
                      "key_format": relation.key_format}
    if relation.value_format in REGISTRY_FORMATS:
        database, schema, name = relation.fqn.split(".")
        columns = [(c.name, c.type) for c in relation.columns]
        if relation.value_format == "protobuf":
            from dsflow.formats.proto_schemas import schema_text

            settings["value_schema"] = schema_text(name, f"{database}.{schema}", columns)
        else:
            settings["value_schema"] = avro_schema(name, f"{database}.{schema}", columns)
        settings["value_subject"] = relation.value_subject
    return settings


def _changelog_key(relation: Relation) -> dict[str, str]:
    if relation.kind != "changelog":
        return {}
    keys = {}
    for k in relation.primary_key:
        column = relation.column(k)
        assert column is not None  # a changelog's primary key names its columns (validated)
        keys[k] = spark_type(column.type)
    return keys


def sink_spec(project: Project, query: Query) -> SinkSpec:
    """Where the query writes, as its sink's store builds it (its `spark` facet); a materialized view without a
    store is a table of dsflow's own (facets.LOCAL_VIEWS)."""
    relation = project.relation(query.sink)
    assert relation is not None  # a loaded project's queries name its relations
    columns = [c.name for c in query.output_columns]
    if relation.kind == "materialized_view" and not relation.store:
        return facets.local_views().sink_spec(project, query, None, relation, columns)
    store = project.store(relation.store)
    assert store is not None  # and its relations their stores
    return facets.for_store(store.type).sink_spec(project, query, store, relation, columns)


def sink_key_format(relation: Relation, query: Query) -> dict:
    """avro/protobuf keys of a log sink: the key schema (the query's key columns as a record; a carried key:
    a string) and its subject <topic>-key (formats/keys.py)."""
    from dsflow.core.formats import REGISTRY_FORMATS, key_subject

    if relation.key_format not in REGISTRY_FORMATS:
        return {}
    from dsflow.formats.keys import key_schema_text

    database, schema, name = relation.fqn.split(".")
    types = {c.name: c.type for c in (*relation.columns, *query.output_columns)}
    columns = [(k, types.get(k, "VARCHAR")) for k in query.key_columns]
    return {"key_schema": key_schema_text(relation.key_format, name, f"{database}.{schema}", columns),
            "key_subject": key_subject(relation.key_format, relation.topic)}


def query_spec(project: Project, query: Query, version: str, checkpoint: str, status_path: str,
               start: StartAt | None = None) -> QuerySpec:
    """The driver's spec; `start` positions the sources of a fresh checkpoint (carried offsets or a replay)."""
    plan = lower(query, project)
    sink = sink_spec(project, query)
    retract, top_n, over = retract_spec(project, plan), top_n_spec(project, plan), over_spec(project, plan)
    if retract is not None or top_n is not None or (query.window and query.window.kind == "session") \
            or (query.window and query.window.processing_time):
        # retract: its deletes are rows of __keep false, appended as a changelog filter's are; a session window:
        # Spark emits each session once, when the watermark closes it (it refuses update mode for sessions); a
        # processing-time window: each once, when a micro-batch starts after its end (sql/proctime.py)
        sink = sink.model_copy(update={"output_mode": "append"})
    realtime = query.trigger == "realtime"
    conf = {**project.runtime.spark_conf, **query.spark_conf}
    if realtime:
        from dsflow.adapters.spark.realtime import session_conf

        conf = session_conf(conf, sink.kind)
    return QuerySpec(
        name=query.fqn, version=version, master=project.runtime.spark_master,
        spark_conf=conf, checkpoint=checkpoint, realtime=realtime,
        status_path=status_path, trigger_interval=spark_interval(query.trigger_interval),
        sources=[s.model_copy(update={"dlq_topic": None, "on_error": None}) if realtime else s
                 for s in source_specs(project, plan, start)], sink=sink,  # real-time: from_json on the JVM
        select_sql=retract[0] if retract else top_n[0] if top_n else over[0] if over else
        spark_tree(plan, project).sql(dialect="spark"),
        temporal=temporal_spec(project, query), retract=retract[1] if retract else None,
        top_n=top_n[1] if top_n else None, over=over[1] if over else None,
        stacked=stacked_spec(project, plan, _over_views, changelog_join_spec),
        changelog_join=changelog_join_spec(project, query), chain=chain_spec(project, plan),
        expectations=expectation_specs(plan), functions=function_specs(project, query),
        async_checkpoint=not realtime and project.runtime.async_checkpoint and not query.stateful
        and query.temporal_join is None
        and not sink.exactly_once  # a replayed batch must be re-planned as it ran (its ledger skips it)
        and getattr(facets.for_kind(sink.kind), "async_checkpoint", False) and sink.output_mode == "append",
    )


def function_specs(project: Project, query: Query) -> list[FunctionSpec]:
    """The user-defined functions the query calls, with their module files' absolute paths."""
    found = {f.name: f for f in project.functions}
    return [FunctionSpec(name=f.name, path=str(Path(project.root) / f.path), module=f.module, function=f.function,
                         parameters=[c.type for c in f.parameters], returns=f.returns, source_hash=f.source_hash)
            for f in (found[name] for name in query.functions)]


def _declared(query: Query, project: Project | None) -> dict[str, Declared]:
    """The signatures of the user-defined functions the query calls (their arguments are cast to them)."""
    if project is None or not query.functions:
        return {}
    return {f.name: Declared(f.name, tuple(c.type for c in f.parameters), f.returns) for f in project.functions
            if f.name in query.functions}


def expectation_specs(plan: QueryPlan) -> list[ExpectationSpec]:
    """The query's expectations with their conditions in Spark SQL (Spark's function names, `col->f` as `col.f`)."""
    found = []
    for rule, parsed in zip(plan.query.expectations, plan.conditions, strict=True):
        condition = cast(exp.Select, to_spark(parsed.copy())).selects[0]
        found.append(ExpectationSpec(name=rule.name, condition=condition.sql(dialect="spark"), action=rule.action))
    return found


def temporal_spec(project: Project, query: Query) -> TemporalSpec | None:
    """What the driver needs to build a temporal join's view (adapters/spark/temporal.py)."""
    join = query.temporal_join
    if join is None or query.join_chain:  # a chain's first join: chain_spec
        return None
    stream, changelog = (project.relation(s.relation) for s in query.sources)
    assert stream is not None and changelog is not None  # a loaded project's sources name its relations
    return TemporalSpec(view=temporal_view(query), stream_view=view_name(0, query), changelog_view=view_name(1, query),
                        stream_alias=join.stream, changelog_alias=join.changelog, side=join.side,
                        stream_keys=list(join.stream_keys), changelog_keys=list(join.changelog_keys),
                        stream_ddl=schema_ddl(stream.columns), changelog_ddl=schema_ddl(changelog.columns))


def chain_view(query: Query) -> str:
    return f"__chain_{query.fqn.replace('.', '_')}"


def chain_spec(project: Project, plan: QueryPlan) -> JoinChainSpec | None:
    """What the driver needs to build the view of a join of more than two relations (adapters/spark/join_chain.py):
    the first join's rows (with the interval joins after it), then one temporal join per further changelog."""
    if not plan.stream_chain:
        return None
    query = plan.query
    first = query.temporal_join
    intervals = [j for j in query.join_chain if isinstance(j, IntervalJoin)]
    temporal = tuple(j for j in query.join_chain if isinstance(j, TemporalJoin))
    joins = ((first,) if first is not None else ()) + temporal
    steps: list[ChainStepSpec] = []
    for join in joins:
        index = next(i for i, s in enumerate(query.sources) if s.alias == join.changelog)
        changelog = project.relation(query.sources[index].relation)
        assert changelog is not None  # a loaded project's sources name its relations
        steps.append(ChainStepSpec(changelog_view=view_name(index, query), changelog_alias=join.changelog,
                                   side=join.side, key_alias=join.stream, stream_keys=list(join.stream_keys),
                                   changelog_keys=list(join.changelog_keys),
                                   changelog_ddl=schema_ddl(changelog.columns), chained=bool(steps) or first is None))
    within = 0
    if first is None:  # a chain that starts with an interval join, which has its WITHIN
        assert query.join_within is not None
        within = sum(_millis(w) for w in (query.join_within, *(j.within for j in intervals)))
    sql = _first_rows(project, plan, first is None)
    for index, interval in enumerate(intervals, start=2):
        sql = _interval_rows(project, plan, sql, index, interval)
    return JoinChainSpec(view=chain_view(query), first_sql=sql, steps=steps, horizon_ms=2 * within)


def _millis(duration: str) -> int:
    return int(spark_duration(duration).split()[0])


def _struct(project: Project, source: Source) -> str:
    """STRUCT(<the source's columns>) AS <its alias>: one relation's part of a chain's rows."""
    relation = project.relation(source.relation)
    assert relation is not None  # a loaded project's sources name its relations
    columns = ", ".join(f"`{source.alias}`.`{c.name}`" for c in relation.columns)
    return f"STRUCT({columns}) AS `{source.alias}`"


def _first_rows(project: Project, plan: QueryPlan, interval: bool) -> str:
    """Spark SQL for the first join's rows: __key, __ts and one struct per relation joined so far."""
    query = plan.query
    structs = [_struct(project, source) for source in query.sources[:2 if interval else 1]]
    first = query.sources[0].alias
    sql = f"SELECT `{first}`.`{KEY_COLUMN}` AS `{KEY_COLUMN}`, `{first}`.`{EVENT_TIME}` AS `{EVENT_TIME}`, " \
          f"{', '.join(structs)} FROM `{view_name(0, query)}` AS `{first}`"
    if not interval:
        return sql
    select = _over_views(plan, project)
    _join_range(select, query)
    join = select.args["joins"][0]
    side = "LEFT " if (join.side or "").upper() == "LEFT" else ""
    return f"{sql} {side}JOIN `{view_name(1, query)}` AS `{query.sources[1].alias}` ON " \
           f"{join.args['on'].sql(dialect='spark')}"


def _interval_rows(project: Project, plan: QueryPlan, rows: str, index: int, join: IntervalJoin) -> str:
    """Spark SQL for the rows so far (`rows`) interval-joined with the stream of source `index`: its event time
    WITHIN the bound of the rows' __ts (the first stream's), which alone stays an event-time column (Spark refuses
    a join whose input has two); ON's `e.col` of an earlier relation reads the field of the rows' struct `e`."""
    query = plan.query
    source = query.sources[index]
    on = _over_views(plan, project).args["joins"][index - 1].args["on"].sql(dialect="spark")
    within = spark_duration(join.within)
    bound = f"`{source.alias}`.`{EVENT_TIME}` BETWEEN `{ROWS}`.`{EVENT_TIME}` - INTERVAL {within} " \
            f"AND `{ROWS}`.`{EVENT_TIME}` + INTERVAL {within}"
    earlier = ", ".join(f"`{ROWS}`.`{s.alias}` AS `{s.alias}`" for s in query.sources[:index])
    side = "LEFT " if join.side == "left" else ""
    return f"SELECT `{ROWS}`.`{KEY_COLUMN}` AS `{KEY_COLUMN}`, `{ROWS}`.`{EVENT_TIME}` AS `{EVENT_TIME}`, " \
           f"{earlier}, {_struct(project, source)} FROM ({rows}) AS `{ROWS}` {side}JOIN `{view_name(index, query)}` " \
           f"AS `{source.alias}` ON ({on}) AND {bound}"


def changelog_join_spec(project: Project, query: Query) -> ChangelogJoinSpec | None:
    """What the driver needs to build a changelog join's view (adapters/spark/changelog_join.py)."""
    join = query.changelog_join
    if join is None:
        return None
    left, right = (project.relation(s.relation) for s in query.sources[:2])
    assert left is not None and right is not None  # a loaded project's sources name its relations
    return ChangelogJoinSpec(view=changelog_join_view(query.fqn), left_view=view_name(0, query),
                             right_view=view_name(1, query), left_alias=join.left, right_alias=join.right,
                             side=join.side, keyed_by_left=join.keyed_by_left, left_keys=list(join.left_keys),
                             right_keys=list(join.right_keys),
                             left_pk=list(PLACE if join.streams else left.primary_key),
                             right_pk=list(PLACE if join.streams else right.primary_key), streams=join.streams,
                             left_ddl=schema_ddl(left.columns),
                             right_ddl=schema_ddl(right.columns),
                             # after a join of two changelogs, the chain holds changelog joins only
                             steps=[_changelog_step(project, query, cast(ChainedChangelogJoin, step))
                                    for step in query.join_chain])


def _changelog_step(project: Project, query: Query, step: ChainedChangelogJoin) -> ChangelogStepSpec:
    """One changelog joined after a join of changelogs: its view and what the two stages of its join need."""
    index = next(i for i, s in enumerate(query.sources) if s.alias == step.changelog)
    changelog = project.relation(query.sources[index].relation)
    assert changelog is not None  # a loaded project's sources name its relations
    return ChangelogStepSpec(right_view=view_name(index, query), right_alias=step.changelog, side=step.side,
                             keyed_by_left=step.keyed_by_left, left_relations=list(step.left_relations),
                             left_keys=list(step.left_keys), right_keys=list(step.right_keys),
                             right_pk=list(changelog.primary_key), right_ddl=schema_ddl(changelog.columns))
