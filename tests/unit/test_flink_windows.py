"""Flink SQL's window syntax (dsflow/sql/flink_windows.py): the window table functions `TABLE(TUMBLE|HOP|SESSION(
TABLE rel, DESCRIPTOR(col), INTERVAL ...))` and the legacy group windows `GROUP BY k, SESSION(col, INTERVAL ...)`
with `SESSION_START`/`SESSION_END` resolve to the same query as dsflow's own spelling (the whole resolved Query:
window, sources, normalized SELECT, columns, keys); what has no dsflow window is refused with its code at its
file:line:col. Pure: the projects are validated, nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsflow.load.project import check_project
from support.projects import make_project

SOURCES = """\
CREATE STREAM bid (auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), other TIMESTAMP)
WITH ('topic' = 'bid', 'value.format' = 'json', 'timestamp' = 'dateTime');
CREATE STREAM untimed (auction BIGINT, t TIMESTAMP) WITH ('topic' = 'untimed', 'value.format' = 'json');
"""
GROUPED = "GROUP BY auction, window_start, window_end;"
SELECTED = "CREATE CHANGELOG c AS SELECT auction, COUNT(*) AS n, MAX(price) AS top, window_start, window_end\n"

# (Flink's spelling, dsflow's spelling of the same query)
SAME = {
    "tumble": (SELECTED + "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))\n" + GROUPED,
               SELECTED + "FROM TUMBLE(bid, SIZE 10 SECONDS)\n" + GROUPED),
    "hop: slide, then size": (
        SELECTED + "FROM TABLE(\n  HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '1' MINUTE))\n"
        + GROUPED,
        SELECTED + "FROM HOP(bid, SIZE 1 MINUTE, ADVANCE BY 2 SECONDS)\n" + GROUPED),
    "aliased, qualified": (
        "CREATE CHANGELOG c AS SELECT w.auction, COUNT(*) AS n, w.window_start AS s, w.window_end AS e\n"
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND)) AS w\n"
        "GROUP BY w.auction, w.window_start, w.window_end;",
        "CREATE CHANGELOG c AS SELECT w.auction, COUNT(*) AS n, w.window_start AS s, w.window_end AS e\n"
        "FROM TUMBLE(bid, SIZE 10 SECONDS) AS w GROUP BY w.auction, w.window_start, w.window_end;"),
    "session table function, partitioned": (
        "CREATE CHANGELOG c AS SELECT bidder, COUNT(*) AS n, window_start, window_end\n"
        "FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))\n"
        "GROUP BY bidder, window_start, window_end;",
        "CREATE CHANGELOG c AS SELECT bidder, COUNT(*) AS n, window_start, window_end\n"
        "FROM SESSION(bid, GAP 10 SECONDS) GROUP BY bidder, window_start, window_end;"),
    "legacy session (Nexmark q11)": (
        "CREATE CHANGELOG c AS SELECT\n    B.bidder,\n    count(*) as bid_count,\n"
        "    SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) as starttime,\n"
        "    SESSION_END(B.`dateTime`, INTERVAL '10' SECOND) as endtime\n"
        "FROM bid B\nGROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND);",
        "CREATE CHANGELOG c AS SELECT B.bidder, count(*) as bid_count, B.window_start AS starttime, "
        "B.window_end AS endtime\nFROM SESSION(bid, GAP 10 SECONDS) AS B GROUP BY B.bidder, B.window_start, "
        "B.window_end;"),
    "legacy tumble, window first, unqualified": (
        "CREATE CHANGELOG c AS SELECT TUMBLE_START(dateTime, INTERVAL '1' MINUTE) AS s, auction,\n"
        "  TUMBLE_END(dateTime, INTERVAL '1' MINUTE) AS e, SUM(price) AS total\n"
        "FROM bid GROUP BY TUMBLE(dateTime, INTERVAL '1' MINUTE), auction;",
        "CREATE CHANGELOG c AS SELECT bid.window_start AS s, auction, bid.window_end AS e, SUM(price) AS total\n"
        "FROM TUMBLE(bid, SIZE 1 MINUTE) AS bid GROUP BY bid.window_start, bid.window_end, auction;"),
    "legacy hop: slide, then size": (
        "CREATE CHANGELOG c AS SELECT auction, HOP_END(dateTime, INTERVAL '5' SECOND, INTERVAL '20' SECOND) AS e,\n"
        "  HOP_START(dateTime, INTERVAL '5' SECOND, INTERVAL '20' SECOND) AS s, COUNT(*) AS n\n"
        "FROM bid GROUP BY auction, HOP(dateTime, INTERVAL '5' SECOND, INTERVAL '20' SECOND);",
        "CREATE CHANGELOG c AS SELECT auction, bid.window_end AS e, bid.window_start AS s, COUNT(*) AS n\n"
        "FROM HOP(bid, SIZE 20 SECONDS, ADVANCE BY 5 SECONDS) AS bid GROUP BY auction, bid.window_start, "
        "bid.window_end;"),
}


def resolved(tmp_path: Path, sql: str) -> tuple[dict, dict]:
    """The project's query as its model (without its source location) and the project's relations."""
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    result = check_project(root)
    assert result.diagnostics == [] and result.project is not None, result.diagnostics
    (query,) = result.project.queries
    relation = next(r for r in result.project.relations if r.name == "c")
    return query.model_dump(exclude={"location"}), relation.model_dump(exclude={"location"})


@pytest.mark.parametrize("name", SAME)
def test_flink_spelling_resolves_as_dsflow_spelling(tmp_path, name):
    flink, dsflow = SAME[name]
    query, relation = resolved(tmp_path / "flink", flink)
    assert query["window"]["source"] in {source["alias"] for source in query["sources"]}  # Spark windows that one
    assert (query, relation) == resolved(tmp_path / "dsflow", dsflow)


def test_a_warm_load_keeps_what_flink_spelling_said(tmp_path):
    """The load cache stores a parsed file as data and parses it again when its SELECT is resolved again: the
    window's time column must be checked then too (its mark lives on the parsed tree)."""
    sql = SELECTED + "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(other), INTERVAL '10' SECOND))\n" + GROUPED
    root = make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})
    for _ in range(2):
        assert [d.code for d in check_project(root).diagnostics] == ["DSF-E260"]
        assert list((root / ".dsflow" / "cache").glob("load-*.json")), "the second load must be a warm one"


