"""The latency `dsflow status` and the metrics report (core/latency.py), computed from progress Spark really reported:
tests/unit/progress/spark_progress.json holds StreamingQueryProgress JSON captured from real runs (how: capture.py
beside it). The expected figures are worked out here from the progress's own fields with a reading of the timestamps
of its own (time.strptime), not core/latency.py's."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import numpy
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from dsflow.cli.render import latency_cell
from dsflow.core.latency import (
    RECORD_FIELDS, SOURCE_TIMESTAMP_HEADER, NewestBatch, latency_fields, nearest_rank, newest_with_records,
    record_latency_fields,
)
from dsflow.runtime.metrics import registry

RECORDED = json.loads((Path(__file__).parent / "progress" / "spark_progress.json").read_text())
WATERMARKED, STATELESS, REALTIME = RECORDED["watermarked"], RECORDED["stateless"], RECORDED["realtime"]


def ms(stamp: str) -> int:
    """'2026-11-30T15:28:32.614Z' as milliseconds since the epoch."""
    whole, fraction = stamp.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) * 1000 + int(fraction)


def batch(progresses: list[dict], batch_id: int) -> dict:
    return next(p for p in progresses if p["batchId"] == batch_id)


def test_a_watermarked_batch_with_records_has_its_trigger_time_and_event_time_lags():
    for progress in (p for p in WATERMARKED if p["numInputRows"] > 0):
        took = progress["durationMs"]["triggerExecution"]
        end = ms(progress["timestamp"]) + took
        got = latency_fields(progress)
        assert got == {"latency_batch_id": progress["batchId"], "batch_latency_ms": took,
                       "event_time_lag_ms": end - ms(progress["eventTime"]["max"]),
                       "oldest_event_lag_ms": end - ms(progress["eventTime"]["min"])}
        assert 0 < got["event_time_lag_ms"] <= got["oldest_event_lag_ms"]  # the rate source stamps rows as made
    assert latency_fields(batch(WATERMARKED, 35))["event_time_lag_ms"] == 474  # ends 32.702 + 0.386, newest 32.614


def test_what_the_progress_does_not_carry_is_unknown_never_zero():
    unknown = dict.fromkeys(("latency_batch_id", "batch_latency_ms", "event_time_lag_ms", "oldest_event_lag_ms"))
    assert latency_fields(None) == unknown
    assert latency_fields(batch(WATERMARKED, 36)) == unknown  # a batch that only moved the watermark
    assert latency_fields(batch(WATERMARKED, 0)) == unknown  # the first batch read nothing
    stateless = latency_fields(batch(STATELESS, 2))
    assert stateless["batch_latency_ms"] == batch(STATELESS, 2)["durationMs"]["triggerExecution"] > 0
    assert stateless["event_time_lag_ms"] is None and stateless["oldest_event_lag_ms"] is None  # no watermark


def test_in_real_time_mode_the_batch_duration_is_not_taken_for_a_latency():
    """Real-time mode's progress is of its long-running batch: triggerExecution spans the 5 s trigger interval (and
    the start), and the progress carries no latency figure; without a watermark there is no event time either."""
    [progress] = REALTIME
    assert progress["numInputRows"] > 0 and progress["durationMs"]["triggerExecution"] > 5_000
    assert "eventTime" not in progress
    assert latency_fields(progress, realtime=True) == {"latency_batch_id": 0, "batch_latency_ms": None,
                                                       "event_time_lag_ms": None, "oldest_event_lag_ms": None}
    got = latency_fields(batch(WATERMARKED, 35), realtime=True)  # an event time is still a figure of the data
    assert got["batch_latency_ms"] is None and got["event_time_lag_ms"] == 474


def test_the_status_keeps_the_newest_batch_with_records_across_its_writes():
    asked = []

    def recent():
        asked.append(1)
        return WATERMARKED

    watch = NewestBatch()
    assert watch.fields(batch(WATERMARKED, 36), recent)["latency_batch_id"] == 35  # first look: the recent ones
    assert len(asked) == 1
    assert watch.fields(batch(WATERMARKED, 36), recent)["latency_batch_id"] == 35  # nothing new: not asked again
    assert len(asked) == 1
    fresh = NewestBatch()
    assert fresh.fields(batch(WATERMARKED, 11), recent)["latency_batch_id"] == 11 and len(asked) == 1
    assert fresh.fields(batch(WATERMARKED, 12), recent)["latency_batch_id"] == 11  # the next one read nothing
    assert len(asked) == 1
    assert fresh.fields(batch(WATERMARKED, 34), recent)["latency_batch_id"] == 35  # batches missed: looked back
    assert len(asked) == 2
    assert NewestBatch().fields(None, recent) == latency_fields(None)
    assert newest_with_records(WATERMARKED[:1]) is None


def test_the_table_and_the_metrics_show_known_figures_and_leave_out_unknown_ones():
    known = {"address": "query.a.b.c", "state": "running", **latency_fields(batch(WATERMARKED, 35))}
    assert latency_cell(known) == "batch 386 ms, event 474 ms"
    stateless = {"address": "query.a.b.d", "state": "running", **latency_fields(batch(STATELESS, 2))}
    assert latency_cell(stateless) == "batch 1.2 s"  # 1,193 ms
    unknown = {"address": "query.a.b.e", "state": "running", **latency_fields(None)}
    assert latency_cell(unknown) == "-"
    assert latency_cell({**known, "event_time_lag_ms": 3 * 86_400_000 * 365}) == "batch 386 ms, event 1,095 d"
    text = generate_latest(registry(lambda: [known, stateless, unknown])).decode()
    lines = text.splitlines()
    assert 'dsflow_query_batch_latency_seconds{query="a.b.c"} 0.386' in lines
    assert 'dsflow_query_event_time_lag_seconds{query="a.b.c"} 0.474' in lines
    assert 'dsflow_query_oldest_event_lag_seconds{query="a.b.c"} 1.469' in lines  # 33.088 - 31.619
    latency = ("dsflow_query_batch_latency_seconds", "dsflow_query_event_time_lag_seconds",
               "dsflow_query_oldest_event_lag_seconds")
    shown = {line.split("{")[0] + line.split("}")[0].split("query=")[1] for line in lines if line.startswith(latency)}
    assert shown == {f"{name}{query}" for name in latency for query in ('"a.b.c"',)} | {
        'dsflow_query_batch_latency_seconds"a.b.d"'}  # the unknown ones left out, not 0


@settings(max_examples=60)
@given(st.lists(st.integers(-5_000, 600_000), min_size=1, max_size=400), st.sampled_from([0.01, 0.5, 0.9, 0.99, 1.0]))
def test_a_percentile_of_records_is_numpys_inverted_cdf(latencies, fraction):
    assert nearest_rank(sorted(latencies), fraction) == int(numpy.percentile(latencies, fraction * 100,
                                                                                method="inverted_cdf"))


def test_record_latencies_give_p50_p99_max_and_their_count_and_none_without_records():
    assert record_latency_fields([]) == {**dict.fromkeys(RECORD_FIELDS[:-1]), "record_latency_samples": 0}
    fields = record_latency_fields(list(range(200, 0, -1)))
    assert fields == {"record_latency_p50_ms": 100, "record_latency_p99_ms": 198, "record_latency_max_ms": 200,
                      "record_latency_samples": 200}
    entry = {"address": "query.a.b.r", "state": "running", **latency_fields(None), **fields}
    assert latency_cell(entry) == "records p50 100 ms p99 198 ms"
    lines = generate_latest(registry(lambda: [entry])).decode().splitlines()
    assert 'dsflow_query_record_latency_p99_seconds{query="a.b.r"} 0.198' in lines
    assert 'dsflow_query_record_latency_p50_seconds{query="a.b.r"} 0.1' in lines


class _Message:
    def __init__(self, timestamp: tuple[int, int], headers: list | None) -> None:
        self._timestamp, self._headers = timestamp, headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def headers(self) -> list | None:
        return self._headers


def test_a_records_latency_is_its_timestamp_minus_its_source_header_and_unknown_without_either():
    from dsflow.adapters.kafka.latency import record_latency_ms

    header = [("other", b"1"), (SOURCE_TIMESTAMP_HEADER, b"1700000000000")]
    assert record_latency_ms(_Message((1, 1700000000012), header)) == 12
    assert record_latency_ms(_Message((1, 1700000000012), None)) is None
    assert record_latency_ms(_Message((0, -1), header)) is None
    assert record_latency_ms(_Message((1, 1700000000012), [(SOURCE_TIMESTAMP_HEADER, b"x")])) is None
