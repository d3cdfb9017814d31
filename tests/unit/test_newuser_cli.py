"""What a new user trips over in the CLI (issue 40, item 5): init's .gitignore, history of an unknown query,
hint lists that say how many names they leave out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from dsflow.cli import cli
from dsflow.load.project import check_project
from dsflow.core.suggest import did_you_mean
from support.projects import PAGEVIEWS, REPO, copy_example, make_project


def dsflow(root: Path, *args: str) -> subprocess.CompletedProcess:
    """The real executable's entry point (main: errors mapped to exit codes), in a process of its own."""
    return subprocess.run([sys.executable, "-c", "from dsflow.cli import main; main()", "-C", str(root), *args],
                          capture_output=True, text=True, cwd=REPO, env={"PATH": "/usr/bin:/bin",
                          "PYTHONPATH": str(REPO), "COLUMNS": "80"}, timeout=120)


def test_init_writes_a_gitignore_for_the_run_folder(tmp_path):
    fresh, kept = tmp_path / "fresh", tmp_path / "kept"
    kept.mkdir()
    (kept / ".gitignore").write_text("*.pyc")  # the user's own, without a final newline
    for folder in (fresh, kept):
        result = CliRunner().invoke(cli, ["init", str(folder)])
        assert result.exit_code == 0, result.output
    assert (fresh / ".gitignore").read_text().splitlines()[-1] == ".dsflow/"
    assert (kept / ".gitignore").read_text().splitlines() == [
        "*.pyc", "# dsflow's run folder: state, checkpoints, logs and caches", ".dsflow/"]
    assert check_project(fresh).errors == []


def test_history_of_an_unknown_query_is_an_error_with_a_suggestion(tmp_path):
    root = copy_example(tmp_path)
    run = dsflow(root, "history", "pageviews_filterd")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "DSF-E430" in run.stderr and "no query 'pageviews_filterd'" in run.stderr
    assert "did you mean 'query.analytics.curated.pageviews_filtered'?" in run.stderr
    known = CliRunner().invoke(cli, ["-C", str(root), "history", "pageviews_filtered"])  # known, never applied
    assert known.exit_code == 0 and "No history for query.analytics.curated.pageviews_filtered" in known.output


def test_a_hint_list_says_how_many_names_it_leaves_out(tmp_path):
    sources = "".join(PAGEVIEWS.replace("pageviews", f"source_{i:02d}") for i in range(11))
    files = {"sql/sources.sql": sources, "sql/q.sql": "CREATE STREAM q AS SELECT id FROM zzz;\n"}
    errors = check_project(make_project(tmp_path, files)).errors
    assert [e.code for e in errors] == ["DSF-E040"], errors
    assert errors[0].hint == "known: " + ", ".join(f"source_{i:02d}" for i in range(8)) + " and 3 more"
    assert did_you_mean("zzz", ["a", "b"]) == "known: a, b"  # nothing left out, nothing said
