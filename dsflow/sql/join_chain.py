"""Joins of more than two relations: a left-deep chain, each join's left input the result of the joins before it.

    FROM stream s [LEFT] JOIN changelog a ON s.x = a.pk [LEFT] JOIN changelog b ON s.y = b.pk ...
    FROM stream s [LEFT] JOIN stream t WITHIN 5 MINUTES ON ... [LEFT] JOIN stream u WITHIN 1 MINUTE ON ...
      [LEFT] JOIN changelog b ON t.y = b.pk ...
    FROM changelog a [LEFT | FULL] JOIN changelog b ON ... [LEFT | FULL] JOIN changelog c ON ...

    FROM stream s JOIN stream t ON s.x = t.x JOIN stream u ON u.y = s.y ...       (regular joins: no WITHIN)
    FROM stream s, stream t WHERE s.x = t.x AND ...           (a regular join: its WHERE is its ON, `comma_join`)

The first join is a temporal join, an interval join or a regular join (sql/temporal.py, sql/select.py). A regular
join of streams (INNER, ON an equality, without WITHIN) joins every pair of records with equal keys, whenever either
arrives: Spark's stream-stream inner join without a time bound, which keeps both sides' rows in its state for ever
(no watermark: no record is late); after it, more streams may be joined the same way only (RegularJoin; the query
is the SELECT as written, adapters/spark/translate.py). After an interval join,
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
    DSF-E199  a LEFT or FULL join of streams without WITHIN (Spark writes an unmatched row only once the watermark
              passes the join's time bound: without one, never)
    DSF-E045  a later stream joined RIGHT, or without an equality with an earlier relation in ON; joins of streams
              with and without WITHIN in one query; a changelog joined after a regular join
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.core.model import IntervalJoin, RegularJoin, Relation, TemporalJoin
from dsflow.errors import Diagnostic, Location, Severity
from dsflow.sql.changelog_join import chained_pair, conjuncts
from dsflow.sql.changelog_join import check_chain as changelog_chain
from dsflow.sql.dialect import MAX_MILLISECONDS, WITHIN, duration_text, milliseconds, normalized_duration
from dsflow.sql.fields import base_column
from dsflow.sql.temporal import HINT, check_shape

Report = Callable[[Diagnostic], None]
SPLIT = "write the first joins into a stream (CREATE STREAM ... AS SELECT), then join that stream in another query"
AFTER = ("after an interval join, more streams joined [LEFT] JOIN ... WITHIN ... ON, then changelogs; after a "
         "temporal join only changelogs: " + HINT)
REGULAR = "regular"
"""The first join's kind (sql/select.py `_check_join`) for a join of two streams without WITHIN."""
MIXED = ("put WITHIN on every join of streams (interval joins, their state bounded by the watermark) or on none "
         "(regular joins, their state kept for ever); or " + SPLIT)


def within_duration(join: exp.Join, where, report: Report) -> str | None:
    """The normalized WITHIN of a join of two streams that has one ('5 seconds'); None if it is no duration
    (DSF-E032, reported)."""
    within = join.args[WITHIN]
    duration = normalized_duration(duration_text(within))
    if duration is None:
        report(Diagnostic("DSF-E032", f"WITHIN must be a duration like 5 MINUTES, got '{duration_text(within)}'",
                          where(join), hint="units: MILLISECONDS, SECONDS, MINUTES, HOURS, DAYS, WEEKS"))
    elif milliseconds(duration) > MAX_MILLISECONDS:
        report(Diagnostic("DSF-E032", f"WITHIN {duration_text(within)} is longer than Spark's longest interval "
                          f"({MAX_MILLISECONDS:,} milliseconds)", where(join),
                          hint="bound the join by a duration Spark can hold, e.g. WITHIN 365 DAYS"))
        return None
    return duration


def comma_join(select: exp.Select, tables: list[exp.Table], found: dict) -> None:
    """`FROM a, b WHERE a.k = b.k AND ...` of two streams (Nexmark q4, q9) becomes `FROM a JOIN b ON a.k = b.k AND
    ...`, in place: the WHERE of a cross join is the ON of an inner join. Anything else is left as it is."""
    joins, condition = select.args.get("joins") or [], select.args.get("where")
    if len(joins) != 1 or len(tables) != 2 or condition is None or any(found[id(t)].kind != "stream" for t in tables):
        return
    join = joins[0]
    if (join.kind or "").upper() != "CROSS" or join.side or join.args.get("on") is not None \
            or join.args.get(WITHIN) is not None:
        return
    left, right = (t.alias_or_name.lower() for t in tables)
    for term in conjuncts(condition.this):
        sides = {c.table.lower() for c in map(base_column, (term.this, term.expression)) if c is not None} \
            if isinstance(term, exp.EQ) else set()
        if sides == {left, right}:
            join.set("kind", None)
            join.set("on", condition.this)
            select.set("where", None)
            return


def regular_side(join: exp.Join, side: str, where, report: Report) -> bool:
    """A join of two streams without WITHIN is a regular join if INNER; False (DSF-E199, reported) if LEFT or FULL."""
    if side == "INNER":
        return True
    report(Diagnostic("DSF-E199", f"a {side} JOIN of two streams needs WITHIN: Spark writes a row that found no match "
                      "(NULLs for the other side) only once the watermark passes the join's time bound, and without "
                      "WITHIN there is none", where(join),
                      hint=f"bound it, e.g. {side} JOIN b WITHIN 1 HOUR ON ... (unmatched rows come out once the "
                      "watermark passes the bound); or join INNER without WITHIN (a regular join: every row of both "
                      "sides is kept in state for ever)"))
    return False


