"""The `dsflow` command line. Thin: it parses options, calls operations, renders results.

Exit codes: 0 success, 1 error, 2 usage error (click), 3 "changes present" with --detailed-exitcode.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from dsflow import operations
from dsflow.core.plan import Plan
from dsflow.errors import DsflowError, ProjectError
from dsflow.render import diagnostics_text, graph_dot, graph_mermaid, graph_text, plan_text, status_rows

EXIT_CHANGES = 3
console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _parse_vars(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected KEY=VALUE, got '{item}'", param_hint="--var")
        out[key] = value
    return out


@click.group()
@click.option("-C", "--project-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="the project folder (holding dsflow.yml)")
@click.option("--env", "environment", default=None, help="environment from dsflow.yml (default: default_environment)")
@click.option("--var", "variables", multiple=True, metavar="KEY=VALUE", help="override an environment variable")
@click.version_option(package_name="dsflow")
@click.pass_context
def cli(ctx: click.Context, project_dir: Path, environment: str | None, variables: tuple[str, ...]) -> None:
    """dsflow: streaming pipelines as code."""
    ctx.obj = operations.Options(project_dir, environment, _parse_vars(variables))


def _load(ctx: click.Context) -> operations.Loaded:
    return operations.load(ctx.obj)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print diagnostics as JSON")
@click.pass_context
def validate(ctx: click.Context, as_json: bool) -> None:
    """Check the project without touching anything."""
    from dsflow.load.project import check_project

    options: operations.Options = ctx.obj
    result = check_project(options.project_dir, options.environment, options.variables)
    diagnostics = [d.to_dict() for d in result.diagnostics]
    if as_json:
        click.echo(json.dumps({"valid": not result.errors, "diagnostics": diagnostics}, indent=2))
    else:
        click.echo(diagnostics_text(diagnostics))
    if result.errors:
        sys.exit(1)


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["text", "dot", "mermaid"]), default="text", show_default=True)
@click.pass_context
def graph(ctx: click.Context, fmt: str) -> None:
    """Show the dependency graph."""
    resource_graph = operations.resource_graph(_load(ctx).project)
    click.echo({"text": graph_text, "dot": graph_dot, "mermaid": graph_mermaid}[fmt](resource_graph))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), help="save the plan to FILE")
@click.option("--destroy", is_flag=True, help="plan the removal of everything deployed")
@click.option("--refresh/--no-refresh", default=True, show_default=True, help="look for drift first")
@click.option("--detailed-exitcode", is_flag=True, help=f"exit {EXIT_CHANGES} when the plan has changes")
@click.option("--show-unchanged", is_flag=True, help="list up-to-date resources too")
@click.pass_context
def plan(ctx: click.Context, as_json: bool, out: Path | None, destroy: bool, refresh: bool,
         detailed_exitcode: bool, show_unchanged: bool) -> None:
    """Show what apply would change."""
    the_plan = operations.plan(_load(ctx), destroy=destroy, do_refresh=refresh)
    data = the_plan.model_dump(mode="json")
    if out:
        out.write_text(json.dumps(data, indent=2))
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        console.print(plan_text(data, color=True, show_noop=show_unchanged))
        if out:
            console.print(f"\nSaved the plan to {out}. Apply it with: dsflow apply {out}")
    if detailed_exitcode and the_plan.has_changes:
        sys.exit(EXIT_CHANGES)


@cli.command()
@click.argument("planfile", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--auto-approve", is_flag=True, help="do not ask for confirmation")
@click.pass_context
def apply(ctx: click.Context, planfile: Path | None, auto_approve: bool) -> None:
    """Carry out the plan (a saved PLANFILE, or a fresh one)."""
    loaded = _load(ctx)
    if planfile:
        the_plan = Plan.model_validate_json(planfile.read_text())
    else:
        the_plan = operations.plan(loaded)
    _apply(loaded, the_plan, auto_approve or planfile is not None)


@cli.command()
@click.option("--auto-approve", is_flag=True, help="do not ask for confirmation")
@click.pass_context
def destroy(ctx: click.Context, auto_approve: bool) -> None:
    """Stop every query and delete what dsflow created, in reverse dependency order."""
    loaded = _load(ctx)
    _apply(loaded, operations.plan(loaded, destroy=True), auto_approve)


def _apply(loaded: operations.Loaded, the_plan: Plan, auto_approve: bool) -> None:
    data = the_plan.model_dump(mode="json")
    console.print(plan_text(data, color=True))
    if not the_plan.has_changes:
        return
    if not auto_approve and not click.confirm("\nApply these changes?", default=False):
        console.print("Apply cancelled.")
        sys.exit(1)

    def on_event(event: str, change) -> None:
        if event == "done":
            console.print(f"  [green]✓[/] {change.action.value} {change.address}")
        elif event == "failed":
            console.print(f"  [red]✗[/] {change.action.value} {change.address}")

    console.print()
    result = operations.apply(loaded, the_plan, on_event)
    if result.failed:
        change, error = result.failed
        err_console.print(f"\nError while applying {change.address}: {error}")
        if result.skipped:
            err_console.print("Not applied: " + ", ".join(c.address for c in result.skipped))
        err_console.print("State records what succeeded; run 'dsflow plan' and 'dsflow apply' again.")
        sys.exit(1)
    console.print(f"\nApply complete: {len(result.done)} change(s).")


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """List deployed queries and generators with their live state and rates."""
    entries = operations.status(_load(ctx))
    if as_json:
        click.echo(json.dumps(entries, indent=2, default=str))
        return
    if not entries:
        console.print("Nothing deployed.")
        return
    table = Table("resource", "state", "input rows/s", "batch", "last progress", "error")
    for column in table.columns:
        column.overflow = "fold"
    for row in status_rows(entries):
        table.add_row(*row)
    console.print(table)


@cli.group()
def state() -> None:
    """Inspect the deployed state."""


@state.command("show")
@click.pass_context
def state_show(ctx: click.Context) -> None:
    """Print the deployed state as JSON."""
    loaded = _load(ctx)
    click.echo(loaded.workspace.state_backend().read().model_dump_json(indent=2))


@cli.command("force-unlock")
@click.argument("lock_id")
@click.pass_context
def force_unlock(ctx: click.Context, lock_id: str) -> None:
    """Remove a stale state lock (its id is shown in the locked error)."""
    _load(ctx).workspace.state_backend().force_unlock(lock_id)
    console.print(f"Lock {lock_id} removed.")


from dsflow.cli_tools import datagen, dev, init, topic  # noqa: E402  (sub-commands live apart)

cli.add_command(dev)
cli.add_command(topic)
cli.add_command(datagen)
cli.add_command(init)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        err_console.print("Aborted.")
        sys.exit(1)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except ProjectError as err:
        err_console.print(diagnostics_text([d.to_dict() for d in err.diagnostics]), markup=False)
        sys.exit(1)
    except DsflowError as err:
        err_console.print(f"Error: {err}", markup=False)
        sys.exit(1)
    except SystemExit:
        raise


if __name__ == "__main__":
    main()
