"""`dsflow import ADDRESS ID` (core/imports.py): take an existing log (or table) a declared relation names into the
state as it is, as an `import:` entry would; the plan is targeted at ADDRESS (and what it needs)."""

from __future__ import annotations

import click

from dsflow.cli import _apply, _load
from dsflow.core.imports import can_import, names_object, not_importable
from dsflow.engine import operations
from dsflow.errors import DsflowError


@click.command("import")
@click.argument("address")
@click.argument("id_", metavar="ID")
@click.option("--auto-approve", is_flag=True, help="do not ask for confirmation")
@click.pass_context
def import_(ctx: click.Context, address: str, id_: str, auto_approve: bool) -> None:
    """Adopt the existing log (a topic, a stream) or table ID ([DATABASE.]SCHEMA.TABLE, in a store kind that imports
    tables) that the declared stream, changelog or table ADDRESS names: the plan shows it imported, then what its
    declaration changes in it; apply records it (dsflow never deletes it)."""
    loaded = _load(ctx)
    name = address.removeprefix("relation.")
    found = [r for r in loaded.project.relations if r.fqn == name or r.fqn.endswith(f".{name}")]
    if len(found) != 1 or not can_import(found[0], loaded.project.store(found[0].store)):
        message, hint = not_importable(address)
        raise DsflowError("DSF-E866", message, hint=hint)
    relation = found[0]
    if not names_object(relation, id_):
        noun = "table" if relation.kind == "table" else "log"
        raise DsflowError("DSF-E867", f"import: '{id_}' is not the {noun} relation.{relation.fqn} names "
                          f"('{relation.topic}')", hint=f"name '{id_}' in its declaration, or import "
                                                        f"'{relation.topic}'")
    key = f"relation.{relation.fqn}"
    _apply(loaded, operations.plan(loaded, targets=frozenset({key}), imports={key: relation.topic}), auto_approve)
