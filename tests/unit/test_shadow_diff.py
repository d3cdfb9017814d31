"""The pure core of shadow runs (core/shadow.py): aligned cuts, a stream's multiset diff with counts, a changelog's
diff by key after folding (the last value wins, a tombstone deletes), the state's record, and the CLI's text."""

from __future__ import annotations

import random
from collections import Counter

from dsflow.cli.shadow import diff_text
from dsflow.core.shadow import Cut, ShadowRun, aligned, canonical, changelog_parts, diff, fold, positions, \
    stream_parts
from dsflow.core.state import State


def _run(kind: str = "stream") -> ShadowRun:
    return ShadowRun(query="query.db.s.q", live_version="a", candidate_version="b", kind=kind, live_topic="out",
                     topic="out__shadow", store="k", checkpoint="/c", started_at="2026-11-30T00:00:00+00:00")


def test_cuts_align_on_equal_offsets_of_the_sources_both_read() -> None:
    live = Cut(batch=3, offsets={"in": {"0": 10, "1": 7}})
    assert aligned(live, Cut(batch=9, offsets={"in": {"1": 7, "0": 10}})), "batch ids do not matter, offsets do"
    assert not aligned(live, Cut(batch=3, offsets={"in": {"0": 10, "1": 6}}))
    assert aligned(live, Cut(batch=1, offsets={"in": {"0": "10", "1": 7}})), "an offset as text or number"
    assert aligned(Cut(batch=1, offsets={"in": {"0": 1}, "other": {"0": 5}}), Cut(batch=1, offsets={"in": {"0": 1}}))
    assert not aligned(Cut(batch=None, offsets={}), Cut(batch=None, offsets={})), "no shared source: nothing to align"


def test_positions_name_each_source_by_its_topic_in_query_order() -> None:
    assert positions(["a", "b"], [{"0": 1}, {"0": 2, "1": 3}]) == {"a": {"0": 1}, "b": {"0": 2, "1": 3}}
    assert positions(["a"], None) == {}


def test_stream_diff_is_the_difference_of_the_multisets_with_counts() -> None:
    live = [{"id": 1}, {"id": 2}, {"id": 2}, {"id": 3}]
    shadow = [{"id": 2}, {"id": 3}, {"id": 3}, {"id": 4}, {"id": 4}, {"id": 4}]
    only_live, only_shadow, rows_live, rows_shadow, same = stream_parts(live, shadow)
    assert [(r.value, r.count) for r in only_live] == [({"id": 1}, 1), ({"id": 2}, 1)]
    assert [(r.value, r.count) for r in only_shadow] == [({"id": 3}, 1), ({"id": 4}, 3)]
    assert (rows_live, rows_shadow, same) == (4, 6, 2)


def test_stream_rows_compare_up_to_the_order_of_their_fields_and_of_the_rows() -> None:
    rows = [{"id": i, "name": f"n{i % 7}", "amount": i * 1.5} for i in range(500)]
    shuffled = [dict(reversed(list(r.items()))) for r in rows]
    random.Random(4).shuffle(shuffled)
    only_live, only_shadow, rows_live, rows_shadow, same = stream_parts(rows, shuffled)
    assert (only_live, only_shadow, rows_live, rows_shadow, same) == ([], [], 500, 500, 500)


def test_stream_diff_against_a_plain_python_reference() -> None:
    """Random multisets: only_live and only_shadow are exactly what Counter subtraction gives."""
    rand = random.Random(11)
    for _ in range(50):
        live = [{"v": rand.randrange(8)} for _ in range(rand.randrange(30))]
        shadow = [{"v": rand.randrange(8)} for _ in range(rand.randrange(30))]
        only_live, only_shadow, _, _, same = stream_parts(live, shadow)
        left, right = Counter(r["v"] for r in live), Counter(r["v"] for r in shadow)
        assert {r.value["v"]: r.count for r in only_live} == dict(left - right)
        assert {r.value["v"]: r.count for r in only_shadow} == dict(right - left)
        assert same == sum((left & right).values())


def test_fold_keeps_the_last_value_of_each_key_and_a_tombstone_deletes_it() -> None:
    records = [("a", {"n": 1}), ("b", {"n": 1}), ("a", {"n": 2}), ("b", None), ("c", {"n": 5}), ("b", {"n": 9}),
               ("c", None), (None, {"n": 0})]
    assert fold(records) == {"a": {"n": 2}, "b": {"n": 9}, canonical({"n": 0}): {"n": 0}}


def test_changelog_diff_by_key_after_folding() -> None:
    live = [("1", {"k": 1, "c": 3}), ("2", {"k": 2, "c": 1}), ("3", {"k": 3, "c": 2}), ("3", {"k": 3, "c": 4}),
            ("4", {"k": 4, "c": 1})]
    shadow = [("1", {"c": 3, "k": 1}), ("2", {"k": 2, "c": 2}), ("3", {"k": 3, "c": 4}), ("5", {"k": 5, "c": 1}),
              ("4", {"k": 4, "c": 1}), ("4", None)]
    only_live, only_shadow, differ, keys_live, keys_shadow, same = changelog_parts(live, shadow)
    assert [(r.key, r.value) for r in only_live] == [("4", {"k": 4, "c": 1})], "deleted by the shadow's tombstone"
    assert [(r.key, r.value) for r in only_shadow] == [("5", {"k": 5, "c": 1})]
    assert [(d.key, d.live, d.shadow) for d in differ] == [("2", {"k": 2, "c": 1}, {"k": 2, "c": 2})]
    assert (keys_live, keys_shadow, same) == (4, 4, 2), "keys 1 and 3 equal (3 after its update)"


