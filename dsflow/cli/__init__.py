"""The `dsflow` command line. Thin: it parses options, calls operations, renders results.

Exit codes: 0 success, 1 error, 2 usage error (click), 3 "changes present" with --detailed-exitcode.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from dsflow.core import gcpause
from dsflow.core.bluegreen import DEFAULT_CATCH_UP_SECONDS
from dsflow.engine import operations
from dsflow.core.plan import Plan
from dsflow.core.secrets import scrub
from dsflow.errors import DsflowError, ProjectError
from dsflow.cli.render import (diagnostics_text, escape_markup, graph_dot, graph_mermaid, graph_text, plan_markdown,
                               plan_text, status_rows)
from dsflow.cli.terminal import LazyConsole, print_table

EXIT_CHANGES = 3
console = LazyConsole()  # rich is imported when something is printed through it (dsflow/cli/terminal.py)
err_console = LazyConsole(stderr=True)


def _parse_vars(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected KEY=VALUE, got '{item}'", param_hint="--var")
        out[key] = value
    return out


class _LazyGroup(click.Group):
    """A group whose sub-commands from other modules (`lazy`: name -> "module:attribute") are imported when
    they are run or listed: a plan does not import the topic, entity and dev-broker commands."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


SUBCOMMANDS = {"dev": "dsflow.cli.tools:dev", "topic": "dsflow.cli.topics:topic",
               "infer": "dsflow.cli.topics:infer", "datagen": "dsflow.cli.tools:datagen",
               "init": "dsflow.cli.tools:init", "entity": "dsflow.cli.entities:entity",
               "runtime": "dsflow.cli.runtime:runtime", "pause": "dsflow.cli.pausing:pause",
               "resume": "dsflow.cli.pausing:resume", "serve": "dsflow.cli.server:serve",
               "users": "dsflow.cli.server:users", "tokens": "dsflow.cli.server:tokens",
               "import": "dsflow.cli.adopting:import_", "describe": "dsflow.cli.describing:describe",
               "test": "dsflow.cli.testing:test", "events": "dsflow.cli.events:events",
               "shadow": "dsflow.cli.shadow:shadow"}
"""Sub-commands that live apart, imported on first use."""


@click.group(cls=_LazyGroup, lazy=SUBCOMMANDS)
@click.option("-C", "--project-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="the project folder (holding dsflow.yml)")
@click.option("--env", "environment", default=None, help="environment from dsflow.yml (default: default_environment)")
@click.option("--var", "variables", multiple=True, metavar="KEY=VALUE", help="override an environment variable")
@click.option("--server", envvar="DSFLOW_SERVER", metavar="URL", default=None,
              help="run plan, apply PLANFILE, status, query, events and topic print on a `dsflow serve` "
                   "(token: DSFLOW_TOKEN)")
@click.version_option(package_name="dsflow")
@click.pass_context
def cli(ctx: click.Context, project_dir: Path, environment: str | None, variables: tuple[str, ...],
        server: str | None) -> None:
    """dsflow: streaming pipelines as code."""
    ctx.obj = operations.Options(project_dir, environment, _parse_vars(variables))
    ctx.meta["dsflow.server"] = server  # dsflow/cli/server.py: the commands that work through a server


def _load(ctx: click.Context) -> operations.Loaded:
    return operations.load(ctx.obj)


def _warned(loaded: operations.Loaded) -> operations.Loaded:
    """`loaded`, after its load warnings (DSF-W001, ...) are printed on stderr."""
    for warning in loaded.warnings:
        err_console.print(str(warning), markup=False)
    return loaded


def load_what_runs(ctx: click.Context) -> operations.Loaded:
    """The project for status and runtime down/status: from its settings and state when it does not validate,
    after a warning on stderr (operations.load_what_runs)."""
    loaded, problem = operations.load_what_runs(ctx.find_root().obj)
    if problem is not None:
        err_console.print(f"Warning: the project does not validate ({len(problem.errors)} error(s); 'dsflow validate' "
                          "lists them): working from the recorded state", markup=False)
    return loaded


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print diagnostics as JSON")
@click.option("--state", "saved_state", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="compare enforced contracts with this saved state (from 'dsflow state show') instead of the "
                   "state backend's")
@click.pass_context
def validate(ctx: click.Context, as_json: bool, saved_state: Path | None) -> None:
    """Check the project without touching anything."""
    from dsflow.load.project import check_project

    options: operations.Options = ctx.obj
    with gcpause.command():  # dsflow/core/gcpause.py
        result = check_project(options.project_dir, options.environment, options.variables)
    found = list(result.diagnostics)
    if result.project is not None and not result.errors:
        from dsflow.engine.contracts import deployed_contracts

        found += deployed_contracts(result.project, saved_state)  # DSF-E896..E898 against the deployed state
    diagnostics = [d.to_dict() for d in found]
    errors = [d for d in diagnostics if d["severity"] == "error"]
    if as_json:
        click.echo(json.dumps({"valid": not errors, "diagnostics": diagnostics}, indent=2))
    else:
        click.echo(diagnostics_text(diagnostics))
    if errors:
        sys.exit(1)


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["text", "dot", "mermaid"]), default="text", show_default=True)
@click.pass_context
def graph(ctx: click.Context, fmt: str) -> None:
    """Show the dependency graph."""
    resource_graph = operations.resource_graph(_load(ctx).project)
    click.echo({"text": graph_text, "dot": graph_dot, "mermaid": graph_mermaid}[fmt](resource_graph))


