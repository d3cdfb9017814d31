"""CREATE VIEW (a view that is not materialized: a named SELECT, sql/views.py) and PROCTIME() (sql/proctime.py)
without Spark: a view is inlined into the queries that read it, planned as a resource of its own on which they
depend (a change to it changes exactly its readers, as an edit of their SQL would, and the plan says why), and
refused at its place when it reads what does not exist, clashes or reads itself; what processing time dsflow does
not take is refused with DSF-E262."""

from __future__ import annotations

from pathlib import Path

from dsflow.core.plan import Action, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.load.project import check_project, load_project
from support.projects import PAGEVIEWS, applied, make_project

VIEWS = """\
CREATE VIEW visits AS SELECT *, UPPER(pageid) AS page FROM pageviews WHERE id > 0;
CREATE VIEW late_visits AS SELECT id, page, userid FROM visits WHERE viewtime > 100;
"""
QUERIES = """\
CREATE STREAM pages WITH ('topic' = 'pages') AS SELECT id, page FROM visits;
CREATE STREAM late WITH ('topic' = 'late') AS SELECT v.id, v.userid FROM late_visits AS v;
CREATE STREAM plain WITH ('topic' = 'plain') AS SELECT id FROM pageviews;
"""
PROCESSING = """\
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, PRIMARY KEY (userid))
  WITH ('topic' = 'users', 'value.format' = 'json');
CREATE VIEW timed AS SELECT *, PROCTIME() AS p_time FROM pageviews;
"""


def _files(**overrides: str | None) -> dict[str, str | None]:
    return {"sql/sources.sql": PAGEVIEWS, "sql/views.sql": VIEWS, "sql/queries.sql": QUERIES, **overrides}


def _plan(root: Path, state: State):
    project = load_project(root)
    return make_plan(project.name, project.environment, project_resources(project), state, PlanOptions())


def test_a_view_is_inlined_into_its_readers_which_depend_on_it(tmp_path) -> None:
    project = load_project(make_project(tmp_path, _files()))
    assert [(v.fqn, v.sources) for v in project.views] == [
        ("analytics.public.visits", ("analytics.public.pageviews",)),
        ("analytics.public.late_visits", ("analytics.public.visits",))]
    queries = {q.fqn.rsplit(".", 1)[-1]: q for q in project.queries}
    assert queries["pages"].views == ("analytics.public.visits",)
    assert queries["late"].views == ("analytics.public.visits", "analytics.public.late_visits")  # through a view
    assert queries["plain"].views == ()
    assert [s.relation for s in queries["late"].sources] == ["analytics.public.pageviews"]
    assert "UPPER(" in queries["pages"].select_sql and "> 0" in queries["pages"].select_sql
    assert "> 100" in queries["late"].select_sql and "> 0" in queries["late"].select_sql
    resources = {str(r.address): r for r in project_resources(project)}
    assert [str(a) for a in resources["view.analytics.public.late_visits"].depends_on] == [
        "view.analytics.public.visits"]
    assert "view.analytics.public.late_visits" in {str(a) for a in resources["query.analytics.public.late"].depends_on}


def test_changing_a_view_changes_exactly_its_readers_and_says_why(tmp_path) -> None:
    root = make_project(tmp_path, _files())
    state = applied(_plan(root, State()))
    assert all(c.action is Action.NOOP for c in _plan(root, state).changes)
    (root / "sql" / "views.sql").write_text(VIEWS.replace("viewtime > 100", "viewtime > 200"))
    changed = {c.address: c for c in _plan(root, state).changes if c.action is not Action.NOOP}
    assert {a: c.action for a, c in changed.items()} == {  # the query's SQL changed as if edited in place: a
        "view.analytics.public.late_visits": Action.UPDATE, "query.analytics.public.late": Action.UPDATE}  # filter
    assert changed["view.analytics.public.late_visits"].reason == "select changed (in place)"
    assert changed["query.analytics.public.late"].reason.startswith("select, views changed")
    (root / "sql" / "views.sql").write_text(VIEWS.replace("WHERE id > 0", "WHERE id > 1"))
    changed = {c.address: c for c in _plan(root, state).changes if c.action is not Action.NOOP}
    assert set(changed) == {"view.analytics.public.visits", "query.analytics.public.pages",
                            "query.analytics.public.late"}  # the view read through another view too


def _found(tmp_path: Path, **overrides: str | None) -> list[tuple[str, str, int]]:
    return [(d.code, Path(d.location.file).name, d.location.line)
            for d in check_project(make_project(tmp_path, _files(**overrides))).diagnostics]


