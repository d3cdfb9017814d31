"""GraphQL's schema and resolvers (dsflow/server/graphql.py) over the catalog of the example project, with the real
access model: the published schema is current, the limits hold, failures show no internals and no secret.

The authorization matrix through the live server is tests/e2e/test_privilege_matrix.py; here the state is the one
an apply of the example project's plan records (tests/support/projects.py `applied`), and the schema is executed
directly.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from dsflow.core.access import AccessModel, records_of
from dsflow.core.secrets import register
from dsflow.core.state import State
from dsflow.engine.operations import Options, load
from dsflow.server import catalog as cat
from dsflow.server.graphql import schema, schema_sdl
from support.projects import EXAMPLE_PROJECT, EXAMPLE_VARIABLES, REPO

SCHEMA_DOC = REPO / "docs" / "graphql.schema.graphql"
ANALYST_SEES = {"database.analytics", "schema.analytics.curated", "relation.analytics.curated.pageviews_filtered",
                "query.analytics.curated.pageviews_filtered"}


@pytest.fixture(scope="module")
def inputs() -> tuple[cat.Inputs, list]:
    """The example project as applied, two status entries, and two users bound to roles."""
    from dsflow.core.plan import make_plan
    from dsflow.core.resources import project_resources
    from support.projects import applied

    project = load(Options(EXAMPLE_PROJECT, "dev", EXAMPLE_VARIABLES)).project
    state = applied(make_plan(project.name, "dev", project_resources(project), State()))
    users = [("binding.ann", {"user": "ann", "roles": ["pipeline_admin"]}),
             ("binding.root", {"user": "root", "roles": ["orgadmin"]})]
    statuses = [{"address": "query.analytics.curated.pageviews_filtered", "state": "running", "restarts": 1,
                 "input_rows_per_second": 2.5, "last_error": "broker said hunter2-secret"},
                {"address": "query.analytics.curated.pageviews_enriched", "state": "failed"}]
    return cat.Inputs(project, state, statuses), users


def run(inputs, user: str, query: str) -> dict:
    the_inputs, users = inputs
    access = AccessModel.from_records([*records_of(the_inputs.state.resources.values()), *users])
    result = schema.execute_sync(query, context_value={"user": user, "access": access, "inputs": the_inputs})
    return {"data": result.data, "errors": [{"message": e.message, "path": e.path, **(e.extensions or {})}
                                            for e in result.errors or []]}


def test_the_published_schema_is_current() -> None:
    """docs/graphql.schema.graphql is what the server serves; regenerate it with
    `python -m dsflow.server.graphql > docs/graphql.schema.graphql`."""
    assert SCHEMA_DOC.read_text() == schema_sdl(), "regenerate docs/graphql.schema.graphql (see the docstring)"
    printed = subprocess.run([sys.executable, "-m", "dsflow.server.graphql"], capture_output=True, text=True,
                             check=True).stdout
    assert printed == schema_sdl()


def test_lists_show_what_the_caller_may_see_and_one_object_says_what_is_missing(inputs) -> None:
    answer = run(inputs, "ann", """{ databases { address } schemas { address } relations { address columns { name } }
        queries { address state sql sourceRelations { address } } lineage { nodes { id } edges { source target } }
        hidden: relation(address: "analytics.public.pageviews") { address }
        shown: relation(address: "relation.analytics.curated.pageviews_filtered") { fqn kind valueFormat } }""")
    data = answer["data"]
    seen = {i["address"] for key in ("databases", "schemas", "relations", "queries") for i in data[key]}
    assert seen == ANALYST_SEES
    [query] = data["queries"]
    assert query["state"] == "running" and "FROM `analytics`.`public`.`pageviews`" in query["sql"]
    assert data["shown"] == {"fqn": "analytics.curated.pageviews_filtered", "kind": "stream", "valueFormat": "json"}
    assert {n["id"] for n in data["lineage"]["nodes"]} == {a for a in ANALYST_SEES if a.startswith(("rel", "query"))}
    assert data["lineage"]["edges"] == [{"source": "query.analytics.curated.pageviews_filtered",
                                         "target": "relation.analytics.curated.pageviews_filtered"}]
    errors = {e["path"][0] if e["path"][0] != "queries" else "source": e for e in answer["errors"]}
    assert set(errors) == {"hidden", "source"} and data["hidden"] is None
    for error in errors.values():
        assert error["code"] == "DSF-E350"
        assert "lacks USAGE on schema.analytics.public, SELECT on relation.analytics.public.pageviews" \
               in error["message"] and "user 'ann' (roles: analyst, pipeline_admin, public)" in error["message"]


def test_unknown_objects_are_not_found_and_everything_is_seen_by_orgadmin(inputs) -> None:
    answer = run(inputs, "root", '{ relations { owner } queries { name } a: relation(address: "no.such.thing") '
                                 '{ address } b: query(name: "nope") { name } whoami { roles } }')
    assert [e["code"] for e in answer["errors"]] == ["DSF-E351", "DSF-E351"]
    assert answer["data"]["relations"] == [{"owner": "sysadmin"}] * 4 and len(answer["data"]["queries"]) == 2
    assert answer["data"]["whoami"]["roles"] == ["orgadmin", "public", "securityadmin", "sysadmin", "useradmin"]


def test_status_is_filtered_and_scrubbed(inputs) -> None:
    register(["hunter2-secret"])
    answer = run(inputs, "ann", "{ status { address state restarts inputRowsPerSecond details } }")
    assert answer["errors"] == []
    [entry] = answer["data"]["status"]
    assert entry["address"] == "query.analytics.curated.pageviews_filtered" and entry["restarts"] == 1
    assert entry["inputRowsPerSecond"] == 2.5 and "hunter2" not in str(entry)


def test_no_caller_no_answer_and_failures_show_no_internals(inputs) -> None:
    the_inputs, _ = inputs
    anonymous = schema.execute_sync("{ relations { address } }", context_value={"user": None, "access": None,
                                                                                 "inputs": the_inputs})
    assert anonymous.errors[0].extensions["code"] == "DSF-E352"

    def broken():
        raise RuntimeError("disk /secret/path unreadable")

    access = AccessModel.from_records(records_of(the_inputs.state.resources.values()))
    failed = schema.execute_sync("{ relations { address } }",
                                 context_value={"user": "root", "access": access, "inputs": broken})
    assert [e.message for e in failed.errors] == ["internal error (see the server log)"]


def test_limits_refuse_oversized_queries(inputs) -> None:
    aliases = " ".join(f"a{i}: whoami {{ user }}" for i in range(40))
    refused = run(inputs, "root", "{ " + aliases + " }")
    assert refused["data"] is None and refused["errors"][0]["message"] == "40 aliases found. Allowed: 30"
    deep = "{ queries { sinkRelation { columns { name } } } }"
    assert run(inputs, "root", deep)["errors"] == []
    huge = "{ " + " ".join("whoami { user roles }" for _ in range(700)) + " }"
    assert "more than 2000 tokens" in run(inputs, "root", huge)["errors"][0]["message"]
