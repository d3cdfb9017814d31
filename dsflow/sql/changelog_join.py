"""Checks for a join of two changelogs: `FROM a [INNER | LEFT | FULL] JOIN b ON a.x = b.y [AND ...]`.

The result is a changelog (adapters/spark/changelog_join.py): its rows are upserted and deleted as rows of either
side change. Its primary key is decided as Flink derives the unique key of a join:

    ON covers the right's whole primary key, INNER or LEFT   each left row joins at most one right row:
                                                             keyed by the left's primary key (a foreign-key join)
    otherwise (FULL, or a many-to-many join)                 keyed by both sides' primary keys (a NULL-padded row
                                                             has NULLs for the missing side's key)

The key columns must be selected as plain columns (DSF-E192); ON is equalities of a column of each side only
(DSF-E190); the result is a changelog or a materialized view, never a stream (DSF-E191). A GROUP BY (or an
aggregate without one) over the join in the same query is keyed by its groups instead: the joined rows are
aggregated with retractions in the same Spark query (adapters/spark/retract.py over the joined view).

More changelogs may follow, a left-deep chain (`check_chain`, `chained_joins`):

    FROM a JOIN b ON a.x = b.y [INNER | LEFT | FULL] JOIN c ON a.z = c.pk [AND b.w = c.v] ...

Each later join is the rows so far (the left, keyed by the previous join's output key) joined with one more
changelog, ON equalities of a column of any earlier relation with a column of it. The key rule above applies to each
step with the rows so far as the left: a step ON the changelog's whole primary key, INNER or LEFT, keeps the key;
any other step adds the changelog's primary key columns (`result_key`). Only changelogs may follow a join of two
changelogs (DSF-E194).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.core.model import ChainedChangelogJoin, ChangelogJoin, Relation
from dsflow.errors import Diagnostic

Report = Callable[[Diagnostic], None]
CHANGELOG_JOIN = "changelog_join"
SIDES = {"INNER": "inner", "LEFT": "left", "FULL": "full"}


def check_shape(join: exp.Join, side: str, where, report: Report) -> bool:
    """False (reported) for WITHIN or a side other than INNER, LEFT, FULL (RIGHT is refused before)."""
    if join.args.get("within") is not None:
        report(Diagnostic("DSF-E190", "a join of two changelogs takes no WITHIN", where(join),
                          hint="the result holds the current rows of both sides joined; remove WITHIN"))
        return False
    if side not in SIDES:
        report(Diagnostic("DSF-E190", f"{side} JOIN of two changelogs is not supported", where(join),
                          hint="join two changelogs with INNER, LEFT or FULL JOIN"))
        return False
    return True


def changelog_join(qualified: exp.Select, aliases: tuple[str, str], relations: tuple[Relation, Relation],
                   side: str, where, report: Report) -> ChangelogJoin | None:
    """The join's columns from ON and the result's key columns from the SELECT list; None if reported."""
    join = qualified.args["joins"][0]
    pairs = _pairs(join, aliases, where, report)
    if pairs is None:
        return None
    left, right = relations
    covered = {c.lower() for _, c in pairs} >= {k.lower() for k in right.primary_key}
    keyed_by_left = covered and side in ("INNER", "LEFT")
    join_columns = {"left_keys": tuple(a for a, _ in pairs), "right_keys": tuple(b for _, b in pairs)}
    if qualified.args.get("group") or qualified.find(exp.AggFunc):  # aggregated: keyed by its GROUP BY instead
        return ChangelogJoin(left=aliases[0], right=aliases[1], side=SIDES[side], keyed_by_left=keyed_by_left,
                             left_key=(), **join_columns)
    left_key = _selected(qualified, aliases[0], left, where, report)
    right_key = () if keyed_by_left else _selected(qualified, aliases[1], right, where, report)
    if left_key is None or right_key is None:
        return None
    return ChangelogJoin(left=aliases[0], right=aliases[1], side=SIDES[side], keyed_by_left=keyed_by_left,
                         left_key=left_key, right_key=right_key, **join_columns)


def check_chain(joins: list[exp.Join], tables: list[exp.Table], found: dict, where, report: Report) -> bool:
    """The joins after a join of two changelogs (`joins`, with their `tables`): each of a changelog, INNER, LEFT or
    FULL, ON equalities, without WITHIN; False if a problem was reported."""
    for join, table in zip(joins, tables, strict=False):
        relation: Relation = found[id(table)]
        if relation.kind != "changelog":
            report(Diagnostic("DSF-E194", f"only changelogs may be joined after a join of two changelogs, not the "
                              f"{relation.kind.replace('_', ' ')} '{relation.fqn}'", where(join),
                              hint="write the join of the changelogs into a changelog (CREATE CHANGELOG ... AS "
                              "SELECT), then join a stream with it (a temporal join) in another query"))
            return False
        if (join.kind or "").upper() in ("CROSS", "SEMI", "ANTI") or join.args.get("on") is None:
            report(Diagnostic("DSF-E045", f"{(join.kind or 'a').upper()} JOIN without ON is not supported",
                              where(join), hint="join ON an equality of a column of each side, e.g. ON a.id = b.id"))
            return False
        if not check_shape(join, (join.side or "").upper() or "INNER", where, report):
            return False
    return True


def chained_joins(qualified: exp.Select, tables: list[exp.Table], found: dict, where,
                  report: Report) -> tuple[ChainedChangelogJoin, ...] | None:
    """The joins after the first join of two changelogs, in order; None if a problem was reported."""
    aggregated = bool(qualified.args.get("group") or qualified.find(exp.AggFunc))
    steps = []
    for index, join in enumerate(qualified.args["joins"][1:], start=2):
        earlier = [t.alias_or_name for t in tables[:index]]
        alias, changelog = tables[index].alias_or_name, found[id(tables[index])]
        pairs = []
        for term in conjuncts(join.args["on"]):
            pair = chained_pair(term, earlier, alias)
            if pair is None:
                report(Diagnostic("DSF-E190", f"a join of changelogs may only equate a column of an earlier relation "
                                  f"({', '.join(earlier)}) with a column of '{alias}' in ON, got {term.sql()}",
                                  where(term), hint="move other conditions to WHERE (applied to the joined rows)"))
                return None
            pairs.append(pair)
        side = SIDES[(join.side or "").upper() or "INNER"]
        covered = {c.lower() for _, _, c in pairs} >= {k.lower() for k in changelog.primary_key}
        keyed_by_left = covered and side in ("inner", "left")
        right_key = () if keyed_by_left or aggregated else _selected(qualified, alias, changelog, where, report)
        if right_key is None:
            return None
        steps.append(ChainedChangelogJoin(changelog=alias, side=side, left_relations=tuple(p[0] for p in pairs),
                                          left_keys=tuple(p[1] for p in pairs), right_keys=tuple(p[2] for p in pairs),
                                          keyed_by_left=keyed_by_left, right_key=right_key))
    return tuple(steps)


def result_key(join: ChangelogJoin, chain) -> tuple[str, ...]:
    """The output columns keying the result of a join of changelogs and the changelogs chained after it."""
    return join.left_key + join.right_key + tuple(c for step in chain for c in step.right_key)


def chained_pair(term: exp.Expr, earlier: list[str], alias: str) -> tuple[str, str, str] | None:
    """(earlier relation, its column, the changelog's column) of `e.a = c.b` (either order), else None."""
    if not isinstance(term, exp.EQ) or not all(isinstance(s, exp.Column) for s in (term.this, term.expression)):
        return None
    sides = [(s.table, s.name) for s in (term.this, term.expression)]
    mine = [s for s in sides if s[0] == alias]
    other = [s for s in sides if s[0] in earlier]
    if len(mine) != 1 or len(other) != 1:
        return None
    return other[0][0], other[0][1], mine[0][1]


def _pairs(join: exp.Join, aliases: tuple[str, str], where, report: Report) -> list[tuple[str, str]] | None:
    pairs = []
    for term in conjuncts(join.args["on"]):
        pair = _pair(term, *aliases)
        if pair is None:
            report(Diagnostic("DSF-E190", f"a join of two changelogs may only equate a column of '{aliases[0]}' with "
                              f"a column of '{aliases[1]}' in ON, got {term.sql()}", where(term),
                              hint="move other conditions to WHERE (applied to the joined rows)"))
            return None
        pairs.append(pair)
    return pairs


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]


