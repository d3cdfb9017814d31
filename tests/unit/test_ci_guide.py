"""docs/ci.md: its GitHub Actions workflow is valid YAML, and every dsflow command in it parses with the
real command line (so the guide does not drift from the CLI)."""

from __future__ import annotations

import re
import shlex

import click
import yaml

from dsflow.cli import cli
from support.projects import REPO

GUIDE = REPO / "docs" / "ci.md"


def _workflow() -> dict:
    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    workflows = [yaml.safe_load(b) for b in blocks if b.startswith("name: dsflow\n")]
    assert len(workflows) == 1
    return workflows[0]


def _dsflow_commands(script: str) -> list[list[str]]:
    commands = []
    for line in script.splitlines():
        line = line.strip()
        if not line.startswith("dsflow "):
            continue
        line = line.split(">", 1)[0]  # drop output redirection
        line = re.sub(r'"\$(\w+)"', lambda m: m.group(1).lower(), line)
        commands.append(shlex.split(line)[1:])
    return commands


def _check_parses(args: list[str]) -> str:
    """Parse ARGS as the dsflow CLI would, without running anything; returns the sub-command's name."""
    ctx = click.Context(cli, info_name="dsflow")
    _, rest, _ = cli.make_parser(ctx).parse_args(list(args))
    name, command, rest = cli.resolve_command(ctx, rest)
    command.make_context(name, list(rest), parent=ctx)
    return name


def test_the_workflow_comments_the_plan_on_pull_requests_and_applies_the_saved_plan_on_main(tmp_path,
                                                                                            monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text("{}")  # the saved plan the apply job downloads
    workflow = _workflow()
    on = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on:` as true
    assert set(on) == {"pull_request", "push"} and on["push"]["branches"] == ["main"]
    jobs = workflow["jobs"]
    scripts = {name: "\n".join(step.get("run", "") for step in job["steps"]) for name, job in jobs.items()}
    commands = {name: _dsflow_commands(script) for name, script in scripts.items()}
    for job_commands in commands.values():
        for args in job_commands:
            _check_parses(args)
    pr_plan = next(a for a in commands["pr-plan"] if "plan" in a)
    assert "--detailed-exitcode" in pr_plan and pr_plan[pr_plan.index("--format") + 1] == "markdown"
    assert any("createComment" in step.get("with", {}).get("script", "") for step in jobs["pr-plan"]["steps"])
    main_plan = next(a for a in commands["plan"] if "plan" in a)
    assert "--out" in main_plan and main_plan[main_plan.index("--out") + 1] == "plan.json"
    assert commands["apply"] == [["-C", "project_dir", "--env", "dsflow_env", "apply", "plan.json"]]
    assert jobs["apply"]["needs"] == "plan" and 'RUNNER_TRACKING_ID=""' in scripts["apply"]
    assert "DSFLOW_STATE_PASSWORD" in workflow["env"]


def test_the_guides_state_section_is_a_valid_project_setting(tmp_path, monkeypatch) -> None:
    from dsflow.load.project import check_project

    config = next(b for b in re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), re.DOTALL)
                  if b.startswith("name: clickstream"))
    root = tmp_path / "p"
    root.mkdir()
    (root / "dsflow.yml").write_text(config)
    monkeypatch.setenv("DSFLOW_STATE_PASSWORD", "x")
    result = check_project(root, "prod", None)
    assert not result.errors, [d.message for d in result.errors]
