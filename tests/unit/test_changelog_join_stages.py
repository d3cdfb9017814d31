"""The two stages of a changelog join (adapters/spark/changelog_join.py) run in plain Python, batch by batch as
Spark runs them, against a nested-loop join of the final snapshots; and the loader's choices and diagnostics
(DSF-E190..E192) for joins of two changelogs. Pure: no broker, no Spark.
"""

from __future__ import annotations

import json
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from dsflow.adapters.spark.changelog_join_state import LEFT, RIGHT, group_changes, row_changes
from dsflow.adapters.spark.translate import spark_select
from dsflow.load.project import check_project, load_project
from support.projects import make_project

SOURCES = """\
CREATE CHANGELOG orders (order_id BIGINT, user_id VARCHAR, amount BIGINT, PRIMARY KEY (order_id))
  WITH ('value.format' = 'json');
CREATE CHANGELOG users (user_id VARCHAR, name VARCHAR, PRIMARY KEY (user_id)) WITH ('value.format' = 'json');
CREATE CHANGELOG accounts (org VARCHAR, user_id VARCHAR, plan VARCHAR, PRIMARY KEY (org, user_id))
  WITH ('value.format' = 'json');
CREATE STREAM clicks (id BIGINT, user_id VARCHAR) WITH ('value.format' = 'json');
"""


def _pipeline(batches, side: str, keyed_by_left: bool) -> dict[str, tuple]:
    """Run the two stages over batches of (side, pk, fk or None, row or None); the output topic's content."""
    by_row: dict = {}
    by_key: dict = defaultdict(lambda: {"l": {}, "r": {}})
    topic: dict[str, tuple] = {}
    offset = 0
    for batch in batches:
        stage1 = defaultdict(list)
        for which, pk, fk, row in batch:
            offset += 1
            jk = json.dumps([fk]) if fk is not None else f"~{which}{pk}"
            stage1[(which, pk)].append((offset, jk, None if row is None else json.dumps(row)))
        stage2 = defaultdict(list)
        for (which, pk), rows in stage1.items():
            by_row[(which, pk)], out = row_changes(by_row.get((which, pk)), rows)
            for jk, row, moved in out:
                stage2[jk].append((which, pk, row, moved))
        written = []
        for jk, changes in stage2.items():
            by_key[jk], out = group_changes(by_key[jk], changes, side, keyed_by_left)
            for okey, keep, lv, rv in out:
                written.append(okey)
                if keep:
                    topic[okey] = (lv, rv)
                else:
                    topic.pop(okey, None)
        assert len(written) == len(set(written)), "an output key changed twice in one batch (racing writes)"
    return topic


def _expected(batches, side: str) -> set[tuple]:
    snapshot: dict = {LEFT: {}, RIGHT: {}}
    for batch in batches:
        for which, pk, fk, row in batch:
            if row is None:
                snapshot[which].pop(pk, None)
            else:
                snapshot[which][pk] = (fk, json.dumps(row))
    out = set()
    for lfk, lv in snapshot[LEFT].values():
        matched = [rv for rfk, rv in snapshot[RIGHT].values() if lfk is not None and rfk == lfk]
        out |= {(lv, rv) for rv in matched}
        if not matched and side in ("left", "full"):
            out.add((lv, None))
    if side == "full":
        fks = {fk for fk, _ in snapshot[LEFT].values()}
        out |= {(None, rv) for rfk, rv in snapshot[RIGHT].values() if rfk is None or rfk not in fks}
    return out


FK = st.sampled_from(["a", "b", "c", None])
LEFT_CHANGE = st.builds(lambda pk, fk, n, gone: (LEFT, str(pk), fk, None if gone else {"o": pk, "fk": fk, "n": n}),
                        st.integers(0, 6), FK, st.integers(0, 3), st.booleans())


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data(), side=st.sampled_from(["inner", "left", "full"]), fk_join=st.booleans())
def test_the_stages_give_the_join_of_the_final_snapshots(data, side, fk_join):
    """fk_join: each right row's join key is its primary key (a foreign-key join, keyed by the left's key when not
    FULL); else right rows share join keys (many-to-many, keyed by both keys)."""
    if fk_join:
        right = st.builds(lambda pk, gone: (RIGHT, pk, pk, None if gone else {"u": pk}),
                          st.sampled_from(["a", "b", "c"]), st.booleans())
    else:
        right = st.builds(lambda pk, fk, gone: (RIGHT, str(pk), fk, None if gone else {"u": pk, "fk": fk}),
                          st.integers(0, 4), FK, st.booleans())
    batches = data.draw(st.lists(st.lists(st.one_of(LEFT_CHANGE, right), max_size=12), min_size=1, max_size=5))
    keyed_by_left = fk_join and side != "full"
    topic = _pipeline(batches, side, keyed_by_left)
    assert set(topic.values()) == _expected(batches, side)
    assert len(topic) == len(_expected(batches, side))  # no joined row twice under two keys


