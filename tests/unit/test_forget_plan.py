"""`removed:` entries (core/removals.py, load/removals.py): a deployed object that left the project is forgotten, not
deleted. The plan shows a forget with what happens to it (a query stopped or left running, a topic kept with its
records); nothing is destroyed, so no acknowledgement is needed. Golden plans: tests/golden/categories/forget.*.
What apply records and the topic kept: tests/integration/test_forget_import.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsflow.core.observing import questions
from dsflow.core.plan import Action, Observations, PlanOptions
from dsflow.core.resources import project_resources
from dsflow.core.safety import Allowance, check_data_loss
from dsflow.core.state import State
from dsflow.errors import DsflowError
from dsflow.load.project import load_project
from support.projects import EXAMPLE_VARIABLES, applied, copy_example, plan_from_files
from test_plan_categories import PIPELINES, check_all

ENRICHED = "query.analytics.curated.pageviews_enriched"
ENRICHED_SINK = "relation.analytics.curated.pageviews_enriched"
QUERY_TEXT = "CREATE STREAM curated.pageviews_enriched AS"


plan_with_removals = plan_from_files


def _drop_enriched(root: Path, entries: str) -> None:
    path = root / PIPELINES
    text = path.read_text()
    path.write_text(text[:text.index(QUERY_TEXT)])
    (root / "removed.yml").write_text(entries)


@pytest.fixture()
def deployed(tmp_path) -> tuple[Path, State]:
    root = copy_example(tmp_path)
    return root, applied(plan_with_removals(root, State()))


REMOVED = f"""removed:
  - address: {ENRICHED}
  - address: curated.pageviews_enriched
"""


def test_a_removed_query_and_its_sink_are_forgotten_not_deleted(deployed):
    root, state = deployed
    _drop_enriched(root, REMOVED)
    plan = plan_with_removals(root, state, observations=Observations(record_counts={ENRICHED_SINK: 1234}))
    assert [(c.address, c.action) for c in plan.actionable] == [
        (ENRICHED, Action.FORGET), (ENRICHED_SINK, Action.FORGET)]
    query, topic = plan.actionable
    assert query.keep_running is False and "query stopped" in (query.effect or "")
    assert topic.effect == ("topic kept, ~1,234 records stay; dsflow no longer "
                            "manages it")
    assert topic.destroys is None and not plan.destroying
    check_data_loss(plan, Allowance())  # nothing is destroyed: no acknowledgement needed
    assert plan.summary() == {"create": 0, "update": 0, "replace": 0, "delete": 0, "forget": 2}
    check_all("forget", plan)
    after = applied(plan, state)
    assert ENRICHED not in after.resources and ENRICHED_SINK not in after.resources


def test_a_query_kept_running_says_so(deployed):
    root, state = deployed
    _drop_enriched(root, f"removed:\n  - address: {ENRICHED}\n    keep_running: true\n")
    plan = plan_with_removals(root, state)
    forgets = {c.address: c for c in plan.actionable if c.action is Action.FORGET}
    assert forgets[ENRICHED].keep_running is True and "left running" in (forgets[ENRICHED].effect or "")
    deletes = [c.address for c in plan.actionable if c.action is Action.DELETE]
    assert deletes == [ENRICHED_SINK], "without its own entry the sink is deleted as before"


def test_the_refresh_counts_the_records_of_a_forgotten_topic(deployed):
    root, state = deployed
    _drop_enriched(root, REMOVED)
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    asked = questions(project_resources(project), state, PlanOptions(removed={ENRICHED_SINK: False}))
    assert ENRICHED_SINK in asked.counted


def test_a_removed_entry_that_is_not_deployed_plans_nothing(tmp_path):
    root = copy_example(tmp_path)
    (root / "removed.yml").write_text("removed:\n  - address: query.analytics.curated.gone\n")
    plan = plan_with_removals(root, applied(plan_with_removals(root, State())))
    assert not plan.actionable


@pytest.mark.parametrize(("entries", "code"), [
    ("removed:\n  - address: store.kafka_main\n", "DSF-E856"),
    (f"removed:\n  - address: {ENRICHED}\n", "DSF-E857"),
    ("removed:\n  - address: relation.analytics.curated.old\n  - address: curated.old\n", "DSF-E858"),
    ("moved:\n  - {from: curated.old, to: curated.pageviews_enriched}\nremoved:\n  - address: curated.old\n",
     "DSF-E858"),
    ("removed:\n  - address: curated.old\n    keep_runing: true\n", "DSF-E"),
])
def test_a_removed_entry_that_is_not_one_is_refused_with_its_line(tmp_path, entries, code):
    root = copy_example(tmp_path)
    (root / "removed.yml").write_text(entries)
    with pytest.raises(DsflowError) as raised:
        load_project(root, variables=EXAMPLE_VARIABLES)
    found = [d for d in raised.value.diagnostics if d.code.startswith(code)]
    assert found and all(d.location is not None and d.location.file.endswith("removed.yml") for d in found), \
        [str(d) for d in raised.value.diagnostics]


def test_apply_records_a_forgotten_query_in_the_state_and_its_ledger(deployed):
    from dsflow.core.state import LedgerEntry
    from dsflow.engine.apply import _forgotten

    root, state = deployed
    state = state.with_ledger([LedgerEntry(query=ENRICHED, version="v1", checkpoint="c1", started_at="t0",
                                           stopped_at="t1")])
    _drop_enriched(root, REMOVED)
    query = plan_with_removals(root, state).actionable[0]
    after = _forgotten(state, query)
    assert ENRICHED not in after.resources and after.serial == state.serial + 1
    [entry] = after.forgotten
    assert (entry.address, entry.kept, entry.data) == (ENRICHED, "stopped", state.resources[ENRICHED].data)
    assert after.history(ENRICHED)[0].forgotten_at == entry.forgotten_at