def place(sql: str, needle: str) -> tuple[int, int]:
    """The 1-based line and column where `needle` first starts in `sql`."""
    offset = sql.index(needle)
    return sql.count("\n", 0, offset) + 1, offset - (sql.rfind("\n", 0, offset) + 1) + 1


def end_of(sql: str, needle: str) -> tuple[int, int]:
    """Where `needle` ends (a parse error's column is its token's last character, as sqlglot gives it)."""
    line, col = place(sql, needle)
    return line, col + len(needle) - 1


TVF = "FROM TABLE({}(TABLE {}, DESCRIPTOR({}), {}))\n"
REFUSED = {
    "descriptor is not the event time": (
        SELECTED + TVF.format("TUMBLE", "bid", "other", "INTERVAL '10' SECOND") + GROUPED,
        "DSF-E260", lambda sql: place(sql, "other)"), "window by `dateTime`"),
    "no event-time column": (
        SELECTED + TVF.format("TUMBLE", "untimed", "t", "INTERVAL '10' SECOND") + GROUPED,
        "DSF-E260", lambda sql: place(sql, "t)"), "declare 'timestamp' = 't'"),
    "group window's column is not the event time": (
        "CREATE CHANGELOG c AS SELECT B.bidder, COUNT(*) AS n, SESSION_START(B.other, INTERVAL '10' SECOND) AS s,\n"
        " SESSION_END(B.other, INTERVAL '10' SECOND) AS e\nFROM bid B GROUP BY B.bidder, "
        "SESSION(B.other, INTERVAL '10' SECOND);",
        "DSF-E260", lambda sql: place(sql, "B.other, INTERVAL '10' SECOND);"), "SESSION(bid WITH ('timestamp'"),
    "cumulate": (
        SELECTED + TVF.format("CUMULATE", "bid", "dateTime", "INTERVAL '2' SECOND, INTERVAL '10' SECOND") + GROUPED,
        "DSF-E261", lambda sql: place(sql, "CUMULATE"), "TUMBLE(rel, SIZE 10 SECOND) into a changelog"),
    "offset": (
        SELECTED + TVF.format("TUMBLE", "bid", "dateTime", "INTERVAL '10' SECOND, INTERVAL '1' SECOND") + GROUPED,
        "DSF-E261", lambda sql: place(sql, "TUMBLE"), "leave the offset out"),
    "session over every key": (
        "CREATE CHANGELOG c AS SELECT bidder, COUNT(*) AS n, window_start, window_end\n"
        + TVF.format("SESSION", "bid", "dateTime", "INTERVAL '10' SECOND")
        + "GROUP BY bidder, window_start, window_end;",
        "DSF-E261", lambda sql: place(sql, "SESSION"), "PARTITION BY"),
    "session partitioned by another key": (
        "CREATE CHANGELOG c AS SELECT bidder, COUNT(*) AS n, window_start, window_end\n"
        + TVF.format("SESSION", "bid PARTITION BY auction", "dateTime", "INTERVAL '10' SECOND")
        + "GROUP BY bidder, window_start, window_end;",
        "DSF-E261", lambda sql: place(sql, "bidder, window_start, window_end;"), "PARTITION BY bidder"),
    "window bound without a group window": (
        "CREATE CHANGELOG c AS SELECT bidder, COUNT(*) AS n,\n  TUMBLE_START(dateTime, INTERVAL '10' SECOND) AS s\n"
        "FROM bid GROUP BY bidder;",
        "DSF-E261", lambda sql: place(sql, "TUMBLE_START"), "GROUP BY key, TUMBLE("),
    "window bound of another window": (
        "CREATE CHANGELOG c AS SELECT bidder, COUNT(*) AS n,\n  TUMBLE_START(dateTime, INTERVAL '5' SECOND) AS s\n"
        "FROM bid GROUP BY bidder, TUMBLE(dateTime, INTERVAL '10' SECOND);",
        "DSF-E261", lambda sql: place(sql, "TUMBLE_START"), "with the GROUP BY's arguments"),
    "rowtime": (
        "CREATE CHANGELOG c AS SELECT bidder, COUNT(*) AS n,\n  TUMBLE_ROWTIME(dateTime, INTERVAL '10' SECOND) AS r\n"
        "FROM bid GROUP BY bidder, TUMBLE(dateTime, INTERVAL '10' SECOND);",
        "DSF-E261", lambda sql: place(sql, "TUMBLE_ROWTIME"), "TUMBLE_END"),
    "two group windows": (
        "CREATE CHANGELOG c AS SELECT bidder, COUNT(*) AS n\nFROM bid GROUP BY bidder, "
        "TUMBLE(dateTime, INTERVAL '10' SECOND),\n  SESSION(dateTime, INTERVAL '10' SECOND);",
        "DSF-E261", lambda sql: place(sql, "SESSION(dateTime"), "TUMBLE(rel, SIZE d)"),
    "group window over a subquery": (
        "CREATE CHANGELOG c AS SELECT bidder, COUNT(*) AS n\nFROM (SELECT * FROM bid) b\nGROUP BY bidder, "
        "TUMBLE(dateTime, INTERVAL '10' SECOND);",
        "DSF-E261", lambda sql: place(sql, "TUMBLE(dateTime"), "TUMBLE(rel, SIZE d)"),
    "hop's slide after its size": (  # Flink's HOP is (slide, size): a slide longer than the size is refused
        SELECTED + TVF.format("HOP", "bid", "dateTime", "INTERVAL '10' SECOND, INTERVAL '2' SECOND") + GROUPED,
        "DSF-E032", lambda sql: place(sql, "HOP"), "ADVANCE BY at most the SIZE"),
    "no descriptor": (
        SELECTED + "FROM TABLE(TUMBLE(TABLE bid, INTERVAL '10' SECOND))\n" + GROUPED,
        "DSF-E002", lambda sql: end_of(sql, "INTERVAL"), ""),
    "not a duration": (
        SELECTED + TVF.format("TUMBLE", "bid", "dateTime", "INTERVAL '1:30' MINUTE TO SECOND") + GROUPED,
        "DSF-E002", lambda sql: end_of(sql, "'1:30'"), ""),
    "too many durations": (
        SELECTED + TVF.format("SESSION", "bid PARTITION BY auction", "dateTime", "INTERVAL '1' SECOND, "
                              "INTERVAL '2' SECOND") + GROUPED,
        "DSF-E002", lambda sql: place(sql, "))\n"), ""),
}


@pytest.mark.parametrize("name", REFUSED)
def test_flink_window_without_dsflow_window_is_refused_at_its_place(tmp_path, name):
    sql, code, where, hint = REFUSED[name]
    found = check_project(make_project(tmp_path, {"sql/sources.sql": SOURCES, "sql/q.sql": sql})).diagnostics
    assert [(d.code, Path(d.location.file).name, d.location.line, d.location.col) for d in found] == [
        (code, "q.sql", *where(sql))], [(d.code, d.location, d.message, d.hint) for d in found]
    assert hint in (found[0].hint or "")
