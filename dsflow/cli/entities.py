"""`dsflow entity list|describe|print`: browse the tables of lake, warehouse and database stores (logic in
entities.py; the help names the store kinds from the registry, core/stores.py)."""

from __future__ import annotations

import json

import click

from dsflow.engine import operations
from dsflow.core import stores
from dsflow.cli.terminal import LazyConsole, print_table

console = LazyConsole()
store_option = click.option("--store", help="the store to browse (default: the store of the table relation PATH)")


def _kinds_help() -> str:
    """'Browse the tables of a, b and c stores.': the store types whose `commands` facet lists entities."""
    from dsflow.engine.entities import entity_types

    types = entity_types()
    return f"Browse the tables of {', '.join(types[:-1])} and {types[-1]} stores."


def _paths_help() -> str:
    """'List the entities under PATH (TITLE: PATH FORM; ...).': each kind's `entity_paths`."""
    from dsflow.engine.entities import entity_types

    paths: dict[str, str] = {}
    for store_type in entity_types():
        commands = stores.facet(store_type, "commands")
        assert commands is not None  # entity_types: the kinds whose commands list entities
        paths.update(commands.entity_paths)
    return f"List the entities under PATH ({'; '.join(f'{title}: {path}' for title, path in paths.items())})."


def _target(ctx: click.Context, path: str, store: str | None):
    from dsflow.engine.entities import resolve

    project = operations.load(ctx.obj).project
    return project, resolve(project, path, store)


@click.group(help=_kinds_help())
def entity() -> None:
    pass


@entity.command("list", help=_paths_help())
@click.argument("path", required=False, default="")
@store_option
@click.option("--json", "as_json", is_flag=True, help="print a JSON list")
@click.pass_context
def entity_list(ctx: click.Context, path: str, store: str | None, as_json: bool) -> None:
    from dsflow.engine.entities import list_entities

    if store is None:
        raise click.UsageError("pass --store NAME")
    project, target = _target(ctx, path, store)
    names = list_entities(project, target)
    click.echo(json.dumps(names) if as_json else "\n".join(names))


@entity.command("describe")
@click.argument("path")
@store_option
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_context
def entity_describe(ctx: click.Context, path: str, store: str | None, as_json: bool) -> None:
    """Describe the table PATH: its columns, and what the format knows (version, files, key)."""
    from dsflow.engine.entities import describe_entity

    project, target = _target(ctx, path, store)
    info = describe_entity(project, target)
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
        return
    for key, value in info.items():
        if key != "columns" and value not in (None, "", {}, []):
            console.print(f"{key}: {value}", markup=False)
    print_table(console, ("column", "type", "nullable"),
                [[c["name"], c["type"], "yes" if c["nullable"] else "no"] for c in info["columns"]])


@entity.command("print")
@click.argument("path")
@store_option
@click.option("--limit", type=int, default=20, show_default=True, help="rows to print at most")
@click.pass_context
def entity_print(ctx: click.Context, path: str, store: str | None, limit: int) -> None:
    """Print rows of the table PATH as JSON lines."""
    from dsflow.engine.entities import entity_rows

    project, target = _target(ctx, path, store)
    columns, rows = entity_rows(project, target, limit)
    for row in rows:
        click.echo(json.dumps(dict(zip(columns, row, strict=False)), default=str))
