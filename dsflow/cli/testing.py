"""`dsflow test`: the project's query tests (tests/*.yml) on Spark without a broker (docs/testing-queries.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from dsflow.cli.render import escape_markup
from dsflow.cli.terminal import LazyConsole
from dsflow.core.unittests import Mismatch, Outcome
from dsflow.engine import operations

console = LazyConsole(markup=True)


@click.command("test")
@click.argument("names", nargs=-1)
@click.option("--junit-xml", "junit", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write the results as JUnit XML to PATH (for CI)")
@click.option("--record", "recorded", metavar="QUERY", default=None,
              help="write a test of QUERY from the environment: its sources' first records as inputs, what the query "
                   "computes from them as the expected output (tests/NAME.yml)")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="with --record: records to take from each source")
@click.option("--name", "test_name", default=None, help="with --record: the test's name (default recorded_QUERY)")
@click.option("--timeout", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="with --record: stop reading a source after this many idle seconds")
@click.pass_context
def test(ctx: click.Context, names: tuple[str, ...], junit: Path | None, recorded: str | None, limit: int,
         test_name: str | None, timeout: float) -> None:
    """Run the project's query tests (tests/*.yml), or those NAMES, on Spark without a broker; exit 1 if one fails.
    With --record QUERY, write a new test of QUERY from the environment instead (then run it once)."""
    from dsflow.engine import unittests

    project = operations.load(ctx.find_root().obj).project
    if recorded is not None:
        _record(ctx, project, recorded, limit, timeout, test_name)
        return
    outcomes = unittests.run(project, names, _print_outcome)
    if junit is not None:
        unittests.junit_xml(outcomes, junit)
    passed = sum(1 for o in outcomes if o.passed)
    failed = [o for o in outcomes if not o.passed]
    seconds = sum(o.seconds for o in outcomes)
    if not outcomes:
        console.print("No tests found (tests/*.yml in the project).")
        return
    console.print(f"\n{passed} passed, {len(failed)} failed in {seconds:.1f} s"
                  + ("" if not failed else ": " + ", ".join(escape_markup(o.test.name) for o in failed)))
    if failed:
        ctx.exit(1)


def _record(ctx: click.Context, project, query: str, limit: int, timeout: float, name: str | None) -> None:
    from dsflow.engine.recording import record

    done = record(project, query, limit, timeout, name)
    shown = done.path.relative_to(project.root) if done.path.is_relative_to(project.root) else done.path
    left = f"; {done.left_out} record(s) left out (not decoded into a row, or tombstones)" if done.left_out else ""
    console.print(escape_markup(f"Recorded {shown}: {done.inputs} input record(s), {done.expected} expected "
                                f"row(s){left}."))
    _print_outcome(done.outcome)
    if not done.outcome.passed:
        console.print("The query gave another output from the same inputs when run again: it is not deterministic "
                      "(processing time, random, or arrival order); edit the expected output by hand.")
        ctx.exit(1)


def _print_outcome(outcome: Outcome) -> None:
    test = outcome.test
    where = escape_markup(f"{test.name} ({test.query}, {test.location})")
    if outcome.passed:
        console.print(f"[green]PASS[/green] {where} {outcome.seconds:.1f} s")
        return
    if outcome.error is not None:
        console.print(f"[red]ERROR[/red] {where}\n  {escape_markup(outcome.error)}")
        return
    console.print(f"[red]FAIL[/red] {where}")
    for mismatch in outcome.mismatches:
        _print_mismatch(mismatch)


def _print_mismatch(mismatch: Mismatch) -> None:
    """Missing rows (-, red) and unexpected ones (+, green): per key for a state, else sorted so that like rows
    stand together."""
    title = f"{mismatch.what}: {mismatch.message}" if mismatch.message else f"{mismatch.what} differ " \
        f"({len(mismatch.missing)} missing, {len(mismatch.unexpected)} unexpected)"
    console.print(f"  {escape_markup(title)}")
    lines = [(_order(r, mismatch.keys), "-", r) for r in mismatch.missing] + \
        [(_order(r, mismatch.keys), "+", r) for r in mismatch.unexpected]
    shown_key = None
    for key, sign, row in sorted(lines, key=lambda line: (line[0], line[1] == "+")):
        if mismatch.keys and key != shown_key:
            console.print(f"    key {escape_markup(key)}")
            shown_key = key
        color = "red" if sign == "-" else "green"
        label = "missing   " if sign == "-" else "unexpected"
        indent = "      " if mismatch.keys else "    "
        console.print(f"{indent}[{color}]{sign} {label} {escape_markup(json.dumps(row, default=str))}[/{color}]")


def _order(row: dict, keys: tuple[str, ...]) -> str:
    if keys:
        return json.dumps({k: row.get(k) for k in keys}, default=str)
    return json.dumps(list(row.values()), default=str)
