"""`removed:` entries (Terraform's removed blocks): a deployed relation or query dsflow stops managing, kept as it is.

An address is written as for `moved:` (load/moves.py). Checked once the project's relations and queries are known:
DSF-E856..DSF-E858. An entry whose address is not deployed (forgotten already, or never applied) plans nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core.model import Move, Removal
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
