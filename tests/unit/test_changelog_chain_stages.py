"""A chain of changelog joins (adapters/spark/changelog_join.py) run in plain Python, batch by batch as Spark runs
it: the two stages of the first join, then the rows they emit fed to the next join as its left changelog (keyed by
the output key, deleted when not alive, the row the JSON of the joined structs, the offset whether it is alive),
against a nested-loop join of the final snapshots; and the loader's keys for chains (sql/changelog_join.py).
Pure: no broker, no Spark. The Spark chain itself: tests/integration/test_sql_changelog_chains.py.
"""

from __future__ import annotations

import json
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from dsflow.adapters.spark.changelog_join_state import LEFT, RIGHT, group_changes, row_changes
from dsflow.load.project import load_project
from support.projects import make_project


class Join:
    """One join's two stages and their states."""

    def __init__(self, side: str, keyed_by_left: bool):
        self.side, self.keyed_by_left = side, keyed_by_left
        self.by_row: dict = {}
        self.by_key: dict = defaultdict(lambda: {"l": {}, "r": {}})

    def batch(self, changes) -> list[tuple]:
        """changes: (side, pk, offset, join key, row JSON or None) -> (okey, keep, lv, rv) written this batch."""
        stage1 = defaultdict(list)
        for which, pk, offset, jk, row in changes:
            stage1[(which, pk)].append((offset, jk, row))
        stage2 = defaultdict(list)
        for (which, pk), rows in stage1.items():
            self.by_row[(which, pk)], out = row_changes(self.by_row.get((which, pk)), rows)
            for jk, row, moved in out:
                stage2[jk].append((which, pk, row, moved))
        written = []
        for jk, group in stage2.items():
            self.by_key[jk], out = group_changes(self.by_key[jk], group, self.side, self.keyed_by_left)
            written += out
        return written


def _jk(which: int, pk: str, value) -> str:
    """A join key as _changes makes it: the ON column as text, or a group of its own for NULL."""
    return f"~{which}{pk}" if value is None else json.dumps([str(value)])


def _source(which: int, pk: str, offset: int, column: str, row: dict | None) -> tuple:
    return which, pk, offset, _jk(which, pk, None if row is None else row[column]), \
        None if row is None else json.dumps(row)


def _rows(written: list[tuple], aliases: tuple[str, str], column: tuple[str, str]) -> list[tuple]:
    """The rows one join emitted as the next join's left changes (_rows_changes): keyed by okey, offset = keep."""
    out = []
    for okey, keep, lv, rv in written:
        row = {aliases[0]: json.loads(lv) if lv else None, aliases[1]: json.loads(rv) if rv else None}
        value = (row.get(column[0]) or {}).get(column[1])
        out.append((LEFT, okey, int(keep), _jk(LEFT, okey, value), json.dumps(row) if keep else None))
    return out


def _pipeline(batches, sides: tuple[str, str], fk_second: bool) -> dict[str, tuple]:
    """orders o JOIN customers c ON o.cid = c.id JOIN products p ON o.pid = p.<id or cat>: the output content."""
    first = Join(sides[0], sides[0] != "full")
    second = Join(sides[1], fk_second and sides[1] != "full")
    topic: dict[str, tuple] = {}
    offset = 0
    for batch in batches:
        firsts, products = [], []
        for relation, pk, row in batch:
            offset += 1
            if relation == "o":
                firsts.append(_source(LEFT, pk, offset, "cid", row))
            elif relation == "c":
                firsts.append(_source(RIGHT, pk, offset, "id", row))
            else:
                products.append(_source(RIGHT, pk, offset, "id" if fk_second else "cat", row))
        rows = _rows(first.batch(firsts), ("o", "c"), ("o", "pid"))
        assert len({r[1] for r in rows}) == len(rows), "the first join changed an output key twice in one batch"
        written = second.batch(rows + products)
        assert len({w[0] for w in written}) == len(written), "an output key changed twice in one batch"
        for okey, keep, lv, rv in written:
            if keep:
                rows = json.loads(lv) if lv else {"o": None, "c": None}
                topic[okey] = (rows["o"], rows["c"], json.loads(rv) if rv else None)
            else:
                topic.pop(okey, None)
    return topic


