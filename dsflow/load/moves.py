"""`moved:` entries (Terraform's moved blocks): a deployed relation or query now declared at another address.

An address is written as the plan prints it (`relation.db.schema.name`, `query.db.schema.name`) or, for a
relation, as `--allow-destroy` takes it (`db.schema.name`, or `schema.name` / `name` in the project's defaults).
Checked once the project's relations and queries are known: DSF-E850..DSF-E855.
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core.address import Kind
from dsflow.core.model import Move
from dsflow.errors import Diagnostic, Location
from dsflow.core.suggest import did_you_mean

MOVABLE = (Kind.RELATION.value, Kind.QUERY.value)
HINT = "write relation.<db>.<schema>.<name> or query.<db>.<schema>.<name> (see docs/project.md, 'moved')"


def resolve_moves(entries: list[tuple[str, str, Location]], declared: set[str],
                  qualify: Callable[[list[str]], str]) -> tuple[list[Move], list[Diagnostic]]:
    """The valid moves, and a diagnostic for every entry that is not one."""
    problems: list[Diagnostic] = []
    parsed: list[Move] = []
    for source, target, where in entries:
        old, new = parse_address(source, qualify), parse_address(target, qualify)
        bad = [(key, text) for key, text, address in (("from", source, old), ("to", target, new)) if address is None]
        for key, text in bad:
            problems.append(Diagnostic("DSF-E850", f"moved: '{key}: {text}' is not the address of a relation or "
                                       "a query", where, hint=HINT))
        if not bad:
            parsed.append(Move(from_address=old, to_address=new, location=where))
    targets = {m.to_address: m for m in parsed}
    moves = []
    for move in parsed:
        problem = _chained(move, targets) or _entry_problem(move, declared)
        if problem is not None:
            problems.append(problem)
        else:
            moves.append(move)
    clashes = _clashes(moves)
    return ([] if clashes else moves), problems + clashes


def parse_address(text: str, qualify: Callable[[list[str]], str]) -> str | None:
    kind, _, rest = str(text).partition(".")
    if kind in MOVABLE:
        name = rest
    elif kind in {k.value for k in Kind}:
        return None
    else:
        kind, name = Kind.RELATION.value, str(text)
    parts = name.split(".")
    if not 1 <= len(parts) <= 3 or not all(parts):
        return None
    return f"{kind}.{qualify(parts)}"


def _chained(move: Move, targets: dict[str, Move]) -> Diagnostic | None:
    """An entry whose 'from' is another entry's 'to' (A -> B, B -> C, or a cycle): each move names the address
    deployed, and the next plan has nothing at B to move."""
    earlier = targets.get(move.from_address)
    if earlier is None:
        return None
    return Diagnostic("DSF-E853", f"moved: '{move.from_address}' is moved to (at {earlier.location}) and moved "
                      "from: a chain or a cycle of moves", move.location,
                      hint="a cycle moves nothing: remove its entries" if earlier.from_address == move.to_address
                      else f"move straight from the deployed address to the last one: 'from: {earlier.from_address}', "
                           f"'to: {move.to_address}'")


def _entry_problem(move: Move, declared: set[str]) -> Diagnostic | None:
    old, new, where = move.from_address, move.to_address, move.location
    if new not in declared:
        return Diagnostic("DSF-E851", f"moved: 'to: {new}' is not declared in the project", where,
                          hint=did_you_mean(new, declared) or "declare it, or remove this moved entry")
    if old in declared:
        return Diagnostic("DSF-E852", f"moved: 'from: {old}' is still declared in the project", where,
                          hint="remove or rename its declaration: a moved entry is for an address that left the "
                               "project")
    if old.partition(".")[0] != new.partition(".")[0]:
        return Diagnostic("DSF-E855", f"moved: '{old}' and '{new}' are of different kinds", where,
                          hint="a relation moves to a relation, a query to a query")
    return None


def _clashes(moves: list[Move]) -> list[Diagnostic]:
    """Two entries to one address, or from one address (DSF-E854)."""
    problems: list[Diagnostic] = []
    for key, word in (("to_address", "to"), ("from_address", "from")):
        first: dict[str, Move] = {}
        for move in moves:
            address = getattr(move, key)
            if address in first:
                problems.append(Diagnostic("DSF-E854", f"moved: two entries have '{word}: {address}'",
                                           move.location, hint=f"the other one is at {first[address].location}; "
                                                               "keep one"))
            first.setdefault(address, move)
    return problems
