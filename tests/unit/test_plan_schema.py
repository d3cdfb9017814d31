"""The JSON plan's published schema: it matches the models, and real `dsflow plan --json` output obeys it.

Regenerate docs/plan.schema.json after an intended change of the plan models with:
    DSFLOW_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_plan_schema.py
then review docs/plan-json.md (and bump PLAN_FORMAT_VERSION if the change is not additive).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from dsflow.cli import cli
from dsflow.core.plan import PLAN_FORMAT_VERSION
from dsflow.core.plan_schema import SCHEMA_ID, plan_from_json, plan_json_schema
from dsflow.errors import DsflowError
from support.projects import EXAMPLE_VARIABLES, REPO, copy_example
from test_plan_golden import GOLDEN, UPDATE

SCHEMA_FILE = REPO / "docs" / "plan.schema.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(validator: jsonschema.Draft202012Validator, data: object) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]


def test_the_published_schema_is_generated_from_the_models() -> None:
    generated = json.dumps(plan_json_schema(), indent=2) + "\n"
    if UPDATE:
        SCHEMA_FILE.write_text(generated)
    assert SCHEMA_FILE.read_text() == generated, "docs/plan.schema.json is not the models' schema; regenerate it " \
                                                 "with DSFLOW_UPDATE_GOLDEN=1 and review docs/plan-json.md"
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema["$id"] == SCHEMA_ID == f"urn:dsflow:plan:{PLAN_FORMAT_VERSION}"
    assert schema["properties"]["format_version"]["const"] == PLAN_FORMAT_VERSION


def test_documented_fields_are_the_schemas_fields() -> None:
    """Every field of the plan, a change, an estimate and the observations has a row in docs/plan-json.md."""
    doc = (REPO / "docs" / "plan-json.md").read_text()
    schema = plan_json_schema()
    models = [schema, schema["$defs"]["Change"], schema["$defs"]["Estimate"], schema["$defs"]["Observations"],
              schema["$defs"]["Observation"]]
    missing = [name for model in models for name in model["properties"] if f"| `{name}` |" not in doc]
    assert not missing, f"fields not documented in docs/plan-json.md: {missing}"


def test_real_plan_json_output_obeys_the_schema(tmp_path: Path, validator) -> None:
    root = copy_example(tmp_path)
    runner = CliRunner()
    base = ["-C", str(root), "--var", f"bootstrap={EXAMPLE_VARIABLES['bootstrap']}"]
    for args in (["plan", "--json", "--no-refresh"], ["plan", "--format", "json", "--destroy"],
                 ["plan", "--json", "--refresh-only"],
                 ["plan", "--json", "--no-refresh", "--target", "query.analytics.curated.pageviews_filtered"]):
        result = runner.invoke(cli, [*base, *args])
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        assert _errors(validator, data) == [], args
    saved = tmp_path / "plan.json"
    result = runner.invoke(cli, [*base, "plan", "--no-refresh", "--out", str(saved)])
    assert result.exit_code == 0, result.output
    data = json.loads(saved.read_text())
    assert _errors(validator, data) == [] and data["changes"]


def test_golden_plans_of_every_category_obey_the_schema(validator) -> None:
    files = sorted(GOLDEN.rglob("*.json"))
    assert len(files) >= 8
    categories = set()
    for path in files:
        data = json.loads(path.read_text())
        assert _errors(validator, data) == [], path.name
        categories |= {c["category"] for c in data["changes"] if c["category"]}
    assert {"in_place", "keep_checkpoint", "carry_offsets", "replay", "replace_relation", "new"} <= categories


def test_the_schema_refuses_what_is_not_a_plan(validator) -> None:
    plan = json.loads((GOLDEN / "categories" / "replay.json").read_text())
    assert _errors(validator, {**plan, "format_version": PLAN_FORMAT_VERSION + 1})
    assert _errors(validator, {**plan, "surprise": 1})
    change = {**plan["changes"][0], "action": "rename"}
    assert _errors(validator, {**plan, "changes": [change]})
    assert _errors(validator, {k: v for k, v in plan.items() if k != "state_serial"})


def test_a_saved_plan_of_another_format_version_is_refused(tmp_path: Path) -> None:
    plan = json.loads((GOLDEN / "categories" / "replay.json").read_text())
    assert plan_from_json(json.dumps(plan), "p.json").changes
    with pytest.raises(DsflowError) as err:
        plan_from_json(json.dumps({**plan, "format_version": 2, "new_field": True}), "p.json")
    assert err.value.code == "DSF-E811" and "version 2" in err.value.message
    with pytest.raises(DsflowError) as err:
        plan_from_json("{not json", "p.json")
    assert err.value.code == "DSF-E812"
    with pytest.raises(DsflowError) as err:
        plan_from_json(json.dumps({**plan, "changes": [{"address": "x"}]}), "p.json")
    assert err.value.code == "DSF-E812" and "changes.0" in err.value.message

    root = copy_example(tmp_path)
    saved = tmp_path / "future.json"
    saved.write_text(json.dumps({**plan, "format_version": 2}))
    result = CliRunner().invoke(cli, ["-C", str(root), "--var", "bootstrap=127.0.0.1:9092", "apply", str(saved)])
    assert result.exit_code != 0 and isinstance(result.exception, DsflowError)
    assert result.exception.code == "DSF-E811"
