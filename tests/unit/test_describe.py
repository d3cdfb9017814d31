"""`dsflow describe QUERY` (engine/describing.py) reads the state, the checkpoint and the driver's status file. The
checkpoint here is laid out as Spark writes it (`commits/<batch>`, `offsets/<batch>`: `v1`, a metadata line, one
JSON offset per source, partition -> offset as dsflow's data sources write them); adapters/spark/checkpoint.py is
checked against real Spark checkpoints in the e2e tests (tests/e2e/test_day2_verbs.py, the ledger's stop offsets)."""

from __future__ import annotations

import json

import pytest

from dsflow.core.state import LedgerEntry, State
from dsflow.engine.describing import describe, describe_text
from dsflow.errors import DsflowError
from support.projects import applied, copy_example
from test_plan_categories import FILTERED, plan_of


def _running(tmp_path, state: State) -> State:
    checkpoint, run_dir = tmp_path / "checkpoint", tmp_path / "run"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "offsets").mkdir()
    run_dir.mkdir()
    for batch in (0, 1):
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
        (checkpoint / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0}\n' + json.dumps({"0": 40 + batch, "1": 17}) + "\n")
    (checkpoint / "offsets" / "2").write_text('v1\n{}\n{"0":99,"1":99}\n')  # not committed yet
    (run_dir / "status.json").write_text(json.dumps({"state": "running", "batch_id": 2, "watermark":
                                                     "2026-11-29T16:00:00.000Z", "state_rows": 1200,
                                                     "state_bytes": 65536}))
    entry = state.resources[FILTERED]
    outputs = {"checkpoint": str(checkpoint), "run_dir": str(run_dir), "topics": ["pageviews"], "version": "abc"}
    state = state.with_resource(entry.model_copy(update={"outputs": outputs}))
    return state.with_ledger([LedgerEntry(query=FILTERED, version="abc", category="new", checkpoint=str(checkpoint),
                                          started_at="2026-11-29T15:00:00+00:00")])


def test_describe_shows_the_sql_the_committed_offsets_the_watermark_and_the_state_size(tmp_path):
    root = copy_example(tmp_path)
    state = _running(tmp_path, applied(plan_of(root, State())))
    described = describe(state, FILTERED)
    assert described["version"] == "abc" and "Page_2" in described["sql"]
    assert described["sources"] == [{"relation": "analytics.public.pageviews", "log": "pageviews",
                                     "start": "earliest", "committed_offsets": {"0": 41, "1": 17}}]
    assert described["last_committed_batch"] == 1
    assert described["status"]["watermark"] == "2026-11-29T16:00:00.000Z"
    assert (described["status"]["state_rows"], described["status"]["state_bytes"]) == (1200, 65536)
    text = describe_text(described)
    assert "source analytics.public.pageviews (pageviews): 0: 41, 1: 17" in text
    assert "watermark: 2026-11-29T16:00:00.000Z" in text and "state store: 1,200 rows, 65,536 bytes" in text
    assert "new since 2026-11-29T15:00:00+00:00" in text
    assert "state" not in described  # read only when asked (--state-sample), with Spark
    stateless = describe(state, FILTERED, sample=3)  # a checkpoint without state/: nothing to read, Spark not started
    assert stateless["state"] == [] and "state sample: none" in describe_text(stateless)


def test_a_query_that_is_not_deployed_has_nothing_to_describe(tmp_path):
    root = copy_example(tmp_path)
    state = applied(plan_of(root, State())).without(FILTERED)
    with pytest.raises(DsflowError) as raised:
        describe(state, FILTERED)
    assert raised.value.code == "DSF-E431"


def test_a_query_without_a_checkpoint_or_status_yet_is_described_as_such(tmp_path):
    root = copy_example(tmp_path)
    described = describe(applied(plan_of(root, State())), FILTERED)
    assert described["last_committed_batch"] is None and described["sources"][0]["committed_offsets"] is None
    assert "nothing committed yet" in describe_text(described) and "no status yet" in describe_text(described)