def _targets(values: tuple[str, ...], option: str = "--target") -> frozenset[str]:
    for value in values:
        if "." not in value:
            raise click.BadParameter(f"'{value}' is not an address like query.db.schema.name", param_hint=option)
    return frozenset(values)


def _excludes(values: tuple[str, ...], targets: tuple[str, ...], destroy: bool = False) -> frozenset[str]:
    if values and targets:
        raise click.UsageError("--exclude and --target cannot be used together: one narrows the plan, the other "
                               "leaves part of it out")
    if values and destroy:
        raise click.UsageError("--exclude is not taken with --destroy: destroy --target ADDRESS removes a part")
    return _targets(values, "--exclude")


target_option = click.option("--target", "targets", multiple=True, metavar="ADDRESS",
                             help="limit the plan to ADDRESS and what it depends on (repeatable)")
exclude_option = click.option("--exclude", "excludes", multiple=True, metavar="ADDRESS",
                              help="leave ADDRESS and everything downstream of it as deployed (repeatable)")
replace_option = click.option("--replace", "replaces", multiple=True, metavar="ADDRESS",
                              help="rebuild the deployed query ADDRESS from scratch: a new checkpoint, its sources "
                                   "re-read from the earliest offset (repeatable)")
reset_option = click.option("--reset-checkpoint", "resets", multiple=True, metavar="ADDRESS",
                            help="give the deployed query ADDRESS a new checkpoint at its sources' end offsets, "
                                 "keeping its sink's data; what it had not read is skipped (repeatable)")

blue_green_option = click.option("--blue-green", "blue_green", is_flag=True,
                                 help="carry out each replay of a query writing a stream, changelog or table beside "
                                      "the deployed version: a new versioned topic or table, caught up and "
                                      "compared, then its readers switched")
catch_up_option = click.option("--catch-up-timeout", "catch_up", type=click.IntRange(min=0),
                               default=DEFAULT_CATCH_UP_SECONDS, show_default=True, metavar="SECONDS",
                               help="with --blue-green: the bound of the catch-up and of each reader's switch")


def _forced(ctx: click.Context, replaces: tuple[str, ...], resets: tuple[str, ...], blue_green: bool = False,
            catch_up: int = DEFAULT_CATCH_UP_SECONDS) -> operations.Forced:
    if (replaces or resets or blue_green) and ctx.meta.get("dsflow.server"):
        raise click.UsageError("--replace, --reset-checkpoint and --blue-green are not taken through --server yet")
    return operations.Forced(_targets(replaces, "--replace"), _targets(resets, "--reset-checkpoint"), blue_green,
                             catch_up)


DESTROY_TARGET_HELP = ("delete only ADDRESS and every deployed resource that depends on it, directly or through "
                       "others (repeatable)")
