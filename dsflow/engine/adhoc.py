"""Interactive queries: `dsflow query` on view snapshots, `dsflow query --follow` on streams and changelogs.

    view_query   one-off SQL over materialized views, run by SQLite on the environment's snapshot file, or by
                 the store (read-only) for views kept in a store (its kind's `commands` facet: query_views)
    follow       a temporary continuous query whose micro-batches are handed to a callback until it is
                 stopped (Ctrl-C); its checkpoint is a temporary folder, deleted when it stops
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dsflow.core.model import Project, Query, Relation
from dsflow.errors import Diagnostic, DsflowError, Location, ProjectError
from dsflow.core.suggest import did_you_mean

Rows = Callable[[list[str], list[tuple]], None]


def _parse(sql: str) -> exp.Select:
    from dsflow.sql.parse import parse_one_select

    try:
        select = parse_one_select(sql)
    except (ParseError, TokenError) as err:  # TokenError: an unclosed quote or a stray character
        errors = getattr(err, "errors", None)  # a ParseError's; a TokenError has none
        detail = errors[0].get("description") if errors else err
        raise DsflowError("DSF-E720", f"cannot parse the query: {detail}",
                          hint="write one SELECT statement") from err
    if not isinstance(select, exp.Select):
        raise DsflowError("DSF-E720", "dsflow query runs one SELECT statement", hint="e.g. SELECT * FROM my_view")
    return select


def _relation(project: Project, table: exp.Table) -> Relation:
    parts = [p.name for p in table.parts]
    if len(parts) == 1:
        parts = [project.default_database, project.default_schema, *parts]
    elif len(parts) == 2:
        parts = [project.default_database, *parts]
    fqn = ".".join(parts[-3:])
    relation = project.relation(fqn)
    if relation is None:
        raise DsflowError("DSF-E720", f"unknown relation '{table.sql()}'",
                          hint=did_you_mean(parts[-1], [r.name for r in project.relations]))
    return relation


def relations_read(project: Project, sql: str) -> list[Relation]:
    """The relations a SELECT reads (DSF-E720 if it does not parse or names an unknown relation)."""
    return [_relation(project, table) for table in _parse(sql).find_all(exp.Table)]


def view_query(project: Project, sql: str) -> tuple[list[str], list[tuple]]:
    """Run SQL over materialized views (their snapshot tables, in SQLite or one store that keeps views):
    column names and rows."""
    from dsflow.adapters.sqlite import mv

    select = _parse(sql)
    places: set[tuple[str, str]] = set()
    for table in list(select.find_all(exp.Table)):
        relation = _relation(project, table)
        if relation.kind != "materialized_view":
            raise DsflowError("DSF-E720", f"'{relation.fqn}' is a {relation.kind}, not a materialized view",
                              hint="dsflow query --follow runs a continuous query over streams and changelogs")
        database, schema = _view_place(project, relation)
        places.add((relation.store, database))
        table.replace(exp.Table(this=exp.to_identifier(relation.topic, quoted=True),
                                db=exp.to_identifier(schema, quoted=True) if schema else None,
                                alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))))
    if len(places) > 1:
        raise DsflowError("DSF-E793", "the query reads views kept in different places: "
                          + ", ".join(sorted(f"{s or 'sqlite'}{'/' + d if d else ''}" for s, d in places)),
                          hint="query the views of one store (and one database) at a time")
    store, database = next(iter(places)) if places else ("", "")
    if store:
        return _view_commands(project, store).query_views(project, store, database, select)
    path = mv.database_path(project.root, project.state_path, project.environment)
    return mv.run_query(path, select.sql(dialect="sqlite"))


def _view_commands(project: Project, store: str) -> Any:
    """The `commands` facet of the kind of the store that keeps views (core/stores.py)."""
    from dsflow.core import stores

    found = project.store(store)
    return stores.facet(found.type, "commands") if found is not None else None


def _view_place(project: Project, relation: Relation) -> tuple[str, str | None]:
    """The database and schema of a view's table: ("", None) in SQLite, else as its store kind says."""
    commands = _view_commands(project, relation.store) if relation.store else None
    return commands.view_place(relation) if commands is not None else ("", None)