def test_diff_reports_the_aligned_offsets_and_counts() -> None:
    live, shadow = Cut(batch=4, offsets={"in": {"0": 3}}), Cut(batch=2, offsets={"in": {"0": 3}, "x": {"0": 1}})
    found = diff(_run("changelog"), live, shadow, [("1", {"c": 1}), ("1", {"c": 2})], [("1", {"c": 2})])
    assert found.empty and found.offsets == {"in": {"0": 3}}
    assert (found.live_records, found.shadow_records, found.live_rows, found.same) == (2, 1, 1, 1)
    assert (found.live_batch, found.shadow_batch) == (4, 2)
    stream = diff(_run(), live, shadow, [(None, {"id": 1})], [(None, {"id": 1}), (None, {"id": 1})])
    assert not stream.empty and [(r.value, r.count) for r in stream.only_shadow] == [({"id": 1}, 1)]
    assert "only shadow: {\"id\":1}" in diff_text(stream) and diff_text(stream).endswith("The versions differ.")
    assert diff_text(found).endswith("No difference.")


def test_a_shadow_is_recorded_in_the_state_beside_the_resources_and_survives_a_round_trip() -> None:
    state = State(lineage="l").with_shadow("query.db.s.q", _run())
    assert state.serial == 1 and not state.resources
    again = State.model_validate_json(state.model_dump_json())
    assert again.shadows["query.db.s.q"] == _run()
    assert again.with_shadow("query.db.s.q", None).shadows == {}
    assert State.model_validate_json('{"lineage": "l"}').shadows == {}, "a state written before shadows reads"


SQL = """\
CREATE STREAM pageviews (id BIGINT, userid VARCHAR) WITH ('topic' = 'pageviews', 'value.format' = 'json');
CREATE STREAM copied WITH ('topic' = 'copied') AS SELECT id, userid FROM pageviews;
CREATE MATERIALIZED VIEW counts AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;
"""


def _deployed(tmp_path, sql: str = SQL):
    """A project whose plan is recorded as applied (no broker, no driver), then loaded with `sql` as its files."""
    from support.projects import EXAMPLE_VARIABLES, applied, make_project

    from dsflow.engine import operations

    root = make_project(tmp_path, {"sql/p.sql": SQL})
    options = operations.Options(root, None, EXAMPLE_VARIABLES)
    loaded = operations.load(options)
    backend = loaded.workspace.state_backend()
    backend.write(applied(operations.plan(loaded, do_refresh=False), backend.read()), expected_serial=0)
    (root / "sql" / "p.sql").write_text(sql)
    return operations.load(options)


def _code(call) -> str:
    import pytest

    from dsflow.errors import DsflowError

    with pytest.raises(DsflowError) as err:
        call()
    return err.value.code


def test_start_refuses_what_has_no_candidate_or_no_log_sink_before_touching_anything(tmp_path) -> None:
    from dsflow.engine import shadow

    loaded = _deployed(tmp_path, SQL.replace("FROM pageviews;", "FROM pageviews WHERE id > 0;")
                       .replace("GROUP BY userid", "WHERE id > 0 GROUP BY userid"))
    project, workspace = loaded.project, loaded.workspace
    assert _code(lambda: shadow.start(project, workspace, "nothing")) == "DSF-E940"
    assert _code(lambda: shadow.start(project, workspace, "counts")) == "DSF-E942", "a view's table is no log"
    unchanged = _deployed(tmp_path / "again")
    assert _code(lambda: shadow.start(unchanged.project, unchanged.workspace, "copied")) == "DSF-E941"
    assert _code(lambda: shadow.stop(project, workspace, "copied")) == "DSF-E943", "no shadow run to act on"
    assert _code(lambda: shadow.promotable(project, workspace, "copied")) == "DSF-E943"
    assert _code(lambda: shadow.diff(project, workspace, "relation.analytics.public.copied", 0)) == "DSF-E943"
    assert workspace.state_backend().read().shadows == {}


def test_the_shadow_driver_writes_its_own_topic_subject_and_dead_letters_under_its_own_name(tmp_path) -> None:
    from dsflow.adapters.spark.translate import query_spec
    from dsflow.engine.shadow import shadow_project

    project = _deployed(tmp_path).project
    query = next(q for q in project.queries if q.fqn.endswith(".copied"))
    relation = project.relation(query.sink)
    seen, renamed = shadow_project(project, query, relation, "copied__shadow")
    spec = query_spec(seen, renamed, "v", "/tmp/c", "/tmp/s.json")
    live = query_spec(project, query, "v", "/tmp/c", "/tmp/s.json")
    assert (spec.name, spec.sink.topic) == (f"{query.fqn}__shadow", "copied__shadow")
    named = relation.model_copy(update={"value_subject": "copied-v"})  # a registry format's own subject
    assert shadow_project(project, query, named, "copied__shadow")[0].relation(query.sink).value_subject \
        == "copied__shadow-value", "never the live subject"
    assert seen.dlq_topic(renamed) == f"{project.dlq_topic(query)}__shadow"
    assert spec.select_sql.replace("__shadow", "") == live.select_sql and spec.sources[0].topic == "pageviews"
    assert project.relation(query.sink).topic == "copied", "the project itself is unchanged"