def _matches(left: list[tuple], width: int, right: list, on, side: str) -> list[tuple]:
    """SQL's join of rows of `width` relations (None for a missing one) with rows of one more, on `on(l, r)`."""
    out = []
    for lv in left:
        found = [(*lv, rv) for rv in right if on(lv, rv)]
        out += found or ([(*lv, None)] if side in ("left", "full") else [])
    if side == "full":
        out += [(*[None] * width, rv) for rv in right if not any(on(lv, rv) for lv in left)]
    return out


def _expected(batches, sides: tuple[str, str], fk_second: bool) -> list[tuple]:
    snapshot: dict = {"o": {}, "c": {}, "p": {}}
    for batch in batches:
        for relation, pk, row in batch:
            if row is None:
                snapshot[relation].pop(pk, None)
            else:
                snapshot[relation][pk] = row
    joined = _matches([(o,) for o in snapshot["o"].values()], 1, list(snapshot["c"].values()),
                      lambda lv, c: lv[0] is not None and lv[0]["cid"] is not None and lv[0]["cid"] == c["id"],
                      sides[0])
    column = "id" if fk_second else "cat"
    joined = _matches(joined, 2, list(snapshot["p"].values()),
                      lambda lv, p: lv[0] is not None and lv[0]["pid"] is not None and lv[0]["pid"] == p[column],
                      sides[1])
    return sorted(map(json.dumps, joined))


KEYS = ["a", "b", "c", None]
ORDER = st.builds(lambda pk, cid, pid, n, gone: ("o", str(pk), None if gone else
                                                 {"id": pk, "cid": cid, "pid": pid, "n": n}),
                  st.integers(0, 5), st.sampled_from(KEYS), st.sampled_from(KEYS), st.integers(0, 2), st.booleans())
CUSTOMER = st.builds(lambda pk, name, gone: ("c", pk, None if gone else {"id": pk, "name": name}),
                     st.sampled_from(["a", "b", "c"]), st.integers(0, 2), st.booleans())


@settings(max_examples=200, deadline=None, derandomize=True)
@given(data=st.data(), sides=st.tuples(*[st.sampled_from(["inner", "left", "full"])] * 2), fk_second=st.booleans())
def test_chained_stages_give_the_join_of_the_final_snapshots(data, sides, fk_second):
    """fk_second: products are joined ON their primary key (the result keeps the orders' key unless FULL); else ON
    a category several products share (many-to-many: keyed by [rows' key, product key])."""
    if fk_second:
        product = st.builds(lambda pk, t, gone: ("p", pk, None if gone else {"id": pk, "t": t}),
                            st.sampled_from(["a", "b", "c"]), st.integers(0, 2), st.booleans())
    else:
        product = st.builds(lambda pk, cat, gone: ("p", str(pk), None if gone else {"id": pk, "cat": cat}),
                            st.integers(0, 3), st.sampled_from(KEYS), st.booleans())
    changes = st.lists(st.one_of(ORDER, CUSTOMER, product), max_size=12)
    batches = data.draw(st.lists(changes, min_size=1, max_size=4))
    topic = _pipeline(batches, sides, fk_second)
    assert sorted(json.dumps(v) for v in topic.values()) == _expected(batches, sides, fk_second)


def test_a_foreign_key_moving_on_each_side_of_a_chain():
    """An order moving to another customer and another product, a customer deleted, a product updated."""
    batches = [[("c", "a", {"id": "a", "name": 1}), ("c", "b", {"id": "b", "name": 2}),
                ("p", "a", {"id": "a", "t": 0}), ("o", "1", {"id": 1, "cid": "a", "pid": "a", "n": 0}),
                ("o", "2", {"id": 2, "cid": "a", "pid": "b", "n": 0})],
               [("o", "1", {"id": 1, "cid": "b", "pid": "b", "n": 1}), ("p", "b", {"id": "b", "t": 1}),
                ("c", "a", None)]]
    topic = _pipeline(batches, ("inner", "left"), True)
    assert topic == {"1": ({"id": 1, "cid": "b", "pid": "b", "n": 1}, {"id": "b", "name": 2}, {"id": "b", "t": 1})}
    assert sorted(json.dumps(v) for v in topic.values()) == _expected(batches, ("inner", "left"), True)


