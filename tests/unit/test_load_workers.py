"""Loading on forked workers (dsflow/load/workers.py) gives exactly what a load in one process gives: the same
project, the same diagnostics at the same places, also when a worker dies. The reference is DSFLOW_LOAD_WORKERS=1."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

import dsflow.load.queries as queries
import dsflow.load.workers as workers
from dsflow.sql.filecache import encode_statements
from dsflow.load.project import check_project
from dsflow.sql.parse import parse_sql_file, parse_statement, statement_spans, tokenize_span
from support.projects import EXAMPLE_VARIABLES, PAGEVIEWS, copy_example, make_project

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from plan_scale import QUERY, SOURCE, write_dsflow_project  # noqa: E402

TRICKY = [
    "-- head\nCREATE STREAM a (x BIGINT) WITH ('value.format'='json');\n-- between\n/* block; semicolon */\n"
    "CREATE STREAM b AS SELECT x FROM a WHERE x <> ';';  -- trailing\n",
    "CREATE STREAM b AS SELECT 'it\\'s;' AS s, \"a;b\" AS t, `we;ird` FROM a;;\n\n;CREATE STREAM c AS\n\tSELECT x "
    "/* in;side */ FROM a",
    "CREATE STREAM b AS SELECT r'c:\\dir;' AS p FROM a; CREATE STREAM c AS SELECT 1 AS one FROM a",
    "CREATE STREAM b AS SELECT x FROM a /* nested /* c; */ still */ ; CREATE STREAM c AS SELECT x FROM a",
    "CREATE STREAM b AS SELECT x FROM a WHERE y = 'unterminated; CREATE STREAM c AS SELECT 1",
    "   \n  CREATE STREAM é AS SELECT 'ü;' AS u FROM a; /* c */ CREATE STREAM f AS SELECT x -- c;\n FROM a;",
    "CREATE STREAM b AS SELECT X'0A' AS h, 'a''b;' AS q FROM a; INSERT INTO b SELECT * FROM a",
    "CREATE STREAM b AS SELECT x FROM a PARTITION BY x; CREATE STREAM c WITH ('topic.partitions' = 1) AS\n"
    "SELECT x FROM a WHERE x > 1",
]


def _plain(statements) -> list:
    """Statements as comparable data: their fields, locations and SELECT text."""
    return [(encode_statements([st], st.location.file), st.select.sql() if st.select is not None else None)
            for st in statements]


@pytest.mark.parametrize("text", TRICKY)
def test_statements_cut_without_tokenizing_parse_as_the_whole_file_does(text):
    spans = statement_spans(text)
    cut = [tokenize_span(text, span) for span in spans]
    whole, problems = parse_sql_file(text, "f.sql")
    if any(tokens is None for tokens in cut):
        assert problems, "a span cut wrongly is only expected where the file does not parse either"
        return
    if problems:
        return  # the workers parse such a file again as a whole
    parsed = [parse_statement(tokens, text, "f.sql")[0] for tokens in cut if tokens]
    assert _plain(parsed) == _plain(whole)


def _check(root: Path, variables: dict, processes: int, monkeypatch) -> tuple:
    monkeypatch.setenv("DSFLOW_CACHE", "0")
    monkeypatch.setenv("DSFLOW_LOAD_WORKERS", str(processes))
    result = check_project(root, variables=variables)
    return result.project, [str(d) for d in result.diagnostics]


def _count_local_analyses(monkeypatch) -> list[int]:
    """Counts the SELECTs resolved in this process (a forked worker's calls are not seen here)."""
    import dsflow.sql.select as select

    calls = [0]
    real = select.analyse_select
    parent = os.getpid()

    def counting(*args, **kwargs):
        calls[0] += os.getpid() == parent
        return real(*args, **kwargs)

    monkeypatch.setattr(select, "analyse_select", counting)
    return calls


def _broken_project(tmp_path: Path) -> Path:
    """Many files, so that every kind of problem lands in a worker's share too."""
    files = {f"sql/src_{i:02d}.sql": "\n".join(SOURCE.format(i=i * 20 + j) for j in range(20)) for i in range(10)}
    files |= {f"sql/q_{i:02d}.sql": "\n".join(QUERY.format(i=i * 20 + j, src=f"s{i * 20 + j}") for j in range(20))
              for i in range(10)}
    files["sql/q_03.sql"] = files["sql/q_03.sql"].replace("UPPER(user_id)", "UPPER(usr_id)")  # DSF-E041
    files["sql/q_05.sql"] = files["sql/q_05.sql"].replace("FROM s105 ", "FROM s_missing ")  # DSF-E040
    files["sql/q_06.sql"] = files["sql/q_06.sql"].replace("UPPER(user_id)", "UPPER(user_id", 1)  # DSF-E002
    files["sql/q_07.sql"] += ("\nCREATE STREAM cyc_a AS SELECT * FROM cyc_b;"
                              "\nCREATE STREAM cyc_b AS SELECT * FROM cyc_a;\n")
    files["sql/q_08.sql"] += "\nCREATE STREAM q170 AS SELECT * FROM s1;\n"  # DSF-E020, defined twice
    files["sql/q_09.sql"] += "\nINSERT INTO q0 SELECT id, ts FROM s2;\n"  # DSF-E043
    files["sql/q_09.sql"] += "\nCREATE STREAM agg AS SELECT kind, COUNT(*) AS n FROM s3 GROUP BY kind;\n"  # E046
    files["sql/sources.sql"] = PAGEVIEWS
    return make_project(tmp_path / "broken", files)


def test_a_load_on_workers_equals_a_load_in_one_process(tmp_path, monkeypatch):
    nexmark = tmp_path / "nexmark"
    shutil.copytree(REPO / "bench" / "nexmark_project", nexmark, ignore=shutil.ignore_patterns(".dsflow"))
    for root, variables in [(copy_example(tmp_path), EXAMPLE_VARIABLES), (nexmark, {}),
                            (write_dsflow_project(tmp_path / "scale", 600), {}), (_broken_project(tmp_path), {})]:
        alone = _count_local_analyses(monkeypatch)
        reference = _check(root, variables, 1, monkeypatch)
        monkeypatch.undo()
        shared = _count_local_analyses(monkeypatch)
        forked = _check(root, variables, 3, monkeypatch)
        monkeypatch.undo()
        assert forked == reference, root
        if root.name in ("scale", "broken"):
            assert 0 < shared[0] < alone[0] * 0.75, f"{root}: {shared[0]} of {alone[0]} SELECTs resolved here"
    assert any("DSF-E002" in d and "q_06.sql" in d for d in reference[1]), reference[1]
    for code in ("DSF-E040", "DSF-E041", "DSF-E050", "DSF-E020", "DSF-E043", "DSF-E046"):
        assert any(code in d for d in reference[1]), (code, reference[1])


@pytest.mark.parametrize("stage", ["parse", "resolve"])
def test_a_worker_that_dies_leaves_its_work_to_the_loading_process(tmp_path, monkeypatch, stage):
    root = _broken_project(tmp_path)
    reference = _check(root, {}, 1, monkeypatch)
    parent = os.getpid()
    target = "_Job" if stage == "parse" else "_resolve_on_request"

    def dying(*args, **kwargs):
        if os.getpid() != parent:
            os._exit(3)  # no answer at all, as a crash or the OOM killer would leave it
        return real(*args, **kwargs)

    if stage == "parse":
        real = workers._Job.parse
        monkeypatch.setattr(workers._Job, "parse", dying)
    else:
        real = workers._resolve_on_request
        monkeypatch.setattr(workers, target, dying)
    assert _check(root, {}, 3, monkeypatch) == reference


def test_small_projects_load_in_one_process(tmp_path, monkeypatch):
    monkeypatch.delenv("DSFLOW_LOAD_WORKERS", raising=False)
    small = [("a.sql", SOURCE.format(i=1) * 10)]
    assert workers.process_count(small) == 1
    big = [(f"f{i}.sql", SOURCE.format(i=i) * 100) for i in range(5)]
    assert workers.process_count(big) == min(len(os.sched_getaffinity(0)), workers.MAX_PROCESSES)
    monkeypatch.setenv("DSFLOW_LOAD_WORKERS", "1")
    assert workers.process_count(big) == 1
    assert queries.qualified_name(("x",), "db", "sc") == "db.sc.x"
