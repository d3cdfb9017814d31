"""`dsflow import ADDRESS ID` (core/imports.py): take an existing log a declared stream or changelog names into the
state as it is, as an `import:` entry would; the plan is targeted at ADDRESS (and what it needs)."""

from __future__ import annotations

import click

from dsflow.cli import _apply, _load
from dsflow.engine import operations
from dsflow.errors import DsflowError


@click.command("import")
@click.argument("address")
@click.argument("id_", metavar="ID")
@click.option("--auto-approve", is_flag=True, help="do not ask for confirmation")
@click.pass_context
def import_(ctx: click.Context, address: str, id_: str, auto_approve: bool) -> None:
    """Adopt the existing log (a topic, a stream) ID that the declared stream or changelog ADDRESS names: the plan
    shows it imported, then what its declaration changes in it; apply records it (dsflow never deletes it)."""
    loaded = _load(ctx)
    name = address.removeprefix("relation.")
    found = [r for r in loaded.project.relations if r.fqn == name or r.fqn.endswith(f".{name}")]
    if len(found) != 1 or found[0].kind not in ("stream", "changelog"):
        raise DsflowError("DSF-E866", f"import: '{address}' is not a stream or changelog declared in the project",
                          hint="declare it (CREATE STREAM|CHANGELOG, or write it with 'dsflow infer'), then import "
                               "the log it names")
    relation = found[0]
    if id_ != relation.topic:
        raise DsflowError("DSF-E867", f"import: '{id_}' is not the log relation.{relation.fqn} names "
                          f"('{relation.topic}')", hint=f"set its 'topic' to '{id_}', or import '{relation.topic}'")
    key = f"relation.{relation.fqn}"
    _apply(loaded, operations.plan(loaded, targets=frozenset({key}), imports={key: id_}), auto_approve)