def test_a_moved_foreign_key_is_upserted_by_its_new_group_or_deleted_when_it_joins_nothing():
    batches = [[(RIGHT, "a", "a", {"u": "a"}), (RIGHT, "b", "b", {"u": "b"}), (LEFT, "1", "a", {"o": 1})],
               [(LEFT, "1", "b", {"o": 1, "moved": True})]]
    assert _pipeline(batches, "inner", True) == {"1": (json.dumps({"o": 1, "moved": True}), json.dumps({"u": "b"}))}
    assert _pipeline(batches + [[(LEFT, "1", "c", {"o": 1})]], "inner", True) == {}
    assert _pipeline(batches + [[(LEFT, "1", "c", {"o": 1})]], "left", True) == {"1": (json.dumps({"o": 1}), None)}


def _join_key(which: int, pk: str, jk: str | None) -> str:
    return json.dumps([jk]) if jk is not None else f"~{which}{pk}"


def _route(by_row: dict, by_key: dict, changes: list[tuple], side: str, keyed_by_left: bool) -> dict[str, list]:
    """One micro-batch of (side, pk, offset, join key, row JSON or None) through both stages, each group (a task)
    on its own: {output key: [(group, keep, lv, rv), ...]} of the writes."""
    stage1 = defaultdict(list)
    for which, pk, offset, jk, row in changes:
        stage1[(which, pk)].append((offset, jk, row))
    stage2 = defaultdict(list)
    for (which, pk), rows in stage1.items():
        by_row[(which, pk)], out = row_changes(by_row.get((which, pk)), rows)
        for jk, row, moved in out:
            stage2[jk].append((which, pk, row, moved))
    writes = defaultdict(list)
    for jk, group in stage2.items():
        by_key[jk], out = group_changes(by_key[jk], group, side, keyed_by_left)
        for okey, keep, lv, rv in out:
            writes[okey].append((jk, keep, lv, rv))
    return writes


def _nested_loop(snapshot: dict, side: str, keyed_by_left: bool) -> dict[str, tuple]:
    """{output key: (left row, right row)} of the join of the rows {side: {pk: (join column, row JSON)}}."""
    def key(lpk, rpk):
        return lpk if keyed_by_left else json.dumps([lpk, rpk])

    out = {}
    for lpk, (ljk, lv) in snapshot[LEFT].items():
        matched = {rpk: rv for rpk, (rjk, rv) in snapshot[RIGHT].items() if ljk is not None and rjk == ljk}
        out.update({key(lpk, rpk): (lv, rv) for rpk, rv in matched.items()})
        if not matched and side in ("left", "full"):
            out[key(lpk, None)] = (lv, None)
    if side == "full":
        ljks = {ljk for ljk, _ in snapshot[LEFT].values()}
        out.update({key(None, rpk): (None, rv) for rpk, (rjk, rv) in snapshot[RIGHT].items()
                    if rjk is None or rjk not in ljks})
    return out


def _draw_batch(data, snapshot: dict, fk_join: bool, offset: int) -> list[tuple]:
    """Changes of one micro-batch, applied to `snapshot` as drawn: rows set or deleted, and whole groups moved
    (every row, of both sides, whose join column is x gets y: many-to-many pairs moving together)."""
    changes = []

    def put(which, pk, jk, n):
        nonlocal offset
        offset += 1
        if jk is False:
            snapshot[which].pop(pk, None)
            changes.append((which, pk, offset, _join_key(which, pk, None), None))
            return
        row = json.dumps({"side": which, "pk": pk, "jk": jk, "n": n})
        snapshot[which][pk] = (jk, row)
        changes.append((which, pk, offset, _join_key(which, pk, jk), row))

    for _ in range(data.draw(st.integers(1, 8))):
        kind = data.draw(st.sampled_from(["set", "set", "delete", "move", "move"]))
        present = sorted({jk for rows in snapshot.values() for jk, _ in rows.values() if jk is not None})
        if kind == "move" and present:
            x = data.draw(st.sampled_from(present))
            y = data.draw(st.sampled_from([jk for jk in ("a", "b", "c", None) if jk != x]))
            n = data.draw(st.integers(0, 1))
            for which in (LEFT,) if fk_join else (LEFT, RIGHT):  # a right row's join key is its key: it stays
                for pk in [pk for pk, (jk, _) in snapshot[which].items() if jk == x]:
                    put(which, pk, y, n)
            continue
        which = data.draw(st.sampled_from([LEFT, RIGHT]))
        pk = data.draw(st.sampled_from(["0", "1"] if which == LEFT else ["a", "b"]))
        if kind == "delete":
            put(which, pk, False, 0)
        else:
            jk = pk if fk_join and which == RIGHT else data.draw(st.sampled_from(["a", "b", None]))
            put(which, pk, jk, data.draw(st.integers(0, 1)))
    return changes


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=st.data(), side=st.sampled_from(["inner", "left", "full"]), fk_join=st.booleans())
def test_each_output_key_is_decided_by_one_group_a_batch(data, side, fk_join):
    """A model of Spark's routing: each group of stage 2 is a task of its own. Whole groups move to another join
    key (both rows of a many-to-many pair at once), rows change and go: every batch, each output key is written
    by at most one group, once, and the written rows equal a nested-loop join of the rows so far."""
    keyed_by_left = fk_join and side != "full"
    by_row: dict = {}
    by_key: dict = defaultdict(lambda: {"l": {}, "r": {}})
    snapshot: dict = {LEFT: {}, RIGHT: {}}
    topic: dict[str, tuple] = {}
    offset = 0
    for _ in range(data.draw(st.integers(2, 5))):
        changes = _draw_batch(data, snapshot, fk_join, offset)
        offset += len(changes)
        for okey, writes in _route(by_row, by_key, changes, side, keyed_by_left).items():
            assert len(writes) == 1, f"{okey} written by groups {[w[0] for w in writes]} in one batch"
            _, keep, lv, rv = writes[0]
            if keep:
                topic[okey] = (lv, rv)
            else:
                topic.pop(okey, None)
        assert topic == _nested_loop(snapshot, side, keyed_by_left)


