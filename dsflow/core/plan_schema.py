"""The published JSON Schema of a plan (docs/plan.schema.json), and reading a saved plan back.

The schema is generated from the pydantic models in `core/plan.py`, so the models stay the one place
that defines the plan. Regenerate the file after changing them:

    python -m dsflow.core.plan_schema > docs/plan.schema.json

(`tests/unit/test_plan_schema.py` fails until the file matches; see docs/plan-json.md for the version policy.)
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from dsflow.core.plan import PLAN_FORMAT_VERSION, Plan
from dsflow.errors import DsflowError

__all__ = ["SCHEMA_ID", "plan_from_json", "plan_json_schema"]

SCHEMA_ID = f"urn:dsflow:plan:{PLAN_FORMAT_VERSION}"


def plan_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `dsflow plan --json` / `--out` for this format version.

    Every field is required, because the JSON always carries every field (null when unset), and
    `format_version` is pinned to the version this dsflow writes.
    """
    schema = Plan.model_json_schema(mode="serialization")
    for model in [schema, *schema.get("$defs", {}).values()]:
        if model.get("type") == "object" and "properties" in model:
            model["required"] = list(model["properties"])
    schema["properties"]["format_version"] = {
        "const": PLAN_FORMAT_VERSION, "description": schema["properties"]["format_version"]["description"]}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": f"dsflow plan, format version {PLAN_FORMAT_VERSION}", **schema}


def plan_from_json(text: str, source: str) -> Plan:
    """A saved plan read back: DSF-E811 if it has another format version, DSF-E812 if it is no plan."""
    try:
        data = json.loads(text)
    except ValueError as err:
        raise DsflowError("DSF-E812", f"{source} is not a saved plan: {err}",
                          hint="save one with 'dsflow plan --out FILE'") from None
    version = data.get("format_version") if isinstance(data, dict) else None
    if version != PLAN_FORMAT_VERSION:
        raise DsflowError("DSF-E811", f"{source} has plan format version {version!r}; this dsflow reads "
                          f"version {PLAN_FORMAT_VERSION}",
                          hint="make and apply the plan with the same dsflow version (docs/plan-json.md)")
    try:
        return Plan.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise DsflowError("DSF-E812", f"{source} is not a valid saved plan: {where}: {first['msg']}",
                          hint="save one with 'dsflow plan --out FILE'; do not edit it") from None


if __name__ == "__main__":
    print(json.dumps(plan_json_schema(), indent=2))
