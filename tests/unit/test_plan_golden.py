"""Golden files: the plan of example_project as text and JSON, compared byte for byte.

Regenerate after an intended change with:  DSFLOW_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_plan_golden.py
and review the diff of tests/golden/ like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dsflow.core.plan import Plan, make_plan
from dsflow.core.resources import project_resources
from dsflow.core.state import State
from dsflow.load.project import load_project
from dsflow.cli.render import plan_text
from support.projects import EXAMPLE_VARIABLES, applied, copy_example

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("DSFLOW_UPDATE_GOLDEN") == "1"


def plan_of(root: Path, state: State) -> Plan:
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    return make_plan(project.name, project.environment, project_resources(project), state)


def normalized(plan: Plan) -> dict[str, Any]:
    """The plan JSON without what differs between runs: when it was made and the state's lineage."""
    data = plan.model_dump(mode="json")
    data["created_at"] = "<created_at>"
    data["state_lineage"] = "<lineage>" if data["state_lineage"] else ""
    return data


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"missing {path}; run with DSFLOW_UPDATE_GOLDEN=1 to create it"
    assert actual == path.read_text(), f"{name} differs from the golden file; if intended, regenerate it " \
                                       "with DSFLOW_UPDATE_GOLDEN=1 and review the diff"


def check_plan(stem: str, plan: Plan) -> None:
    data = normalized(plan)
    check_golden(f"{stem}.json", json.dumps(data, indent=2) + "\n")
    check_golden(f"{stem}.txt", plan_text(data) + "\n")


@pytest.fixture()
def example(tmp_path) -> Path:
    return copy_example(tmp_path)


def test_example_plan_from_empty_state(example):
    check_plan("example_plan", plan_of(example, State()))


def test_example_plan_after_editing_a_where_clause(example):
    state = applied(plan_of(example, State()))
    sql = example / "sql" / "pipelines.sql"
    sql.write_text(sql.read_text().replace("WHERE pageid <> 'Page_2'", "WHERE pageid <> 'Page_3'"))
    check_plan("example_plan_where_edited", plan_of(example, state))


def test_example_plan_after_changing_a_functions_code(example):
    """A user-defined function's module changed: the function is updated and only the query calling it restarts."""
    (example / "udfs.py").write_text("def count_char(s: str, c: str) -> int:\n    return s.count(c)\n")
    (example / "sql" / "functions.sql").write_text(
        "CREATE FUNCTION count_char(s VARCHAR, c VARCHAR) RETURNS BIGINT LANGUAGE PYTHON AS 'udfs:count_char';\n"
        "CREATE STREAM curated.page_parts AS SELECT id, count_char(pageid, '_') AS parts FROM pageviews;\n")
    state = applied(plan_of(example, State()))
    (example / "udfs.py").write_text("def count_char(s: str, c: str) -> int:\n"
                                     "    return 0 if s is None else s.count(c)\n")
    check_plan("example_plan_function_changed", plan_of(example, state))


def test_golden_text_is_rendered_from_the_golden_json():
    """The text golden is a pure function of the JSON golden: plan_text(json) reproduces it."""
    for stem in ("example_plan", "example_plan_where_edited", "example_plan_function_changed"):
        data = json.loads((GOLDEN / f"{stem}.json").read_text())
        assert plan_text(data) + "\n" == (GOLDEN / f"{stem}.txt").read_text()
