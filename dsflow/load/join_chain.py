"""Joins of more than two relations: a left-deep chain, each join's left input the result of the joins before it.

    FROM stream s [LEFT] JOIN changelog a ON s.x = a.pk [LEFT] JOIN changelog b ON s.y = b.pk ...
    FROM stream s [LEFT] JOIN stream t WITHIN 5 MINUTES ON ... [LEFT] JOIN changelog b ON t.y = b.pk ...

The first join is a temporal join or an interval join (load/temporal.py, load/select.py); every later relation is a
changelog joined, as a temporal join, ON its whole primary key equated with columns of one earlier relation. The
result is a stream (adapters/spark/join_chain.py). Refused, each at the join's file:line:

    DSF-E194  a join of two changelogs followed or preceded by more joins
    DSF-E195  a second stream joined WITHIN (two interval joins in one query)
    DSF-E196  a stream joined after a temporal join
    DSF-E197  a later join's ON equating the changelog's key with columns of several earlier relations
    DSF-E198  a FULL interval join followed by more joins
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.core.model import Relation, TemporalJoin
from dsflow.errors import Diagnostic
from dsflow.load.temporal import HINT, check_shape

Report = Callable[[Diagnostic], None]
SPLIT = "write the first joins into a stream (CREATE STREAM ... AS SELECT), then join that stream in another query"


def check_chain(joins: list[exp.Join], tables: list[exp.Table], found: dict, where, report: Report) -> bool:
    """The shape of each join after the first: a changelog joined INNER or LEFT without WITHIN, after a temporal or
    a non-FULL interval join; False if a problem was reported."""
    first, second = found[id(tables[0])], found[id(tables[1])]
    if first.kind == "changelog" and second.kind == "changelog":
        report(Diagnostic("DSF-E194", "a join of two changelogs cannot be chained with more joins", where(joins[1]),
                          hint="write the join of the two changelogs into a changelog, then join a stream with it "
                          "(a temporal join) in another query"))
        return False
    if first.kind != "stream" or second.kind not in ("stream", "changelog"):
        return True  # the first join's own checks report it (load/select.py, load/temporal.py)
    interval = second.kind == "stream"
    if interval and (joins[0].side or "").upper() == "FULL":
        report(Diagnostic("DSF-E198", "a FULL interval join cannot be followed by more joins", where(joins[1]),
                          hint="use INNER or LEFT for the interval join, or " + SPLIT))
        return False
    return all(_later_join(join, table, first, found, interval, where, report)
               for join, table in zip(joins[1:], tables[2:]))


def _later_join(join: exp.Join, table: exp.Table, first: Relation, found: dict, interval: bool, where,
                report: Report) -> bool:
    relation: Relation = found[id(table)]
    side = (join.side or "").upper() or "INNER"
    if (join.kind or "").upper() in ("CROSS", "SEMI", "ANTI") or join.args.get("on") is None:
        report(Diagnostic("DSF-E045", f"{(join.kind or 'a').upper()} JOIN without ON is not supported", where(join),
                          hint="join ON an equality of a column of each side, e.g. ON a.userid = b.userid"))
        return False
    if relation.kind == "stream":
        code, what = ("DSF-E195", "a second interval join (two streams joined WITHIN)") if interval else \
            ("DSF-E196", "a stream joined after a temporal join")
        report(Diagnostic(code, f"{what} in one query is not supported: '{relation.fqn}'", where(join),
                          hint=SPLIT + "; after the first join only changelogs can be joined: " + HINT))
        return False
    if relation.kind != "changelog":
        report(Diagnostic("DSF-E045", f"joins with a {relation.kind} are not supported", where(join),
                          hint="after the first join only changelogs can be joined: " + HINT))
        return False
    return check_shape(join, side, first, relation, where, report)


def chained_joins(qualified: exp.Select, tables: list[exp.Table], found: dict, where,
                  report: Report) -> tuple[TemporalJoin, ...] | None:
    """The temporal joins after the first join, in order; None if a problem was reported."""
    chain = []
    for index, join in enumerate(qualified.args["joins"][1:], start=2):
        earlier = [t.alias_or_name for t in tables[:index]]
        step = _chained(join, earlier, tables[index].alias_or_name, found[id(tables[index])], where, report)
        if step is None:
            return None
        chain.append(step)
    return tuple(chain)


def _chained(join: exp.Join, earlier: list[str], alias: str, changelog: Relation, where,
             report: Report) -> TemporalJoin | None:
    """One later join's keys: ON equalities `e.col = c.pk` covering the changelog's primary key, `e` one earlier
    relation."""
    pairs: dict[str, tuple[str, str]] = {}
    owners: set[str] = set()
    for term in _conjuncts(join.args["on"]):
        pair = _pair(term, earlier, alias)
        if pair is None:
            report(Diagnostic("DSF-E132", f"a temporal join's ON may only equate a column of an earlier relation "
                              f"({', '.join(earlier)}) with a key column of '{alias}', got {term.sql()}",
                              where(term), hint="move other conditions to WHERE"))
            return None
        pairs[pair[2].lower()] = pair[:2]
        owners.add(pair[0])
    key = list(changelog.primary_key)
    if set(pairs) != {k.lower() for k in key}:
        report(Diagnostic("DSF-E132", f"a temporal join must be ON the primary key ({', '.join(key)}) of "
                          f"'{changelog.fqn}'", where(join),
                          hint=f"e.g. ON {earlier[0]}.{key[0]} = {alias}.{key[0]}"))
        return None
    if len(owners) > 1:
        report(Diagnostic("DSF-E197", f"the key of '{alias}' is equated with columns of several relations "
                          f"({', '.join(sorted(owners))})", where(join),
                          hint="take every key column from one earlier relation, or compute the key in an "
                          "upstream query"))
        return None
    return TemporalJoin(stream=owners.pop(), changelog=alias, side="left" if (join.side or "").upper() == "LEFT"
                        else "inner", stream_keys=tuple(pairs[k.lower()][1] for k in key), changelog_keys=tuple(key))


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _pair(term: exp.Expr, earlier: list[str], alias: str) -> tuple[str, str, str] | None:
    """(earlier relation, its column, changelog column) of `e.a = c.b` (either order), else None."""
    if not isinstance(term, exp.EQ) or not all(isinstance(s, exp.Column) for s in (term.this, term.expression)):
        return None
    sides = [(s.table, s.name) for s in (term.this, term.expression)]
    mine = [s for s in sides if s[0] == alias]
    other = [s for s in sides if s[0] in earlier]
    if len(mine) != 1 or len(other) != 1:
        return None
    return other[0][0], other[0][1], mine[0][1]
