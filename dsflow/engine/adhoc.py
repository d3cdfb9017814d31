"""Interactive queries: `dsflow query` on view snapshots, `dsflow query --follow` on streams and changelogs.

    view_query   one-off SQL over materialized views, run by SQLite on the environment's snapshot file, or by
                 the store (read-only) for views kept in a store (its kind's `commands` facet: query_views)
    follow       a temporary continuous query whose micro-batches are handed to a callback until it is
                 stopped (Ctrl-C); its checkpoint is a temporary folder, deleted when it stops
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dsflow.core.model import Project, Query, Relation
from dsflow.errors import Diagnostic, DsflowError, Location, ProjectError
from dsflow.core.suggest import did_you_mean

from dsflow.core.engines import Rows


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


SYSTEM_SCHEMA = "sys"
SYSTEM_TABLES = ("events", "queries", "relations")


def system_select(sql: str) -> exp.Select | None:
    """The SELECT when it reads the read-only system tables (sys.events, sys.queries, sys.relations) and only
    them, None when it reads none; DSF-E720 for an unknown sys table, DSF-E725 for sys tables mixed with views."""
    select = _parse(sql)
    tables = list(select.find_all(exp.Table))
    system = [t for t in tables if t.db.lower() == SYSTEM_SCHEMA and not t.catalog]
    if not system:
        return None
    if len(system) != len(tables):
        raise DsflowError("DSF-E725", "the query reads system tables and views together",
                          hint="query sys.events, sys.queries and sys.relations apart from the views")
    for table in system:
        if table.name.lower() not in SYSTEM_TABLES:
            raise DsflowError("DSF-E720", f"unknown system table '{table.sql()}'",
                              hint="the system tables are " + ", ".join(f"sys.{n}" for n in SYSTEM_TABLES))
        table.set("db", exp.to_identifier(SYSTEM_SCHEMA))
        table.set("this", exp.to_identifier(table.name.lower()))
    return select


def view_query(project: Project, sql: str) -> tuple[list[str], list[tuple]]:
    """Run SQL over materialized views (their snapshot tables, in SQLite or one store that keeps views):
    column names and rows."""
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
    return _view_commands(project, store).query_views(project, store, database, select)


def _view_commands(project: Project, store: str) -> Any:
    """The `commands` facet of the kind of the store that keeps views (core/stores.py), or of the views without a
    store (`LOCAL_VIEWS`: SQLite) when `store` is empty."""
    from dsflow.core import stores

    if not store:
        return stores.local_views("commands")
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
    if analysed.changelog_join is not None or analysed.stacked is not None:  # run in deployed queries only
        raise ProjectError(diagnostics=[Diagnostic("DSF-E193", "following a join of two changelogs is not supported "
                                                   "yet", where, hint="deploy it as CREATE CHANGELOG ... AS SELECT, "
                                                   "then follow that changelog: SELECT * FROM it")])
    if analysed.over is not None:  # its stateful stage runs in deployed queries only (adapters/spark/over.py)
        raise ProjectError(diagnostics=[Diagnostic("DSF-E193", "following an OVER aggregation is not supported yet",
                                                   where, hint="deploy it as CREATE STREAM ... AS SELECT, then "
                                                   "follow that stream: SELECT * FROM it")])
    if analysed.top_n is not None:  # its stateful stage runs in deployed queries only
        raise ProjectError(diagnostics=[Diagnostic("DSF-E193", "following a ROW_NUMBER top-N is not supported yet",
                                                   where, hint="deploy it as CREATE CHANGELOG ... AS SELECT, then "
                                                   "follow that changelog: SELECT * FROM it")])
    sources = tuple(s.model_copy(update={"starting_position": position}) for s in analysed.sources)
    return Query(fqn="adhoc.follow.query", statement="csas", sink="", sources=sources,
                 select_sql=analysed.select_sql, output_columns=analysed.columns, stateful=analysed.stateful,
                 output_mode=analysed.output_mode, window=analysed.window,
                 join_within=analysed.join_within, trigger_interval="1 second", temporal_join=analysed.temporal,
                 join_chain=analysed.chain, regular_joins=analysed.regular, nested=analysed.nested,
                 deletes="drop" if len(sources) == 1 and not analysed.aggregated
                 and relations[sources[0].relation].kind == "changelog" else "none")


def follow(project: Project, sql: str, on_rows: Rows, stop: threading.Event, position: str = "latest",
           on_started: Callable[[Path], None] = lambda _: None) -> None:
    """Run the query until `stop` is set (or Ctrl-C), handing each micro-batch's rows to `on_rows`.

    The checkpoint is a temporary folder, removed at the end; the engine runs the query in this process
    (core/engines.py, `follow`; Spark: adapters/spark/follow.py).
    """
    from dsflow.core.engines import engine

    engine().follow(project, follow_query(project, sql, position), on_rows, stop, on_started)
