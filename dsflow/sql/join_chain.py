"""Joins of more than two relations: a left-deep chain, each join's left input the result of the joins before it.

    FROM stream s [LEFT] JOIN changelog a ON s.x = a.pk [LEFT] JOIN changelog b ON s.y = b.pk ...
    FROM stream s [LEFT] JOIN stream t WITHIN 5 MINUTES ON ... [LEFT] JOIN stream u WITHIN 1 MINUTE ON ...
      [LEFT] JOIN changelog b ON t.y = b.pk ...
    FROM changelog a [LEFT | FULL] JOIN changelog b ON ... [LEFT | FULL] JOIN changelog c ON ...

The first join is a temporal join or an interval join (sql/temporal.py, sql/select.py). After an interval join,
more streams may be joined, INNER or LEFT, each WITHIN a bound of its event time against the first stream's (the
event time of every joined row) and ON an equality with an earlier relation (IntervalJoin). Then changelogs may be
joined, each as a temporal join ON its whole primary key equated with columns of one earlier relation
(TemporalJoin). The result is a stream (adapters/spark/join_chain.py). A join of two changelogs may be followed
by more changelogs only, joined INNER, LEFT or FULL (sql/changelog_join.py: ChainedChangelogJoin; the result is a
changelog). Refused, each at the join's file:line:

    DSF-E194  a stream (or anything but a changelog) joined after a join of two changelogs
    DSF-E196  a stream joined after a temporal join
    DSF-E197  a later join's ON equating the changelog's key with columns of several earlier relations
    DSF-E198  a FULL interval join in a chain (first or later)
    DSF-E045  a later stream joined RIGHT, without WITHIN, or without an equality with an earlier relation in ON
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.core.model import IntervalJoin, Relation, TemporalJoin
from dsflow.errors import Diagnostic
from dsflow.sql.changelog_join import chained_pair, conjuncts
from dsflow.sql.changelog_join import check_chain as changelog_chain
from dsflow.sql.dialect import MAX_MILLISECONDS, WITHIN, duration_text, milliseconds, normalized_duration
from dsflow.sql.fields import base_column
from dsflow.sql.temporal import HINT, check_shape

Report = Callable[[Diagnostic], None]
SPLIT = "write the first joins into a stream (CREATE STREAM ... AS SELECT), then join that stream in another query"
AFTER = ("after an interval join, more streams joined [LEFT] JOIN ... WITHIN ... ON, then changelogs; after a "
         "temporal join only changelogs: " + HINT)


def within_duration(join: exp.Join, where, report: Report) -> str | None:
    """The normalized WITHIN of a join of two streams ('5 seconds'); None if missing (DSF-E045) or no duration
    (DSF-E032), reported."""
    within = join.args.get(WITHIN)
    if within is None:
        report(Diagnostic("DSF-E045", "a join of two streams needs WITHIN, e.g. JOIN b WITHIN 5 MINUTES ON ...",
                          where(join), hint="WITHIN bounds how far apart in event time two joined records may be"))
        return None
    duration = normalized_duration(duration_text(within))
    if duration is None:
        report(Diagnostic("DSF-E032", f"WITHIN must be a duration like 5 MINUTES, got '{duration_text(within)}'",
                          where(join), hint="units: MILLISECONDS, SECONDS, MINUTES, HOURS, DAYS"))
    elif milliseconds(duration) > MAX_MILLISECONDS:
        report(Diagnostic("DSF-E032", f"WITHIN {duration_text(within)} is longer than Spark's longest interval "
                          f"({MAX_MILLISECONDS:,} milliseconds)", where(join),
                          hint="bound the join by a duration Spark can hold, e.g. WITHIN 365 DAYS"))
        return None
    return duration


def check_chain(joins: list[exp.Join], tables: list[exp.Table], found: dict, where, report: Report) -> bool:
    """The shape of each join after the first: streams joined INNER or LEFT WITHIN after a non-FULL interval join,
    then changelogs joined INNER or LEFT without WITHIN; False if a problem was reported."""
    first, second = found[id(tables[0])], found[id(tables[1])]
    if first.kind == "changelog" and second.kind == "changelog":  # more changelogs (sql/changelog_join.py)
        return changelog_chain(joins[1:], tables[2:], found, where, report)
    if first.kind != "stream" or second.kind not in ("stream", "changelog"):
        return True  # the first join's own checks report it (sql/select.py, sql/temporal.py)
    if second.kind == "stream" and not _not_full(joins[0], where(joins[1]), report):
        return False
    temporal = second.kind == "changelog"
    for join, table in zip(joins[1:], tables[2:], strict=False):
        relation: Relation = found[id(table)]
        if not _later_join(join, relation, first, temporal, where, report):
            return False
        temporal = temporal or relation.kind == "changelog"
    return True


def _not_full(join: exp.Join, at, report: Report) -> bool:
    """False (DSF-E198 at `at`, reported) for a FULL interval join in a chain."""
    if (join.side or "").upper() != "FULL":
        return True
    report(Diagnostic("DSF-E198", "a FULL interval join cannot be chained with more joins", at,
                      hint="use INNER or LEFT for the interval join, or " + SPLIT))
    return False


def _later_join(join: exp.Join, relation: Relation, first: Relation, temporal: bool, where, report: Report) -> bool:
    """One join after the first; `temporal`: a changelog was joined before it."""
    side = (join.side or "").upper() or "INNER"
    if (join.kind or "").upper() in ("CROSS", "SEMI", "ANTI") or join.args.get("on") is None:
        report(Diagnostic("DSF-E045", f"{(join.kind or 'a').upper()} JOIN without ON is not supported", where(join),
                          hint="join ON an equality of a column of each side, e.g. ON a.userid = b.userid"))
        return False
    if relation.kind == "stream" and temporal:
        report(Diagnostic("DSF-E196", f"a stream joined after a temporal join in one query is not supported: "
                          f"'{relation.fqn}'", where(join), hint=SPLIT + "; or join the streams first: " + AFTER))
        return False
    if relation.kind == "stream":
        if side == "RIGHT":
            report(Diagnostic("DSF-E045", "RIGHT JOIN is not supported", where(join),
                              hint="join the streams in another order, with LEFT JOIN"))
            return False
        return _not_full(join, where(join), report) and within_duration(join, where, report) is not None
    if relation.kind != "changelog":
        report(Diagnostic("DSF-E045", f"joins with a {relation.kind} are not supported", where(join),
                          hint=AFTER))
        return False
    return check_shape(join, side, first, relation, where, report)


def chained_joins(qualified: exp.Select, tables: list[exp.Table], found: dict, where,
                  report: Report) -> tuple[IntervalJoin | TemporalJoin, ...] | None:
    """The joins after the first join, in order; None if a problem was reported."""
    chain: list[IntervalJoin | TemporalJoin] = []
    for index, join in enumerate(qualified.args["joins"][1:], start=2):
        earlier = [t.alias_or_name for t in tables[:index]]
        alias, relation = tables[index].alias_or_name, found[id(tables[index])]
        step = _interval(join, earlier, alias, where, report) if relation.kind == "stream" else \
            _chained(join, earlier, alias, relation, where, report)
        if step is None:
            return None
        chain.append(step)
    return tuple(chain)


def _interval(join: exp.Join, earlier: list[str], alias: str, where, report: Report) -> IntervalJoin | None:
    """A later stream's join: its WITHIN (checked by check_chain, taken off the tree: the IntervalJoin holds it),
    and an equality in ON of a column of it with one of an earlier relation."""
    within = normalized_duration(duration_text(join.args.get(WITHIN)))
    join.set(WITHIN, None)
    for eq in join.args["on"].find_all(exp.EQ):
        sides = {c.table for c in map(base_column, (eq.this, eq.expression)) if c is not None}
        if alias in sides and len(sides) == 2 and sides <= {alias, *earlier}:
            return IntervalJoin(stream=alias, side="left" if (join.side or "").upper() == "LEFT" else "inner",
                                within=within)
    report(Diagnostic("DSF-E045", f"a join of the stream '{alias}' needs an equality in ON between it and an "
                      f"earlier relation ({', '.join(earlier)})", where(join),
                      hint=f"e.g. ON {earlier[0]}.id = {alias}.id"))
    return None


def _chained(join: exp.Join, earlier: list[str], alias: str, changelog: Relation, where,
             report: Report) -> TemporalJoin | None:
    """One later join's keys: ON equalities `e.col = c.pk` covering the changelog's primary key, `e` one earlier
    relation."""
    pairs: dict[str, tuple[str, str]] = {}
    owners: set[str] = set()
    for term in conjuncts(join.args["on"]):
        pair = chained_pair(term, earlier, alias)
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