def _pair(term: exp.Expr, left: str, right: str) -> tuple[str, str] | None:
    """(left column, right column) of `l.a = r.b` (either order), else None."""
    if not isinstance(term, exp.EQ) or not all(isinstance(s, exp.Column) for s in (term.this, term.expression)):
        return None
    by_table = {s.table: s.name for s in (term.this, term.expression)}
    if set(by_table) != {left, right}:
        return None
    return by_table[left], by_table[right]


def _selected(qualified: exp.Select, alias: str, relation: Relation, where,
              report: Report) -> tuple[str, ...] | None:
    """The output names of the relation's primary key columns, each selected as a plain column; None if reported."""
    names = []
    for key in relation.primary_key:
        output = next((p.alias_or_name for p in qualified.selects if isinstance(column := p.unalias(), exp.Column)
                       and column.table == alias and column.name.lower() == key.lower()), None)
        if output is None:
            report(Diagnostic("DSF-E192", f"the join's result is keyed by the primary key of '{relation.fqn}', so "
                              f"{alias}.{key} must be selected", where(qualified),
                              hint=f"add {alias}.{key} to the SELECT list (a FULL or many-to-many join is keyed by "
                              "both sides' primary keys, a join ON the right's whole key by the left's)"))
            return None
        names.append(output)
    return tuple(names)


def check_sink(what: str, fqn: str, location, report: Report) -> bool:
    """The result of a changelog join is a changelog: CREATE CHANGELOG or MATERIALIZED VIEW writes it (DSF-E191)."""
    if what in ("changelog", "materialized view"):
        return True
    report(Diagnostic("DSF-E191", f"'{fqn}' joins two changelogs, so its result is a changelog (rows are updated "
                      f"and deleted): {what} cannot hold it", location,
                      hint="use CREATE CHANGELOG ... AS SELECT (or CREATE MATERIALIZED VIEW)"))
    return False