def test_loading_picks_the_key_of_the_result(tmp_path):
    sql = ("CREATE CHANGELOG fk AS SELECT o.order_id, o.amount, u.name FROM orders o LEFT JOIN users u "
           "ON o.user_id = u.user_id WHERE o.amount > 3;\n"
           "CREATE CHANGELOG full_join AS SELECT o.order_id, u.user_id AS uid FROM orders o FULL JOIN users u "
           "ON o.user_id = u.user_id;\n"
           "CREATE CHANGELOG many AS SELECT u.user_id, a.org, a.user_id AS auid, a.plan FROM users u JOIN accounts a "
           "ON u.user_id = a.user_id;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    queries = {q.fqn.rsplit(".", 1)[-1]: q for q in project.queries}
    keys = {name: (q.key_columns, project.relation(q.sink).primary_key, q.changelog_join.keyed_by_left)
            for name, q in queries.items()}
    assert keys == {"fk": (("order_id",), ("order_id",), True),
                    "full_join": (("order_id", "uid"), ("order_id", "uid"), False),
                    "many": (("user_id", "org", "auid"), ("user_id", "org", "auid"), False)}
    assert "COALESCE((`o`.`amount` > 3), FALSE) AND __cj.__alive AS __keep" in spark_select(queries["fk"])
    assert all(q.stateful and q.output_mode == "append" and q.temporal_join is None for q in queries.values())


def test_e190_to_e192_shapes_of_changelog_joins(tmp_path):
    sql = ("CREATE CHANGELOG a AS SELECT o.order_id FROM orders o JOIN users u ON o.user_id = u.user_id "
           "AND o.amount > 2;\n"
           "CREATE CHANGELOG b AS SELECT o.order_id FROM orders o JOIN users u WITHIN 5 SECONDS "
           "ON o.user_id = u.user_id;\n"
           "CREATE STREAM c AS SELECT o.order_id FROM orders o JOIN users u ON o.user_id = u.user_id;\n"
           "INSERT INTO orders SELECT o.order_id, o.user_id, o.amount FROM orders o JOIN users u "
           "ON o.user_id = u.user_id;\n"
           "CREATE CHANGELOG d AS SELECT o.order_id FROM orders o FULL JOIN users u ON o.user_id = u.user_id;\n"
           "CREATE CHANGELOG e AS SELECT u.name FROM orders o JOIN users u ON o.user_id = u.user_id;\n"
           "CREATE CHANGELOG f AS SELECT c.id FROM clicks c JOIN users u ON c.user_id = u.user_id;\n"
           "CREATE CHANGELOG g AS SELECT u.name, COUNT(*) AS n FROM clicks c JOIN users u ON c.user_id = u.user_id "
           "GROUP BY u.name;\n")
    found = check_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})).diagnostics
    assert [(d.code, d.location.line) for d in found] == [
        ("DSF-E190", 1), ("DSF-E190", 2), ("DSF-E191", 3), ("DSF-E191", 4), ("DSF-E192", 5), ("DSF-E192", 6),
        ("DSF-E046", 7), ("DSF-E045", 8)]


def test_e193_following_a_changelog_join_is_refused(tmp_path):
    from dsflow.engine import adhoc
    from dsflow.errors import ProjectError

    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES}))
    try:
        adhoc.follow_query(project, "SELECT o.order_id, u.name FROM orders o JOIN users u ON o.user_id = u.user_id")
    except ProjectError as err:
        assert [d.code for d in err.diagnostics] == ["DSF-E193"]
    else:
        raise AssertionError("a changelog join was followed")
