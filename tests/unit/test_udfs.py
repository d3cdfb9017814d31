"""User-defined functions without Spark (issue 46 item 3): CREATE FUNCTION checked against the Python code it names
(DSF-E440..E442 at the declaration's file:line), calls type-checked against the declared signature (DSF-E443), and
planned as a resource: a change to a function's code restarts exactly the queries that call it, and says which."""

from __future__ import annotations

from pathlib import Path

from dsflow.cli.render import plan_text
from dsflow.core.categories import Category
from dsflow.core.plan import Action, PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.load.project import check_project, load_project
from support.projects import PAGEVIEWS, applied, make_project

UDFS = '''\
def count_char(s: str, c: str) -> int:
    return 0 if s is None else s.count(c)
'''
TEXT = '''\
def shout(s):
    return None if s is None else s.upper() + "!"
'''
FUNCTIONS = """\
CREATE FUNCTION count_char(s VARCHAR, c VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'udfs:count_char';
CREATE FUNCTION shout(s VARCHAR) RETURNS VARCHAR LANGUAGE PYTHON AS 'lib.text:shout';
"""
QUERIES = """\
CREATE STREAM counted WITH ('topic' = 'counted') AS SELECT id, count_char(userid, 'u') AS n FROM pageviews;
CREATE STREAM loud WITH ('topic' = 'loud') AS SELECT id, shout(pageid) AS p FROM pageviews
  WHERE count_char(pageid, 'x') > 1;
CREATE STREAM plain WITH ('topic' = 'plain') AS SELECT id, UPPER(userid) AS u FROM pageviews;
"""


def _files(**overrides: str | None) -> dict[str, str | None]:
    return {"sql/sources.sql": PAGEVIEWS, "sql/functions.sql": FUNCTIONS, "sql/queries.sql": QUERIES,
            "udfs.py": UDFS, "lib/text.py": TEXT, **overrides}


def _problems(tmp_path: Path, **overrides: str | None) -> list[tuple[str, str, int, str]]:
    found = check_project(make_project(tmp_path, _files(**overrides))).diagnostics
    return [(d.code, d.location.file, d.location.line, d.message) for d in found]


def test_functions_resolve_with_their_signature_and_callers(tmp_path) -> None:
    project = load_project(make_project(tmp_path, _files()))
    assert [(f.name, [c.type for c in f.parameters], f.returns, f.path) for f in project.functions] == [
        ("count_char", ["VARCHAR", "VARCHAR"], "BIGINT", "udfs.py"), ("shout", ["VARCHAR"], "VARCHAR", "lib/text.py")]
    queries = {q.fqn.split(".")[-1]: q for q in project.queries}
    assert {n: q.functions for n, q in queries.items()} == {
        "counted": ("count_char",), "loud": ("count_char", "shout"), "plain": ()}
    assert [(c.name, c.type) for c in queries["counted"].output_columns] == [("id", "BIGINT"), ("n", "BIGINT")]
    assert [(c.name, c.type) for c in queries["loud"].output_columns] == [("id", "BIGINT"), ("p", "VARCHAR")]


