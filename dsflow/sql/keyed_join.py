"""A regular join of two streams that the same query aggregates or ranks (Nexmark q4, q9):

    SELECT A.id, MAX(B.price) FROM auction A, bid B
    WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires GROUP BY A.id
    SELECT ... FROM (SELECT A.*, B.price, ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC) AS rn
                     FROM auction A, bid B WHERE A.id = B.auction AND ...) WHERE rn <= 1

Spark's stream-stream join appends only, and Spark runs it in append mode only, where an aggregation without a
window never writes a group; so it cannot feed a GROUP BY or a ranking that changes as rows arrive. Such a join
runs as a join of changelogs instead (adapters/spark/changelog_join.py): each stream record is a row of its own,
keyed by its place in the source (partition, offset), never updated nor deleted. The join's state, keyed by the ON
columns, holds every record of both sides, as a regular join's does (DSF-W001: it grows without bound); the
aggregation (adapters/spark/retract.py) or the ranking (adapters/spark/topn.py) reads the joined rows as a
changelog, so a group's MAX or an auction's top bid is updated as bids arrive.

ON is the equalities of a column of each side (the join key); its other conditions (a comma join's WHERE, like the
BETWEEN above) are applied to the joined rows as WHERE. Only two streams, INNER; more are refused (DSF-E045).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.core.model import ChangelogJoin, RegularJoin
from dsflow.errors import Diagnostic
from dsflow.sql.changelog_join import _pair, conjuncts

Report = Callable[[Diagnostic], None]


def applies(select: exp.Select, ranked: bool) -> bool:
    """Whether the SELECT aggregates (GROUP BY, or an aggregate) or ranks (ROW_NUMBER top-N) its regular join."""
    return ranked or select.args.get("group") is not None or select.find(exp.AggFunc) is not None


def check_two(select: exp.Select, tables: list[exp.Table], where, report: Report) -> bool:
    """Two streams only; DSF-E045 at the third relation's join otherwise."""
    if len(tables) == 2:
        return True
    report(Diagnostic("DSF-E045", "aggregating or ranking a regular join of more than two streams is not supported",
                      where(select.args["joins"][1]), hint="join two streams in the query that aggregates or ranks; "
                      "write the other joins into a stream first (CREATE STREAM ... AS SELECT)"))
    return False


def refuse_ranked(select: exp.Select, tables: list[exp.Table], found: dict, where, report: Report) -> None:
    """DSF-E045 at the join: a ROW_NUMBER over a join ranks a regular join of two streams only, not an interval,
    temporal or changelog join."""
    kinds = " and a ".join(found[id(t)].kind for t in tables)
    report(Diagnostic("DSF-E045", f"ROW_NUMBER over this join (of a {kinds}) is not supported: it ranks a regular "
                      "join of two streams (INNER, no WITHIN) only", where(select.args["joins"][0]),
                      hint="write the join into a stream or changelog (CREATE ... AS SELECT), and rank that relation "
                      "in another query"))


def keyed_join(qualified: exp.Select, aliases: tuple[str, str], where,
               report: Report) -> tuple[ChangelogJoin, RegularJoin] | None:
    """The join as a join of changelogs (streams=True), its ON cut to the equalities of both sides (the rest ANDed
    into WHERE, in place), and the RegularJoin its warning (DSF-W001) names; None if reported."""
    join = qualified.args["joins"][0]
    pairs: list[tuple[str, str]] = []
    equalities: list[exp.Expr] = []
    rest: list[exp.Expr] = []
    for term in conjuncts(join.args["on"]):
        pair = _pair(term, *aliases)
        if pair is None:
            rest.append(term)
        else:
            pairs.append(pair)
            equalities.append(term.copy())
    if not pairs:
        report(Diagnostic("DSF-E045", "a join needs an equality between the two relations in ON", where(join),
                          hint=f"e.g. ON {aliases[0]}.userid = {aliases[1]}.userid"))
        return None
    join.set("on", exp.and_(*equalities))
    if rest:
        where_ = qualified.args.get("where")
        condition = exp.and_(*[exp.paren(t.copy()) if isinstance(t, exp.Or) else t.copy() for t in rest])
        qualified.set("where", exp.Where(this=exp.and_(where_.this, condition) if where_ is not None else condition))
    found = ChangelogJoin(left=aliases[0], right=aliases[1], side="inner", keyed_by_left=False, left_key=(),
                          left_keys=tuple(a for a, _ in pairs), right_keys=tuple(b for _, b in pairs), streams=True)
    return found, RegularJoin(stream=aliases[1], location=where(join))
