"""Every adapted published Nexmark query (bench/nexmark_published/queries/qN.sql) through validate, each in the
folder's project (project/: the adapted DDL of person, auction and bid, and q14's UDF): the ones dsflow runs validate
clean (a regular join of streams, q3, q4, q9, q20, q23, with the warning DSF-W001 at its first join); every other one is
refused with a stable code at its file:line:col (never a traceback), as
the folder's README lists. Also: each adapted file keeps the published query text (its INSERT INTO ... to the end).
Pure: no broker, no Spark (tests/integration/test_nexmark_published.py runs the ones that validate)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from sqlglot import exp

from dsflow.load.project import check_project

FOLDER = Path(__file__).resolve().parents[2] / "bench" / "nexmark_published"
RUNS = ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q10", "q11", "q12", "q13", "q14", "q15", "q16", "q17",
        "q18", "q19", "q20",
        "q21", "q22", "q23")
# query -> the (code, line, col) of the warning validate gives: its state grows without bound
WARNED = {"q3": [("DSF-W001", 22, 29)], "q4": [("DSF-W001", 23, 25)], "q9": [("DSF-W001", 36, 24)],
          "q20": [("DSF-W001", 36, 25)], "q23": [("DSF-W001", 64, 6)]}
# query -> the (code, line, col) of each diagnostic validate gives; the README's table says what each needs.
REFUSED = {
    "q6": [("DSF-E189", 21, 5)],  # an OVER over a ROW_NUMBER top-1 (an updating input): Flink refuses it too
}


def diagnostics(tmp_path: Path, name: str) -> list[tuple[str, str, int, int, str, str]]:
    root = tmp_path / "project"
    shutil.copytree(FOLDER / "project", root)
    shutil.copy(FOLDER / "queries" / f"{name}.sql", root / "sql" / f"{name}.sql")
    return [(d.code, d.location.file, d.location.line, d.location.col, d.message, d.hint or "")
            for d in check_project(root).diagnostics]


def test_every_published_query_is_adapted_and_classified():
    published = {p.stem for p in (FOLDER / "published").glob("q*.sql")}
    assert published == {f"q{i}" for i in range(24)}
    assert {p.stem for p in (FOLDER / "queries").glob("q*.sql")} == published
    assert set(RUNS) | set(REFUSED) == published and not set(RUNS) & set(REFUSED)


@pytest.mark.parametrize("name", sorted(f"q{i}" for i in range(24)))
def test_the_query_is_the_published_text(name):
    def query(folder: str) -> str:
        text = (FOLDER / folder / f"{name}.sql").read_text()
        return re.sub(r"\s+", " ", text[text.index("INSERT INTO"):]).strip()

    assert query("queries") == query("published")


@pytest.mark.parametrize("name", RUNS)
def test_a_supported_query_validates(tmp_path, name):
    found = diagnostics(tmp_path, name)
    assert [(code, Path(file).name, line, col) for code, file, line, col, *_ in found] == [
        (code, f"{name}.sql", line, col) for code, line, col in WARNED.get(name, [])]
    assert all("WITHIN 1 HOUR" in hint for *_, hint in found)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_unsupported_query_is_refused_at_its_place(tmp_path, name):
    found = diagnostics(tmp_path, name)
    assert [(code, Path(file).name, line, col) for code, file, line, col, *_ in found] == [
        (code, f"{name}.sql", line, col) for code, line, col in REFUSED[name]]
    assert all("Traceback" not in message for *_, message, _ in found)
    for code, *_, hint in found:  # Flink's window syntax is answered with dsflow's spelling of it
        assert code != "DSF-E189" or "write the updating input into a stream first" in hint and "OVER" in hint
        assert code != "DSF-E002" or hint.startswith("Flink's") and "window_start, window_end" in hint


@pytest.mark.parametrize("name", ["q5", "q7", "q8", "q12"])
def test_flink_window_table_functions_parse_as_dsflow_windows(name):
    """The window table functions of the queries refused for other constructs are no longer what stops them:
    each `TABLE(TUMBLE|HOP(TABLE rel, DESCRIPTOR(col), ...))` parses as dsflow's window over `rel`."""
    from dsflow.sql.dialect import window_call
    from dsflow.sql.flink_windows import FLINK
    from dsflow.sql.parse import parse_sql_file

    text = (FOLDER / "queries" / f"{name}.sql").read_text()
    statements, problems = parse_sql_file(text, f"{name}.sql")
    assert problems == []
    (insert,) = [s for s in statements if s.kind == "insert"]
    windows = [window_call(t) for t in insert.select.find_all(exp.Table) if FLINK in t.meta]
    assert len(windows) == text.count("DESCRIPTOR(") > 0
    published = re.findall(r"(TUMBLE|HOP)\(TABLE (\w+)", text)
    assert [(w.kind.upper(), w.relation.name) for w in windows if w is not None] == published