"""What `destroy --target` does (core/plan.py's _delete_changes); docs/cli.md and docs/concepts.md quote it."""
destroy_target_option = click.option("--target", "targets", multiple=True, metavar="ADDRESS", help=DESTROY_TARGET_HELP)


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="same as --format json")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), help="save the plan to FILE")
@click.option("--destroy", is_flag=True, help="plan the removal of everything deployed")
@click.option("--refresh/--no-refresh", default=True, show_default=True, help="look for drift first")
@click.option("--refresh-only", is_flag=True, help="only show drift; applying it records what was seen")
@target_option
@exclude_option
@replace_option
@reset_option
@blue_green_option
@catch_up_option
@click.option("--detailed-exitcode", is_flag=True, help=f"exit {EXIT_CHANGES} when the plan has changes")
@click.option("--show-unchanged", is_flag=True, help="list up-to-date resources too")
@click.pass_context
def plan(ctx: click.Context, fmt: str, as_json: bool, out: Path | None, destroy: bool, refresh: bool,
         refresh_only: bool, targets: tuple[str, ...], excludes: tuple[str, ...], replaces: tuple[str, ...],
         resets: tuple[str, ...], blue_green: bool, catch_up: int, detailed_exitcode: bool,
         show_unchanged: bool) -> None:
    """Show what apply would change."""
    forced = _forced(ctx, replaces, resets, blue_green, catch_up)
    if (replaces or resets) and (destroy or refresh_only):
        raise click.UsageError("--replace and --reset-checkpoint are not taken with --destroy or --refresh-only")
    with gcpause.command():  # one pause over loading, planning and rendering: all bulk stages (dsflow/core/gcpause.py)
        if ctx.meta.get("dsflow.server"):
            from dsflow.cli.server import remote_plan

            the_plan = remote_plan(ctx, destroy, refresh, refresh_only, targets, excludes)
        else:
            the_plan = operations.plan(_warned(_load(ctx)), destroy=destroy, do_refresh=refresh,
                                       refresh_only=refresh_only,
                                       targets=_targets(targets), excludes=_excludes(excludes, targets, destroy),
                                       forced=forced)
        _show_plan(the_plan, "json" if as_json else fmt, out, show_unchanged)
    if detailed_exitcode and the_plan.has_changes:
        sys.exit(EXIT_CHANGES)


def _show_plan(the_plan: Plan, fmt: str, out: Path | None, show_unchanged: bool) -> None:
    """Save the plan's JSON to `out` (if given) and print the plan in `fmt`."""
    data = the_plan.model_dump(mode="json")
    if out:
        out.write_text(json.dumps(data, indent=2))
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
    elif fmt == "markdown":
        click.echo(plan_markdown(data))
    else:
        _print_plan(data, show_unchanged)
        if out:
            console.print(f"\nSaved the plan to {out}. Apply it with: dsflow apply {out}")


def _print_plan(data: dict[str, Any], show_noop: bool = False) -> None:
    """The plan text, in color on a terminal. Without colors (piped, NO_COLOR) rich would only strip the markup,
    which took ~0.2 s per 1,000 changes: the plain text is written directly (and rich is not imported when
    the output is surely no terminal)."""
    if console.plain:
        click.echo(plan_text(data, show_noop=show_noop))
    else:
        console.print(plan_text(data, color=True, show_noop=show_noop), markup=True)