def test_a_view_is_refused_at_its_place(tmp_path) -> None:
    assert _found(tmp_path / "unknown", **{"sql/views.sql": "CREATE VIEW v AS SELECT * FROM nowhere;\n",
                                         "sql/queries.sql": None}) == [("DSF-E040", "views.sql", 1)]
    assert _found(tmp_path / "clash", **{"sql/views.sql": "\nCREATE VIEW pageviews AS SELECT id FROM pageviews;\n",
                                       "sql/queries.sql": None}) == [("DSF-E020", "views.sql", 2)]
    named = "CREATE VIEW v (a) AS SELECT id FROM pageviews;\n"
    assert _found(tmp_path / "named", **{"sql/views.sql": named, "sql/queries.sql": None}) == [
        ("DSF-E005", "views.sql", 1)]
    cycle = "CREATE VIEW a AS SELECT id FROM b;\nCREATE VIEW b AS SELECT id FROM a;\n"
    assert _found(tmp_path / "cycle", **{"sql/views.sql": cycle, "sql/queries.sql": None}) == [
        ("DSF-E050", "views.sql", 1), ("DSF-E050", "views.sql", 2)]


def test_processing_time_that_dsflow_does_not_take_is_refused(tmp_path) -> None:
    """PROCTIME() as a column read elsewhere than a window's DESCRIPTOR or FOR SYSTEM_TIME AS OF; a processing-time
    SESSION window; an aggregation of a processing-time join: DSF-E262 at the place."""
    cases = {
        "selected": "CREATE STREAM s WITH ('topic' = 's') AS SELECT id, p_time FROM timed;",
        "session": "CREATE CHANGELOG s WITH ('topic' = 's') AS SELECT userid, COUNT(*) AS n, window_start, window_end"
                   " FROM TABLE(SESSION(TABLE timed PARTITION BY userid, DESCRIPTOR(p_time), INTERVAL '10' SECOND))"
                   " GROUP BY userid, window_start, window_end;",
        "aggregated": "CREATE CHANGELOG s WITH ('topic' = 's') AS SELECT u.name, COUNT(*) AS n FROM timed AS t "
                      "JOIN users FOR SYSTEM_TIME AS OF t.p_time AS u ON t.userid = u.userid GROUP BY u.name;",
    }
    for name, query in cases.items():
        found = _found(tmp_path / name, **{"sql/views.sql": PROCESSING, "sql/queries.sql": query + "\n"})
        assert found == [("DSF-E262", "queries.sql", 1)], (name, found)


def test_processing_time_windows_and_joins_resolve(tmp_path) -> None:
    queries = (
        "CREATE CHANGELOG counts WITH ('topic' = 'counts') AS SELECT userid, COUNT(*) AS n, window_start, window_end "
        "FROM TABLE(TUMBLE(TABLE timed, DESCRIPTOR(p_time), INTERVAL '10' SECOND)) "
        "GROUP BY userid, window_start, window_end;\n"
        "CREATE STREAM named WITH ('topic' = 'named') AS SELECT t.id, u.name FROM timed AS t "
        "LEFT JOIN users FOR SYSTEM_TIME AS OF t.p_time AS u ON LOWER(t.userid) = u.userid;\n")
    project = load_project(make_project(tmp_path, _files(**{"sql/views.sql": PROCESSING, "sql/queries.sql": queries})))
    counts, named = project.queries
    assert counts.window is not None and counts.window.processing_time and counts.stateful
    assert [s.lookup for s in named.sources] == [False, True] and not named.stateful
    assert named.temporal_join is None and named.join_within is None and "LOWER(" in named.select_sql


def test_a_processing_time_join_reads_a_store_that_can_be_read_whole(tmp_path) -> None:
    """The changelog of a processing-time join is read whole at every micro-batch: a Kinesis one cannot be."""
    from support.projects import KAFKA_KINESIS_STORES

    kinesis = PROCESSING.replace("'topic' = 'users',", "'store' = 'kinesis_store', 'topic.shards' = 1,")
    query = ("CREATE STREAM named WITH ('topic' = 'named', 'store' = 'kafka_store') AS SELECT t.id, u.name "
             "FROM timed AS t JOIN users FOR SYSTEM_TIME AS OF t.p_time AS u ON t.userid = u.userid;\n")
    sources = PAGEVIEWS.replace("'topic' = 'pageviews',", "'topic' = 'pageviews', 'store' = 'kafka_store',")
    root = make_project(tmp_path, _files(**{"stores/kafka.yml": KAFKA_KINESIS_STORES, "sql/views.sql": kinesis,
                                            "sql/queries.sql": query, "sql/sources.sql": sources}))
    found = check_project(root, variables={"kinesis": "http://127.0.0.1:1"}).diagnostics
    assert [(d.code, d.location.line) for d in found if d.code.startswith("DSF-E26")] == [("DSF-E262", 1)]
    assert "'analytics.public.users' is joined FOR SYSTEM_TIME AS OF a processing time" in \
        next(d.message for d in found if d.code == "DSF-E262")