def test_declarations_are_checked_against_the_code_at_their_place(tmp_path) -> None:
    declarations = FUNCTIONS + """\
CREATE FUNCTION f1(s VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'udfs:nothere';
CREATE FUNCTION f2(s VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'udfs:count_char';
CREATE FUNCTION f3(s BIGINT, c VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'udfs:count_char';
CREATE FUNCTION f4(s VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'broken:f';
CREATE FUNCTION f5(s VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'missing:f';
CREATE FUNCTION f6(s VARCHAR) RETURNS BIGINT LANGUAGE JAVA AS 'lib.text:shout';
CREATE FUNCTION f7(s VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'no colon';
CREATE FUNCTION upper(s VARCHAR) RETURNS VARCHAR LANGUAGE PYTHON AS 'lib.text:shout';
CREATE FUNCTION shout(s VARCHAR) RETURNS VARCHAR LANGUAGE PYTHON AS 'lib.text:shout';
CREATE FUNCTION f8(s VARCHAR, c VARCHAR) RETURNS BOOLEAN LANGUAGE PYTHON AS 'udfs:count_char';
"""
    broken = "import os\n\n\ndef f(s):\n    return 1\n\n\nraise RuntimeError('boom')\n"
    found = _problems(tmp_path, **{"sql/functions.sql": declarations, "broken.py": broken})
    at = {(code, line): message for code, _, line, message in found}
    assert all(file == "sql/functions.sql" for _, file, _, _ in found), found
    assert at[("DSF-E441", 3)] == "function 'f1': 'nothere' is not defined in module 'udfs' (udfs.py)"
    assert at[("DSF-E442", 4)].startswith("function 'f2' is declared with 1 parameter(s) but count_char(s: str, c: "
                                          "str) -> int does not take 1 positional argument(s)")
    assert at[("DSF-E442", 5)] == "function 'f3': the parameter 's' is annotated str but declared BIGINT in SQL"
    assert at[("DSF-E441", 6)] == "function 'f4': importing module 'broken' failed: RuntimeError: boom"
    assert at[("DSF-E441", 7)] == "function 'f5': module 'missing' is not in the project"
    assert at[("DSF-E440", 8)] == "CREATE FUNCTION f6: the function's language must be PYTHON (LANGUAGE PYTHON)"
    assert at[("DSF-E440", 9)] == "CREATE FUNCTION f7: AS must name 'module:function', got 'no colon'"
    assert at[("DSF-E440", 10)] == "function 'upper' has the name of a built-in function"
    assert at[("DSF-E440", 11)] == "function 'shout' is created twice"
    assert at[("DSF-E442", 12)] == "function 'f8': the result is annotated int but declared BOOLEAN in SQL"
    assert len(found) == 10, found
    hints = {d.code: d.hint for d in check_project(make_project(tmp_path, _files(
        **{"sql/functions.sql": declarations, "broken.py": broken}))).diagnostics if d.location.line == 6}
    assert hints["DSF-E441"].startswith("fix broken.py:8;")  # the line of the module that raised


def test_calls_are_checked_against_the_declared_signature(tmp_path) -> None:
    queries = """\
CREATE STREAM a WITH ('topic' = 'a') AS SELECT id, count_char(userid) AS n FROM pageviews;
CREATE STREAM b WITH ('topic' = 'b') AS SELECT id, count_char(id, 'x') AS n FROM pageviews;
CREATE STREAM c WITH ('topic' = 'c') AS SELECT id, count_chr(userid, 'x') AS n FROM pageviews;
CREATE STREAM d WITH ('topic' = 'd') AS SELECT id, count_char(userid, 'x') + 1 AS n FROM pageviews
  WHERE shout(userid) = 'A!';
"""
    found = check_project(make_project(tmp_path, _files(**{"sql/queries.sql": queries}))).diagnostics
    assert [(d.code, d.location.line, d.message) for d in found] == [
        ("DSF-E443", 1, "function count_char takes 2 argument(s) (VARCHAR, VARCHAR), got 1"),
        ("DSF-E443", 2, "COUNT_CHAR(pageviews.id, 'x'): the argument 'pageviews.id' is BIGINT, but count_char declares "
                        "a VARCHAR there"),
        ("DSF-E143", 3, "function COUNT_CHR is not supported in continuous queries"),
    ]
    assert found[2].hint is not None and found[2].hint.startswith("did you mean 'COUNT_CHAR'?")


def _plan(root: Path, state: State):
    project = load_project(root)
    return make_plan(project.name, project.environment, project_resources(project), state, PlanOptions())


def test_a_code_change_restarts_exactly_its_callers_and_says_which(tmp_path) -> None:
    root = make_project(tmp_path, _files())
    state = applied(_plan(root, State()))
    assert {c.address: c.action for c in _plan(root, state).changes if c.action is not Action.NOOP} == {}
    (root / "udfs.py").write_text(UDFS.replace("s.count(c)", "s.lower().count(c.lower())"))
    plan = _plan(root, state)
    changed = {c.address: c for c in plan.changes if c.action is not Action.NOOP}
    assert sorted(changed) == ["function.count_char", "query.analytics.public.counted", "query.analytics.public.loud"]
    assert changed["function.count_char"].action is Action.UPDATE
    assert changed["function.count_char"].reason == "code of udfs.py changed (in place)"
    for name in ("counted", "loud"):
        query = changed[f"query.analytics.public.{name}"]
        assert (query.action, query.category) == (Action.UPDATE, Category.IN_PLACE)
        assert query.reason == "function count_char's code or signature changed (in place)"
        assert "function.count_char" in query.depends_on
    text = plan_text(plan.model_dump(mode="json"))
    assert "~ query.analytics.public.loud" in text and "function count_char's code or signature changed" in text
    assert "query.analytics.public.plain" not in text
    (root / "lib" / "text.py").write_text(TEXT + "\n# a comment is a change of the module's code\n")
    changed = {c.address: c for c in _plan(root, state).changes if c.action is not Action.NOOP}
    assert {a: c.reason for a, c in changed.items()} == {
        "function.count_char": "code of udfs.py changed (in place)",
        "function.shout": "code of lib/text.py changed (in place)",
        "query.analytics.public.counted": "function count_char's code or signature changed (in place)",
        "query.analytics.public.loud": "function count_char's code or signature, function shout's code or "
                                       "signature changed (in place)"}


