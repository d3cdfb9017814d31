"""GROUP BY over a changelog: what validates (and what it translates to), what is rejected with its place
(DSF-E130 a window over a changelog, DSF-E156 an aggregation of a raw CDC stream, DSF-E157 into a table), and the
state transitions of the two retraction stages (adapters/spark/retract.py). Pure: no broker, no Spark.
"""

from __future__ import annotations

from dsflow.adapters.spark.retract_state import TOUCH, apply_changes, empty_accumulator, key_changes, results
from dsflow.adapters.spark.translate import query_spec
from dsflow.load.project import check_project, load_project
from support.projects import make_project
from support.pgserver import PORT as PG_PORT

SOURCES = """\
CREATE CHANGELOG users (userid VARCHAR, name VARCHAR, region VARCHAR, score BIGINT, PRIMARY KEY (userid))
  WITH ('value.format' = 'json');
"""
CDC = """\
name: cdc
default:
  database: analytics
  schema: public
  store: kafka_main
"""
STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: 127.0.0.1:9092
  - name: pg
    type: postgresql
    properties:
      host: 127.0.0.1
      port: %s
      user: postgres
""" % PG_PORT
CDC_SQL = """\
CREATE STREAM orders_cdc (op VARCHAR, `before` STRUCT<id BIGINT, status VARCHAR>,
                          `after` STRUCT<id BIGINT, status VARCHAR>)
  WITH ('store' = 'pg', 'postgresql.db.name' = 'shop', 'postgresql.schema.name' = 'public',
        'postgresql.table.name' = 'orders');
CREATE CHANGELOG per_status AS
  SELECT `after`->status AS status, COUNT(*) AS n FROM orders_cdc GROUP BY `after`->status;
"""


def problems(root) -> list[tuple[str, str, int, int]]:
    found = check_project(root).diagnostics
    return [(d.code, d.location.file.rsplit("/", 1)[-1], d.location.line, d.location.col) for d in found]


def test_group_by_over_a_changelog_validates_and_runs_with_retractions(tmp_path):
    sql = ("CREATE CHANGELOG per_region AS SELECT region, COUNT(*) AS n, MAX(score) * 2 AS hi2,\n"
           "  COUNT(DISTINCT name) AS names FROM users WHERE score > 3 GROUP BY region HAVING COUNT(*) > 1;\n")
    project = load_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql}))
    query = project.queries[0]
    spec = query_spec(project, query, "v1", "/tmp/checkpoint", "/tmp/status")
    assert (query.key_columns, spec.sink.output_mode) == (("region",), "append")
    assert spec.retract.aggregates == ["count_star", "max", "count_distinct"]
    assert "AND NOT users.__deleted AS __keep" in spec.select_sql and "`users`.`region` AS __g0" in spec.select_sql
    assert spec.retract.post_sql.startswith("SELECT __g0 AS `region`, __r0 AS `n`, __r1 * 2 AS `hi2`, __r2 AS `names`")
    assert "__keep AND COALESCE((__r0 > 1), FALSE) AS __keep" in spec.retract.post_sql


def test_e130_a_window_over_a_changelog(tmp_path):
    sql = ("CREATE CHANGELOG w AS SELECT window_start, window_end, region, COUNT(*) AS n\n"
           "  FROM TUMBLE(users, SIZE 1 MINUTE) GROUP BY window_start, window_end, region;\n")
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    assert problems(root) == [("DSF-E130", "q.sql", 2, 15)]


def test_e156_aggregating_a_raw_change_stream(tmp_path):
    root = make_project(tmp_path, {"dsflow.yml": CDC, "stores/kafka.yml": STORES, "sql/cdc.sql": CDC_SQL})
    found = check_project(root).diagnostics
    assert [(d.code, d.location.line) for d in found] == [("DSF-E156", 6)]
    assert "changelog" in found[0].hint and "count every update" in found[0].message


def test_a_key_moving_between_groups_is_retracted_from_the_old_one():
    assert key_changes(None, [(3, True, "g1", "{}"), (5, True, "g2", '{"__a0":1}')]) == \
        (["g2", '{"__a0":1}'], [("g2", 1, '{"__a0":1}')])
    assert key_changes(["g1", "{}"], [(7, True, "g2", "{}")]) == (["g2", "{}"], [("g1", -1, "{}"), ("g2", 1, "{}")])
    assert key_changes(["g1", "{}"], [(8, False, "g1", "{}")]) == (None, [("g1", -1, "{}")])
    assert key_changes(["g1", "{}"], [(9, True, "g1", "{}")]) == (["g1", "{}"], [])  # no change, nothing emitted


def test_deleting_the_current_extreme_finds_the_next_one():
    kinds = ["count_star", "count", "sum", "avg", "min", "max", "count_distinct"]
    rows = [{"__a1": v, "__a2": v, "__a3": v, "__a4": v, "__a5": v, "__a6": v} for v in (10, 90, 30)]
    acc = apply_changes(empty_accumulator(kinds), kinds, [(1, r) for r in rows] + [(1, {})])
    assert list(results(acc, kinds).values()) == [4, 3, 130, 130 / 3, 10, 90, 3]
    acc = apply_changes(acc, kinds, [(-1, rows[1]), (-1, rows[0])])
    assert list(results(acc, kinds).values()) == [2, 1, 30, 30.0, 30, 30, 1]
    acc = apply_changes(acc, kinds, [(-1, rows[2])])
    assert list(results(acc, kinds).values()) == [1, 0, None, None, None, None, 0]


def test_e157_aggregating_a_changelog_into_a_table(tmp_path):
    """Into an Iceberg table: refused (it cannot delete a group); Delta tables merge deletes
    (tests/integration/test_cdc_changelog.py)."""
    stores = (f"stores:\n  - name: ice\n    type: iceberg\n    properties:\n      warehouse: {tmp_path / 'wh'}\n"
              "  - name: lake\n    type: filesystem\n    properties:\n      path: lake\n")
    sql = ("CREATE TABLE per_region WITH ('store' = 'ice') AS\n"
           "  SELECT region, COUNT(*) AS n FROM users GROUP BY region;\n")
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql, "stores/lake.yml": stores})
    assert problems(root) == [("DSF-E157", "q.sql", 1, 14)]
    (root / "sql/q.sql").write_text(sql.replace("'ice'", "'lake'"))
    assert problems(root) == []


def test_a_global_aggregates_touch_is_keyed_like_its_row():
    """retract_state.py keeps its own copy of the global group's key (it imports nothing of load/): it must be
    GLOBAL_KEY, or a batch that changes nothing would emit a row under another key."""
    from dsflow.sql.aggregates import GLOBAL_KEY

    assert TOUCH[0] == GLOBAL_KEY
    assert key_changes(["{}", "{}"], [(5, True, "{}", "{}")], touch=True) == (["{}", "{}"], [TOUCH])
