"""`dsflow infer`'s core (core/inference.py): the statement inferred from sampled records, checked by dsflow's own
loader (every inferred statement validates) for records hypothesis draws, and by hand for the rules."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsflow.core.inference import infer_stream
from dsflow.load.project import check_project
from support.projects import make_project

names = st.text(string.ascii_lowercase + "_", min_size=1, max_size=8).filter(lambda s: s.strip("_"))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**62, 2**62),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(names, inner, max_size=3)), max_leaves=8)
records = st.lists(st.dictionaries(names, values, min_size=1, max_size=5), min_size=1, max_size=6)


def _valid(tmp_path, statement: str) -> list[str]:
    root = make_project(tmp_path, {"sql/inferred.sql": statement})
    return [f"{d.code} {d.message}" for d in check_project(root).diagnostics if d.severity == "error"]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=records)
def test_every_inferred_statement_validates(tmp_path, rows) -> None:
    inferred = infer_stream("inferred", "events", [(None, json.dumps(r)) for r in rows])
    assert _valid(tmp_path, inferred.text()) == [], inferred.text()


def test_types_widen_nest_and_default_to_varchar() -> None:
    rows = [{"id": 1, "score": 2, "ok": True, "tags": ["a"], "geo": {"lat": 1.5}, "maybe": None, "mixed": 1},
            {"id": 2, "score": 2.5, "ok": False, "tags": [], "geo": {"lat": 2, "lon": 3}, "maybe": None,
             "mixed": "x", "late": "y"}]
    inferred = infer_stream("events", "events", [(None, json.dumps(r)) for r in rows])
    assert inferred.statement == (
        "CREATE STREAM events (\n  id BIGINT,\n  score DOUBLE,\n  ok BOOLEAN,\n  tags ARRAY<VARCHAR>,\n"
        "  geo STRUCT<lat DOUBLE, lon BIGINT>,\n  maybe VARCHAR,\n  mixed VARCHAR,\n  late VARCHAR\n"
        ") WITH ('topic' = 'events', 'value.format' = 'json');")
    assert "column maybe was null in every record read: typed VARCHAR" in inferred.notes


def test_keys_event_time_and_values_that_are_not_objects() -> None:
    read = [("k1", json.dumps({"id": 1, "viewtime": 1_700_000_000_000})), ("k2", "not json"), ("k3", "[1]"),
            ("k4", json.dumps({"id": 2, "viewtime": 1_700_000_000_500}))]
    inferred = infer_stream("pageviews", "dev_pageviews", read, "pageviews")
    assert inferred.records == 4
    assert "2 of them not a JSON object: left out of the columns" in inferred.notes
    assert inferred.statement.endswith("WITH ('topic' = 'pageviews', 'value.format' = 'json', "
                                       "'key.format' = 'string', 'timestamp' = 'viewtime');")


def test_keywords_and_odd_names_are_quoted(tmp_path) -> None:
    row = {"from": 1, "select": 2, "order": 3, "my field": 4, "a-b": 5, "ünï": 6, 'say "hi"': 7, "id": 8}
    inferred = infer_stream("inferred", "events", [(None, json.dumps(row))])
    assert '"from" BIGINT' in inferred.statement and '"say ""hi""" BIGINT' in inferred.statement
    assert "\n  id BIGINT" in inferred.statement
    assert _valid(tmp_path, inferred.text()) == [], inferred.text()


def test_a_time_named_number_that_is_not_epoch_ms_is_no_event_time() -> None:
    inferred = infer_stream("e", "e", [(None, json.dumps({"ts": 5}))])
    assert "'timestamp'" not in inferred.statement