@cli.command()
@click.argument("planfile", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--auto-approve", is_flag=True, help="do not ask for confirmation")
@click.option("--refresh-only", is_flag=True, help="record drift in state without changing anything")
@click.option("--allow-destroy", "allow_destroy", multiple=True, metavar="ADDRESS",
              help="let this change delete the records its plan says it destroys (repeatable)")
@click.option("--allow-data-loss", is_flag=True, help="let every change delete the records the plan says it destroys")
@click.option("--no-runtime", is_flag=True, help="do not start the runtime supervisor (also: DSFLOW_RUNTIME=off)")
@target_option
@exclude_option
@replace_option
@reset_option
@blue_green_option
@catch_up_option
@click.pass_context
def apply(ctx: click.Context, planfile: Path | None, auto_approve: bool, refresh_only: bool,
          allow_destroy: tuple[str, ...], allow_data_loss: bool, no_runtime: bool, targets: tuple[str, ...],
          excludes: tuple[str, ...], replaces: tuple[str, ...], resets: tuple[str, ...], blue_green: bool,
          catch_up: int) -> None:
    """Carry out the plan (a saved PLANFILE, or a fresh one). A plan that destroys records (DESTROYS in the
    plan), skips them (SKIPS: --reset-checkpoint) or replays without records its sources no longer hold (GONE)
    is refused unless --allow-destroy names each such change or --allow-data-loss is given."""
    from dsflow.core.safety import Allowance

    forced = _forced(ctx, replaces, resets, blue_green, catch_up)

    if ctx.meta.get("dsflow.server"):
        from dsflow.cli.server import remote_apply

        return remote_apply(ctx, planfile, allow_data_loss, allow_destroy, no_runtime, refresh_only, targets, excludes)
    allowance = Allowance(everything=allow_data_loss, addresses=frozenset(allow_destroy))
    loaded = _load(ctx)
    if planfile:
        from dsflow.core.plan_schema import plan_from_json

        the_plan = plan_from_json(planfile.read_text(), str(planfile))
    else:
        the_plan = operations.plan(_warned(loaded), refresh_only=refresh_only, targets=_targets(targets),
                                   excludes=_excludes(excludes, targets), forced=forced)
    _apply(loaded, the_plan, auto_approve or planfile is not None, allowance)
    if not no_runtime:
        _start_runtime(ctx, loaded)


def _start_runtime(ctx: click.Context, loaded: operations.Loaded) -> None:
    """The runtime supervisor keeps the applied queries up (dsflow/runtime): started unless one runs, else asked
    to look at the new state at once."""
    from dsflow.runtime.control import ensure_started

    try:
        started = ensure_started(loaded, ctx.obj)
    except DsflowError as err:  # the apply itself succeeded: say so, and why nothing watches the queries
        err_console.print(f"Warning: {err}", markup=False)
        return
    if started is not None and started[1]:
        console.print(f"Runtime supervisor started (pid {started[0]['pid']}); 'dsflow runtime status' shows it.")
    else:
        _ask_runtime_to_look(loaded, "apply")


def _ask_runtime_to_look(loaded: operations.Loaded, by: str) -> None:
    """A running supervisor looks at the state apply or destroy just changed, instead of at its next tick; without
    one, nothing to do (apply works as it does without a supervisor)."""
    from dsflow.runtime import control

    running = control.info(loaded)
    if running is None:
        return
    try:
        answer = control.look_now(loaded, by)
    except DsflowError as err:  # the change is done: the supervisor reads the state at its next tick anyway
        if _ended(loaded):  # its own tick saw nothing left to run (after a destroy) and it stopped meanwhile
            console.print(f"Runtime supervisor (pid {running['pid']}) stopped: nothing is deployed any more.")
            return
        err_console.print(f"Warning: {err}", markup=False)
        return
    if answer.get("looked"):
        console.print(f"Runtime supervisor (pid {running['pid']}) looked at the new state.")


def _ended(loaded: operations.Loaded, seconds: float = 3.0) -> bool:
    """The supervisor stops, or says it is stopping, within `seconds` (one that is stopping says so in its info
    file, then closes its endpoint, then stops its standby driver, which can take longer)."""
    import time

    from dsflow.runtime import control

    deadline = time.monotonic() + seconds
    while (running := control.info(loaded)) is not None and not running.get("stopping"):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


@cli.command()
@click.option("--auto-approve", is_flag=True, help="do not ask for confirmation")
@destroy_target_option
@click.pass_context
def destroy(ctx: click.Context, auto_approve: bool, targets: tuple[str, ...]) -> None:
    """Stop every query and delete what dsflow created, in reverse dependency order."""
    loaded = _load(ctx)
    _apply(loaded, operations.plan(loaded, destroy=True, targets=_targets(targets)), auto_approve)
    _ask_runtime_to_look(loaded, "destroy")


@cli.command()
@click.argument("query")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history(ctx: click.Context, query: str, as_json: bool) -> None:
    """Every version of QUERY: when it ran, its checkpoint, and the offsets it started and stopped at."""
    loaded = _load(ctx)
    state = loaded.workspace.state_backend().read()
    address = query if query.startswith("query.") else _query_address(loaded, query)
    _check_query_known(address, query, loaded, state)
    entries = [e.model_dump(mode="json") for e in state.history(address)]
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    if not entries:
        console.print(f"No history for {address}.")
        return
    rows = []
    for e in entries:
        start = e["start_offsets"] or (f"ts {e['start_timestamp']}" if e["start_timestamp"] else "-")
        category = (e["category"] or "-") + (f" (--{e['forced'].replace('_', '-')})" if e.get("forced") else "")
        stopped = e["stopped_at"] or ("left running, forgotten" if e.get("forgotten_at") else "running")
        stopped += " (forgotten)" if e.get("forgotten_at") and e["stopped_at"] else ""
        rows.append([e["version"], category, e["started_at"], stopped,
                     json.dumps(start) if isinstance(start, dict) else start,
                     json.dumps(e["stop_offsets"]) if e["stop_offsets"] else "-", e["checkpoint"]])
    print_table(console, ("version", "category", "started", "stopped", "start offsets", "stop offsets", "checkpoint"),
                rows)


def _check_query_known(address: str, written: str, loaded: operations.Loaded, state) -> None:
    """DSF-E430 for a query that is neither in the project nor in the state (its resources or its ledger)."""
    known = {f"query.{q.fqn}" for q in loaded.project.queries} | {e.query for e in state.ledger}
    known |= {a for a in state.resources if a.startswith("query.")}
    if address in known:
        return
    from dsflow.core.suggest import closest, shortened

    by_name = {a.rsplit(".", 1)[-1]: a for a in sorted(known)}
    close = closest(written.rsplit(".", 1)[-1], by_name)
    hint = (f"did you mean '{by_name[close]}'?" if close else f"known: {shortened(sorted(known))}" if known
            else "the project has no query; see 'dsflow graph'")
    raise DsflowError("DSF-E430", f"no query '{written}' in the project or its state", hint=hint)


def _query_address(loaded: operations.Loaded, name: str) -> str:
    for q in loaded.project.queries:
        if q.fqn == name or q.fqn.endswith("." + name):
            return f"query.{q.fqn}"
    return f"query.{name}"


def _apply(loaded: operations.Loaded, the_plan: Plan, auto_approve: bool, allowance=None) -> None:
    from dsflow.core.safety import Allowance, check_data_loss

    data = the_plan.model_dump(mode="json")
    _print_plan(data)
    if not the_plan.has_changes:
        operations.migrate_state(loaded)  # a state written before keyed secret markers (docs/state.md#secrets)
        return
    allowance = allowance or Allowance()
    check_data_loss(the_plan, allowance)  # before asking: a refused plan is not offered
    if not auto_approve and not click.confirm("\nApply these changes?", default=False):
        console.print("Apply cancelled.")
        sys.exit(1)

    def on_event(event: str, change) -> None:
        if event == "done":
            console.print(f"  [green]✓[/] {escape_markup(f'{change.action.value} {change.address}')}", markup=True)
        elif event == "failed":
            console.print(f"  [red]✗[/] {escape_markup(f'{change.action.value} {change.address}')}", markup=True)

    console.print()
    result = operations.apply(loaded, the_plan, on_event, allowance)
    if result.failed:
        change, error = result.failed
        err_console.print(scrub(f"\nError while applying {change.address}: {error}"), markup=False)
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
    if ctx.meta.get("dsflow.server"):
        from dsflow.cli.server import remote_status

        entries = remote_status(ctx)
    else:
        entries = operations.status(load_what_runs(ctx))
    if as_json:
        click.echo(scrub(json.dumps(entries, indent=2, default=str)))
        return
    if not entries:
        console.print("Nothing deployed.")
        return
    headers = ("resource", "state", "input rows/s", "lag", "latency", "batch", "last progress", "dead letters",
               "failed expectations", "error")
    print_table(console, headers, [[scrub(cell) for cell in row] for row in status_rows(entries)])


@cli.group()
def state() -> None:
    """Inspect the deployed state."""


@state.command("show")
@click.pass_context
def state_show(ctx: click.Context) -> None:
    """Print the deployed state as JSON."""
    loaded = _load(ctx)
    click.echo(scrub(loaded.workspace.state_backend().read().model_dump_json(indent=2)))  # a state written before
    # 2026-11-25 may still hold a topic's bootstrap address from env_var() until the next apply


@cli.command("force-unlock")
@click.argument("lock_id")
@click.pass_context
def force_unlock(ctx: click.Context, lock_id: str) -> None:
    """Remove a stale state lock (its id is shown in the locked error)."""
    _load(ctx).workspace.state_backend().force_unlock(lock_id)
    console.print(f"Lock {lock_id} removed.")


@cli.command("query")
@click.argument("sql")
@click.option("--follow", is_flag=True, help="run SQL continuously over streams/changelogs until Ctrl-C")
@click.option("--from", "position", type=click.Choice(["latest", "earliest"]), default="latest", show_default=True,
              help="with --follow: where the sources start")
@click.option("--json", "as_json", is_flag=True, help="print rows as JSON (one object per line with --follow)")
@click.option("--csv", "as_csv", is_flag=True, help="print rows as CSV")
@click.pass_context
def query_command(ctx: click.Context, sql: str, follow: bool, position: str, as_json: bool, as_csv: bool) -> None:
    """Query materialized views or the system tables sys.events, sys.queries and sys.relations (a snapshot), or
    follow a stream or changelog with --follow."""
    from dsflow.engine import adhoc

    if as_json and as_csv:
        raise click.UsageError("--json and --csv exclude each other: pick one output format")
    if ctx.meta.get("dsflow.server"):
        from dsflow.cli.server import remote_query

        return remote_query(ctx, sql, follow, position,
                            lambda columns, rows, **kw: _print_rows(columns, rows, as_json, as_csv, **kw))
    loaded = _load(ctx)
    project = loaded.project
    system = adhoc.system_select(sql)
    if system is not None:
        if follow:
            raise click.UsageError("the system tables are a snapshot: leave out --follow ('dsflow events --follow' "
                                   "follows the event log)")
        from dsflow.adapters.sqlite import systables

        columns, rows = systables.query(loaded.workspace.state_backend(), system)
        _print_rows(columns, rows, as_json, as_csv, header=True)
        return
    if not follow:
        columns, rows = adhoc.view_query(project, sql)
        _print_rows(columns, rows, as_json, as_csv, header=True)
        return
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    printed = {"header": False}

    def on_rows(columns: list[str], rows: list[tuple]) -> None:
        _print_rows(columns, rows, as_json, as_csv, header=not printed["header"], stream=True)
        printed["header"] = True

    def on_started(checkpoint: Path) -> None:
        err_console.print(f"Following (checkpoint {checkpoint}); press Ctrl-C to stop.", markup=False)

    adhoc.follow(project, sql, on_rows, stop, position=position, on_started=on_started)
    err_console.print("Stopped; temporary checkpoint removed.")


def _print_rows(columns: list[str], rows: list[tuple], as_json: bool, as_csv: bool, header: bool,
                stream: bool = False) -> None:
    import csv
    import io

    values = [[v.isoformat() if hasattr(v, "isoformat") else v for v in row] for row in rows]
    if as_json:
        items = [dict(zip(columns, row, strict=False)) for row in values]
        text = ("\n".join(json.dumps(i, default=str) for i in items) if stream
                else json.dumps(items, default=str, indent=2))
        click.echo(text, nl=bool(text))
    elif as_csv:
        out = io.StringIO()
        writer = csv.writer(out)
        if header:
            writer.writerow(columns)
        writer.writerows(values)
        click.echo(out.getvalue(), nl=False)
    elif stream:
        if header:
            click.echo(" | ".join(columns))
        for row in values:
            click.echo(" | ".join("" if v is None else str(v) for v in row))
    else:
        print_table(console, columns, [["" if v is None else str(v) for v in row] for row in values])
        console.print(f"{len(rows)} row(s)")
    sys.stdout.flush()


def main() -> None:
    """The `dsflow` executable: runs one command, maps errors to exit codes."""
    gcpause.freeze()  # the modules are imported and live until exit (see dsflow/core/gcpause.py)
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
        err_console.print(str(err), markup=False)
        sys.exit(1)
    except SystemExit:
        raise


if __name__ == "__main__":
    main()
