"""`dsflow status` and `dsflow runtime down|status` as a new user meets them (issue 40, item 5): in a pipe at 80
columns every name whole and every error text as it is (never rich markup), and working from the recorded state
when the project does not validate. The real executable on a real project folder and its local state."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsflow.cli.render import escape_markup, plain_table
from dsflow.core.plan import PlanOptions, make_plan
from dsflow.core.resources import project_resources
from dsflow.engine.workspace import Workspace
from dsflow.load.project import load_project
from support.projects import EXAMPLE_VARIABLES, REPO, applied, copy_example

ENRICHED = "query.analytics.curated.pageviews_enriched"
ERROR = "Failed to read [/tmp/dsflow data/part-0] in [id = 7f3c, runId = 12]: [bold]not markup[/bold]"
MISSING = "DSF_TEST_SURELY_UNSET_VARIABLE"


def dsflow(root: Path, *args: str) -> subprocess.CompletedProcess:
    """The real executable's entry point in a pipe of 80 columns (no terminal)."""
    return subprocess.run([sys.executable, "-c", "from dsflow.cli import main; main()", "-C", str(root),
                           "--var", f"bootstrap={EXAMPLE_VARIABLES['bootstrap']}", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "COLUMNS": "80", "TERM": "xterm"})


@pytest.fixture()
def deployed(tmp_path: Path) -> Path:
    """The example project with its state recorded as an apply would (no query running); the enriched query's
    last status holds an error text with brackets."""
    root = copy_example(tmp_path)
    project = load_project(root, variables=EXAMPLE_VARIABLES)
    workspace = Workspace.of(project)
    state = applied(make_plan(project.name, project.environment, project_resources(project),
                              workspace.state_backend().read(), PlanOptions()))
    run_dir = tmp_path / "run" / "enriched"
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text(json.dumps({"state": "failed", "error": ERROR}))
    query = state.resources[ENRICHED]
    state = state.with_resource(query.model_copy(update={"outputs": {"run_dir": str(run_dir)}}))
    workspace.state_backend().write(state)
    return root


def test_status_in_a_pipe_prints_whole_names_and_errors_as_they_are(deployed):
    run = dsflow(deployed, "status")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["resource", "state", "input", "rows/s", "lag", "latency", "batch", "last", "progress",
                                "dead", "letters", "failed", "expectations", "error"]
    enriched = next(line for line in lines if line.startswith(ENRICHED + " "))  # whole, on one line
    assert enriched.endswith(ERROR), enriched  # brackets kept, nothing read as markup
    assert any(line.startswith("datagen.pageviews_feed ") for line in lines)


def test_status_and_runtime_work_from_the_state_when_the_project_does_not_validate(deployed):
    store = deployed / "stores" / "kafka.yml"
    store.write_text(store.read_text().replace("{{ var('bootstrap') }}", "{{ env_var('%s') }}" % MISSING))
    assert dsflow(deployed, "validate").returncode == 1
    status = dsflow(deployed, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "does not validate" in status.stderr and "working from the recorded state" in status.stderr
    assert any(line.startswith(ENRICHED + " ") for line in status.stdout.splitlines())
    down = dsflow(deployed, "runtime", "down")
    assert down.returncode == 0 and "No runtime supervisor was running." in down.stdout, down.stdout + down.stderr
    shown = dsflow(deployed, "runtime", "status", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["running"] is False, shown.stdout + shown.stderr


def test_a_broken_dsflow_yml_still_stops_status(deployed):
    config = deployed / "dsflow.yml"
    config.write_text(config.read_text() + "unknown_key: 1\n")
    run = dsflow(deployed, "status")
    assert run.returncode == 1 and "DSF-E010" in run.stderr, run.stdout + run.stderr


def test_plain_table_and_markup_escape():
    assert plain_table(["a", "long header"], [["x" * 12, ""], ["y", "two\nlines"]]).splitlines() == [
        "a             long header", "xxxxxxxxxxxx  -", "y             two lines"]
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(f"[green]{escape_markup(ERROR)}[/]")
    assert console.export_text().strip() == ERROR