def follow_query(project: Project, sql: str, position: str = "latest") -> Query:
    """The continuous query behind `--follow`, checked like a project query (DSF diagnostics)."""
    from dsflow.sql.select import analyse_select
    from dsflow.sql.parse import RawStatement

    select = _parse(sql)
    relations = {r.fqn: r for r in project.relations if r.kind != "materialized_view"}
    for table in select.find_all(exp.Table):
        if _relation(project, table).kind == "materialized_view":
            raise DsflowError("DSF-E720", f"'{table.sql()}' is a materialized view: a snapshot, not a stream to follow",
                              hint="query it without --follow: dsflow query \"SELECT ... FROM view\"")
    where = Location("<query>", 1, 1)
    raw = RawStatement("stream", ("__follow",), where, select=select, text=sql)
    problems: list[Diagnostic] = []

    def qualify_name(parts):
        parts = list(parts)
        return ".".join(([project.default_database, project.default_schema] + parts)[-3:]) if len(parts) < 3 \
            else ".".join(parts[-3:])

    analysed = analyse_select("<query>", raw, relations, qualify_name, problems.append)
    if analysed is None or problems:
        raise ProjectError(diagnostics=problems or [Diagnostic("DSF-E720", "cannot run the query", where)])
    if analysed.changelog_join is not None:  # its three stages run in deployed queries only
        raise ProjectError(diagnostics=[Diagnostic("DSF-E193", "following a join of two changelogs is not supported "
                                                   "yet", where, hint="deploy it as CREATE CHANGELOG ... AS SELECT, "
                                                   "then follow that changelog: SELECT * FROM it")])
    sources = tuple(s.model_copy(update={"starting_position": position}) for s in analysed.sources)
    return Query(fqn="adhoc.follow.query", statement="csas", sink="", sources=sources,
                 select_sql=analysed.select_sql, output_columns=analysed.columns, stateful=analysed.stateful,
                 output_mode="update" if analysed.aggregated else "append", window=analysed.window,
                 join_within=analysed.join_within, trigger_interval="1 second", temporal_join=analysed.temporal,
                 join_chain=analysed.chain,
                 deletes="drop" if len(sources) == 1 and not analysed.aggregated
                 and relations[sources[0].relation].kind == "changelog" else "none")


def follow(project: Project, sql: str, on_rows: Rows, stop: threading.Event, position: str = "latest",
           on_started: Callable[[Path], None] = lambda _: None) -> None:
    """Run the query until `stop` is set (or Ctrl-C), handing each micro-batch's rows to `on_rows`.

    The checkpoint is a temporary folder, removed at the end; the query runs in a session of its own, on a Spark
    context stopped (with its JVM) when no other followed query of this process uses it.
    """
    from dsflow.adapters.spark.spec import QuerySpec, SinkSpec
    from dsflow.adapters.spark.translate import chain_spec, source_specs, spark_select, temporal_spec

    query = follow_query(project, sql, position)
    checkpoint = Path(tempfile.mkdtemp(prefix="dsflow-follow-"))
    columns = [c.name for c in query.output_columns]
    spec = QuerySpec(name="dsflow_follow", version="adhoc", master=project.runtime.spark_master,
                     spark_conf=dict(project.runtime.spark_conf), checkpoint=str(checkpoint / "ck"),
                     status_path=str(checkpoint / "status.json"), trigger_interval="1 second",
                     sources=source_specs(project, query), select_sql=spark_select(query, project),
                     temporal=temporal_spec(project, query), chain=chain_spec(project, query),
                     sink=SinkSpec(topic="", client_config={}, columns=columns, kind="console",
                                   output_mode=query.output_mode))
    try:
        on_started(checkpoint)
        with _follow_session(spec.master, spec.spark_conf) as spark:
            if threading.current_thread() is threading.main_thread():  # Spark installed its own Ctrl-C handler
                signal.signal(signal.SIGINT, lambda *_: stop.set())
            _run_followed(spark, spec, query, columns, on_rows, stop)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def _run_followed(spark: Any, spec: Any, query: Query, columns: list[str], on_rows: Rows,
                  stop: threading.Event) -> None:
    from dsflow.adapters.spark.driver import build_dataframe

    frame = build_dataframe(spark, spec).select(*[f"`{c}`" for c in columns])

    def batch(df, _batch_id: int) -> None:
        rows = [tuple(r) for r in df.collect()]
        if rows:
            on_rows(columns, rows)

    running = (frame.writeStream.foreachBatch(batch).outputMode(query.output_mode)
               .option("checkpointLocation", spec.checkpoint).trigger(processingTime="1 second").start())
    try:
        while not stop.is_set() and running.isActive:
            running.awaitTermination(0.5)
    finally:
        if running.isActive:
            running.stop()
    error = running.exception()
    if error is not None:
        raise DsflowError("DSF-E723", f"the query failed: {str(error).splitlines()[0]}")


_FOLLOWING: dict[str, Any] = {"spark": None, "users": 0}
_FOLLOWING_LOCK = threading.Lock()


@contextmanager
def _follow_session(master: str, conf: dict[str, str]) -> Iterator[Any]:
    """A session of its own for one followed query, on the one Spark context of this process (`dsflow serve`
    follows several at once): the context starts with the first and stops, with its JVM, after the last."""
    from dsflow.adapters.spark.session import build_session, isolated_session

    with _FOLLOWING_LOCK:
        if _FOLLOWING["spark"] is None:
            _FOLLOWING["spark"] = build_session(master, "dsflow:follow", conf)
        _FOLLOWING["users"] += 1
        try:
            session = isolated_session(_FOLLOWING["spark"])
        except BaseException:
            _release_follow_session()
            raise
    try:
        yield session
    finally:
        with _FOLLOWING_LOCK:
            _release_follow_session()


def _release_follow_session() -> None:
    _FOLLOWING["users"] -= 1
    if _FOLLOWING["users"] == 0:
        spark, _FOLLOWING["spark"] = _FOLLOWING["spark"], None
        _stop_spark(spark)


def _stop_spark(spark: Any) -> None:
    if spark is None:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    proc = getattr(gateway, "proc", None) if gateway is not None else None
    try:
        if gateway is not None:
            gateway.shutdown()
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - last resort
                proc.kill()
        SparkContext._gateway = None
        SparkContext._jvm = None