def check_chain(joins: list[exp.Join], tables: list[exp.Table], found: dict, where, report: Report) -> bool:
    """The shape of each join after the first: streams joined INNER or LEFT WITHIN after a non-FULL interval join,
    then changelogs joined INNER or LEFT without WITHIN; False if a problem was reported."""
    first, second = found[id(tables[0])], found[id(tables[1])]
    if first.kind == "changelog" and second.kind == "changelog":  # more changelogs (sql/changelog_join.py)
        return changelog_chain(joins[1:], tables[2:], found, where, report)
    if first.kind != "stream" or second.kind not in ("stream", "changelog"):
        return True  # the first join's own checks report it (sql/select.py, sql/temporal.py)
    if second.kind == "stream" and joins[0].args.get(WITHIN) is None:  # regular joins; the first: select.py
        return all(_later_regular(join, found[id(table)], where, report)
                   for join, table in zip(joins[1:], tables[2:], strict=False))
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
        if join.args.get(WITHIN) is None:
            report(Diagnostic("DSF-E045", f"a stream joined without WITHIN after an interval join is not supported "
                              f"yet: '{relation.fqn}'", where(join), hint=MIXED))
            return False
        return _not_full(join, where(join), report) and within_duration(join, where, report) is not None
    if relation.kind != "changelog":
        report(Diagnostic("DSF-E045", f"joins with a {relation.kind} are not supported", where(join),
                          hint=AFTER))
        return False
    return check_shape(join, side, first, relation, where, report)


def _later_regular(join: exp.Join, relation: Relation, where, report: Report) -> bool:
    """One join after a regular join: another stream, joined INNER without WITHIN, ON an equality (regular_joins)."""
    side = (join.side or "").upper() or "INNER"
    if (join.kind or "").upper() in ("CROSS", "SEMI", "ANTI") or join.args.get("on") is None:
        report(Diagnostic("DSF-E045", f"{(join.kind or 'a').upper()} JOIN without ON is not supported", where(join),
                          hint="join ON an equality of a column of each side, e.g. ON a.userid = b.userid"))
        return False
    if relation.kind != "stream":
        report(Diagnostic("DSF-E045", f"a {relation.kind} joined after a join of streams without WITHIN is not "
                          f"supported yet: '{relation.fqn}'", where(join), hint=SPLIT))
        return False
    if join.args.get(WITHIN) is not None:
        report(Diagnostic("DSF-E045", "joins of streams with and without WITHIN in one query are not supported yet",
                          where(join), hint=MIXED))
        return False
    if side == "RIGHT":
        report(Diagnostic("DSF-E045", "RIGHT JOIN is not supported", where(join),
                          hint="join the streams in another order"))
        return False
    return regular_side(join, side, where, report)


def regular_joins(qualified: exp.Select, tables: list[exp.Table], places: tuple[Location, ...], where,
                  report: Report) -> tuple[RegularJoin, ...] | None:
    """Each regular join's stream and place (`places`, taken before the tree was qualified), in order: ON equates a
    column of it with one of an earlier relation (Spark joins two streams on equal keys only); None if a problem
    was reported."""
    found: list[RegularJoin] = []
    for index, join in enumerate(qualified.args["joins"], start=1):
        earlier = [t.alias_or_name for t in tables[:index]]
        alias = tables[index].alias_or_name
        if not any(_equates(eq, alias, earlier) for eq in join.args["on"].find_all(exp.EQ)):
            report(Diagnostic("DSF-E045", f"a join of the stream '{alias}' needs an equality in ON between it and "
                              f"an earlier relation ({', '.join(earlier)})", where(join),
                              hint=f"e.g. ON {earlier[0]}.id = {alias}.id"))
            return None
        found.append(RegularJoin(stream=alias, location=places[index - 1]))
    return tuple(found)


def _equates(eq: exp.EQ, alias: str, earlier: list[str]) -> bool:
    """`eq` equates a column of `alias` with a column of one of the `earlier` relations."""
    sides = {c.table for c in map(base_column, (eq.this, eq.expression)) if c is not None}
    return alias in sides and len(sides) == 2 and sides <= {alias, *earlier}


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
        if _equates(eq, alias, earlier):
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


def unbounded_state(joins: tuple[RegularJoin, ...], relations: dict[str, str]) -> Diagnostic:
    """DSF-W001, a warning at the first regular join: its state grows without bound. `relations`: alias -> the fqn
    of each relation the query reads."""
    quoted = [f"'{fqn}'" for fqn in relations.values()]
    names = f"{', '.join(quoted[:-1])} and {quoted[-1]}"
    first = joins[0].stream
    return Diagnostic("DSF-W001", f"a join of streams without WITHIN keeps every record of {names} in the query's "
                      "state, for ever: the state grows without bound (Spark's stream-stream join drops rows only "
                      "by a time bound and the watermark)", joins[0].location, severity=Severity.WARNING,
                      hint=f"if a record only matches records near it in event time, bound the join: JOIN "
                      f"{relations[first].split('.')[-1]} AS {first} WITHIN 1 HOUR ON ... (dsflow has no state TTL "
                      "for queries); `dsflow describe QUERY --state-sample 1` shows how many rows the state holds")