def test_removing_functions(tmp_path) -> None:
    root = make_project(tmp_path, _files())
    state = applied(_plan(root, State()))
    still_called = _problems(tmp_path / "called", **{"sql/functions.sql": FUNCTIONS.splitlines()[1] + "\n"})
    assert [(c, f, line) for c, f, line, _ in still_called] == [  # counted and loud call count_char
        ("DSF-E143", "sql/queries.sql", 1), ("DSF-E143", "sql/queries.sql", 3)]
    (root / "sql" / "queries.sql").write_text(QUERIES.splitlines()[0] + "\n" + QUERIES.splitlines()[3] + "\n")
    (root / "sql" / "functions.sql").write_text(FUNCTIONS.splitlines()[0] + "\n")
    changed = {c.address: c for c in _plan(root, state).changes if c.action is not Action.NOOP}
    assert {a: (c.action, c.reason) for a, c in changed.items()} == {
        "query.analytics.public.loud": (Action.DELETE, "no longer in the project"),
        "relation.analytics.public.loud": (Action.DELETE, "no longer in the project"),
        "function.shout": (Action.DELETE, "no longer in the project"),
    }


def test_the_driver_spec_carries_the_functions_and_casts_their_arguments(tmp_path) -> None:
    from dsflow.adapters.spark.translate import query_spec

    root = make_project(tmp_path, _files())
    project = load_project(root)
    loud = next(q for q in project.queries if q.fqn.endswith(".loud"))
    spec = query_spec(project, loud, "v1", str(tmp_path / "cp"), str(tmp_path / "status"))
    assert [(f.name, f.path, f.module, f.function, f.parameters, f.returns) for f in spec.functions] == [
        ("count_char", str(root / "udfs.py"), "udfs", "count_char", ["VARCHAR", "VARCHAR"], "BIGINT"),
        ("shout", str(root / "lib" / "text.py"), "lib.text", "shout", ["VARCHAR"], "VARCHAR")]
    assert "COUNT_CHAR(CAST(" in spec.select_sql and "SHOUT(CAST(" in spec.select_sql


def test_the_function_runs_row_by_row_and_only_as_planned(tmp_path) -> None:
    import pandas as pd
    import pytest

    from dsflow.adapters.spark.udfs import load_function, vectorized
    from dsflow.adapters.spark.translate import function_specs
    from dsflow.errors import DsflowError

    root = make_project(tmp_path, _files())
    project = load_project(root)
    loud = next(q for q in project.queries if q.fqn.endswith(".loud"))
    count_char, shout = function_specs(project, loud)
    assert shout.module == "lib.text"
    call = vectorized(load_function(count_char))
    got = call(pd.Series(["banana", None, "cc"]), pd.Series(["a", "a", "c"]))
    assert got.tolist() == [3, 0, 2]
    (root / "lib" / "text.py").write_text(TEXT.replace("!", "?"))  # changed after the plan: not run
    with pytest.raises(DsflowError) as refused:
        load_function(shout)
    assert refused.value.code == "DSF-E444"
    (root / "lib" / "text.py").write_text(TEXT)
    assert vectorized(load_function(shout))(pd.Series(["a", None])).tolist() == ["A!", None]



def test_only_the_admins_create_or_change_a_function() -> None:
    """A function runs code in the query drivers: its create and update need its ownership, which sysadmin holds."""
    from dsflow.core.access import AccessModel

    model = AccessModel.from_records([
        ("binding.sys", {"user": "sys", "roles": ["sysadmin"]}), ("binding.ann", {"user": "ann", "roles": ["analyst"]}),
        ("role.analyst", {"name": "analyst", "inherits": []}), ("function.f", {"language": "python"})])
    plan = {"changes": [{"address": "function.g", "action": "create", "after": {"language": "python"}},
                        {"address": "function.f", "action": "update", "before": {}, "after": {"language": "python"}}]}
    assert model.authorize_plan("sys", plan) == []
    assert [(r.address, r.decision.missing) for r in model.authorize_plan("ann", plan)] == [
        ("function.g", (("OWNERSHIP", "function.g"),)), ("function.f", (("OWNERSHIP", "function.f"),))]
