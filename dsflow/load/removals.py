"""`removed:` and `import:` entries (Terraform's removed and import blocks): a deployed relation or query dsflow stops
managing, kept as it is; an existing log or table a declared relation takes into the state as it is.

An address is written as for `moved:` (load/moves.py). Checked once the project's relations and queries are known:
DSF-E856..DSF-E858 (removed), DSF-E866..DSF-E867 (import: a stream, changelog or table of a store kind that
imports tables; its id the log's name or the table's [database.]schema.table). An entry whose address is not
deployed (forgotten already, or never applied) plans nothing; nor does an import of what is deployed already.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from collections.abc import Mapping

from dsflow.core.imports import can_import, names_object, not_importable
from dsflow.core.model import Import, Move, Relation, Removal, Store
from dsflow.errors import Diagnostic, Location
from dsflow.load.moves import HINT, parse_address


def resolve_removals(entries: list[tuple[str, bool, Location]], declared: set[str], moves: list[Move],
                     qualify: Callable[[list[str]], str]) -> tuple[list[Removal], list[Diagnostic]]:
    """The valid removals, and a diagnostic for every entry that is not one."""
    problems: list[Diagnostic] = []
    removals: list[Removal] = []
    seen: dict[str, Location] = {}
    moved = {m.from_address for m in moves}
    for text, keep_running, where in entries:
        address = parse_address(text, qualify)
        if address is None:
            problems.append(Diagnostic("DSF-E856", f"removed: '{text}' is not the address of a relation or a query",
                                       where, hint=HINT.replace("'moved'", "'removed'")))
        elif address in declared:
            problems.append(Diagnostic("DSF-E857", f"removed: '{address}' is still declared in the project", where,
                                       hint="remove its declaration (a removed entry forgets what left the "
                                            "project), or remove this entry"))
        elif address in seen or address in moved:
            other = f"listed at {seen[address]}" if address in seen else "the 'from' of a moved entry"
            problems.append(Diagnostic("DSF-E858", f"removed: '{address}' is also {other}", where,
                                       hint="keep one entry: an address is moved or forgotten, once"))
        else:
            seen[address] = where
            removals.append(Removal(address=address, keep_running=keep_running, location=where))
    return removals, problems


def resolve_imports(entries: list[tuple[str, str | None, Location]], relations: Mapping[str, Relation],
                    qualify: Callable[[list[str]], str], stores_: Mapping[str, Store],
                    queries: Collection[str] = ()) -> tuple[list[Import], list[Diagnostic]]:
    """The valid imports (address -> the log's or table's name, or a running query's run folder), and a diagnostic
    for every entry that is not one."""
    problems: list[Diagnostic] = []
    imports: dict[str, Import] = {}
    for text, given, where in entries:
        address = parse_address(text, qualify)
        if address is not None and address in queries:
            problems += _query_import(address, given, where, imports)
            continue
        relation = relations.get(address.partition(".")[2]) if address and address.startswith("relation.") else None
        if relation is None or not can_import(relation, stores_.get(relation.store)):
            message, hint = not_importable(f"to: {text}")
            problems.append(Diagnostic("DSF-E866", message, where, hint=hint))
        elif given is not None and not names_object(relation, given):
            problems.append(Diagnostic("DSF-E867", f"import: 'id: {given}' is not the {_noun(relation)} {address} "
                                       f"names ('{relation.topic}')", where,
                                       hint=f"set its {_where(relation)} to '{given}', or write 'id: "
                                            f"{relation.topic}'"))
        elif (key := f"relation.{relation.fqn}") in imports:
            problems.append(Diagnostic("DSF-E867", f"import: '{key}' is imported twice (at "
                                       f"{imports[key].location})", where, hint="keep one entry"))
        else:
            imports[key] = Import(address=key, id=relation.topic, location=where)
    return list(imports.values()), problems


def _query_import(address: str, given: str | None, where: Location, imports: dict[str, Import]) -> list[Diagnostic]:
    """A running query's import: its `id` is the run folder of its driver (required)."""
    if not given:
        return [Diagnostic("DSF-E867", f"import: '{address}' has no 'id': a running query is imported from the run "
                           "folder of its driver", where, hint="write 'id: .dsflow/run/queries/<db.schema.name>' (the "
                           "folder holding its spec.json)")]
    if address in imports:
        return [Diagnostic("DSF-E867", f"import: '{address}' is imported twice (at {imports[address].location})", where,
                           hint="keep one entry")]
    imports[address] = Import(address=address, id=given, location=where)
    return []


def _noun(relation: Relation) -> str:
    return "table" if relation.kind == "table" else "log"


def _where(relation: Relation) -> str:
    return "table properties (database, schema, table)" if relation.kind == "table" else "'topic'"