SOURCES = """\
CREATE CHANGELOG orders (order_id BIGINT, customer_id VARCHAR, product_id VARCHAR, qty BIGINT,
  PRIMARY KEY (order_id)) WITH ('value.format' = 'json');
CREATE CHANGELOG customers (id VARCHAR, name VARCHAR, region VARCHAR, PRIMARY KEY (id)) WITH ('value.format' = 'json');
CREATE CHANGELOG products (id VARCHAR, title VARCHAR, region VARCHAR, PRIMARY KEY (id))
  WITH ('value.format' = 'json');
"""


def test_the_key_of_a_chain_grows_by_each_join_that_does_not_keep_it(tmp_path):
    sql = ("CREATE CHANGELOG fk AS SELECT o.order_id, c.name, p.title FROM orders o JOIN customers c "
           "ON o.customer_id = c.id LEFT JOIN products p ON o.product_id = p.id;\n"
           "CREATE CHANGELOG full_end AS SELECT o.order_id, p.id AS pid, c.name FROM orders o LEFT JOIN customers c "
           "ON o.customer_id = c.id FULL JOIN products p ON p.id = o.product_id;\n"
           "CREATE MATERIALIZED VIEW many AS SELECT o.order_id, c.id AS cid, p.id AS pid FROM orders o FULL JOIN "
           "customers c ON o.customer_id = c.id JOIN products p ON p.region = c.region AND p.title = o.product_id;\n"
           "CREATE CHANGELOG grouped AS SELECT p.title, COUNT(*) AS n FROM orders o JOIN customers c "
           "ON o.customer_id = c.id JOIN products p ON p.region = c.region GROUP BY p.title;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    found = {q.fqn.rsplit(".", 1)[-1]: (q.key_columns, project.relation(q.sink).primary_key,
                                        [(j.changelog, j.side, j.keyed_by_left, j.left_relations)
                                         for j in q.join_chain]) for q in project.queries}
    assert found == {
        "fk": (("order_id",), ("order_id",), [("p", "left", True, ("o",))]),
        "full_end": (("order_id", "pid"), ("order_id", "pid"), [("p", "full", False, ("o",))]),
        "many": (("order_id", "cid", "pid"), ("order_id", "cid", "pid"), [("p", "inner", False, ("c", "o"))]),
        "grouped": (("title",), ("title",), [("p", "inner", False, ("c",))])}


def test_a_pair_moving_together_is_written_once():
    """Order 1 and product 7 (a many-to-many pair of the second join) both move to join key "b" in one batch: the
    old group leaves the pair to the new one, which upserts it (_pipeline: no output key written twice a batch)."""
    batches = [[("c", "a", {"id": "a", "name": 1}), ("o", "1", {"id": 1, "cid": "a", "pid": "a", "n": 0}),
                ("p", "7", {"id": 7, "cat": "a"})],
               [("o", "1", {"id": 1, "cid": "a", "pid": "b", "n": 0}), ("p", "7", {"id": 7, "cat": "b"})]]
    topic = _pipeline(batches, ("inner", "inner"), False)
    assert list(topic.values()) == [({"id": 1, "cid": "a", "pid": "b", "n": 0}, {"id": "a", "name": 1},
                                     {"id": 7, "cat": "b"})]
    assert sorted(json.dumps(v) for v in topic.values()) == _expected(batches, ("inner", "inner"), False)


def test_a_chained_left_row_deleted_and_upserted_in_one_batch_ends_upserted():
    """offset = alive (_rows_changes): whatever order the two rows of one output key arrive in, the upsert wins;
    both changes of the move carry the new join key."""
    for rows in ([(0, '["x"]', None), (1, '["y"]', '{"o":1}')], [(1, '["y"]', '{"o":1}'), (0, '["x"]', None)]):
        assert row_changes(['["x"]', '{"o":0}'], rows) == (['["y"]', '{"o":1}'],
                                                           [('["x"]', None, '["y"]'), ('["y"]', '{"o":1}', '["y"]')])
