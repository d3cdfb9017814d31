"""Checks for the stream-changelog (temporal) join: `FROM stream s [LEFT] JOIN changelog c ON s.k = c.pk`.

Each stream record joins the changelog's row for its key as of the record's event time, so the changelog
must be the right side, the ON clause must be equalities that cover the changelog's whole primary key,
and there is no WITHIN. See docs/concepts.md (temporal joins).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.core.model import Relation, TemporalJoin
from dsflow.errors import Diagnostic
from dsflow.sql.proctime import lookup_system_time

Report = Callable[[Diagnostic], None]
HINT = "write FROM stream s [LEFT] JOIN changelog c ON s.col = c.primary_key_col"


def check_shape(join: exp.Join, side: str, left: Relation, right: Relation, where, report: Report) -> bool:
    """False (reported) unless `left` is a stream, `right` a changelog, the join INNER or LEFT, and no WITHIN
    (two changelogs: sql/changelog_join.py)."""
    if left.kind == "changelog":
        report(Diagnostic("DSF-E131", f"the changelog '{left.fqn}' must be the right side of a temporal join",
                          where(join), hint="swap the relations: " + HINT))
        return False
    if side not in ("INNER", "LEFT"):
        report(Diagnostic("DSF-E131", f"{side} JOIN with a changelog is not supported", where(join),
                          hint="a temporal join is INNER or LEFT: " + HINT))
        return False
    if join.args.get("within") is not None:
        report(Diagnostic("DSF-E131", "a join with a changelog takes no WITHIN", where(join),
                          hint="each stream record joins the changelog's row as of its event time; remove WITHIN"))
        return False
    return True


def system_time(tables: list[exp.Table], found: dict, options: dict[int, dict], temporal: bool, where,
                report: Report) -> bool:
    """`JOIN changelog c FOR SYSTEM_TIME AS OF s.col`: the stream's records join the changelog as of `col`, so `col`
    becomes the stream's event time (its source 'timestamp'), and the clause is taken off the tree (also on the
    changelogs chained after a temporal join: sql/join_chain.py, all AS OF the same column). Anywhere else,
    or AS OF anything but a column of the stream, it is DSF-E155 (False): never accepted and ignored."""
    ok = True
    for index, table in enumerate(tables):
        version = table.args.get("version")
        if version is None:
            continue
        table.set("version", None)
        column = version.expression
        stream = found[id(tables[0])]
        changelog = index > 0 and found[id(table)].kind == "changelog"  # the first join's or a chained one's
        if temporal and changelog and lookup_system_time(version):  # processing time: sql/proctime.py
            options[id(table)]["lookup"] = True
            continue
        problem = _system_time_problem(version, changelog, temporal, tables[0].alias_or_name, stream)
        chosen = options[id(tables[0])]
        if problem is None and chosen.get("timestamp", column.name).lower() != column.name.lower():
            problem = (f"FOR SYSTEM_TIME AS OF {column.sql()} names another event time than the stream's "
                       f"'timestamp' = '{chosen['timestamp']}'")
        if problem is not None:
            report(Diagnostic("DSF-E155", problem, where(version.expression) if column is not None else where(table),
                              hint=f"write {HINT} FOR SYSTEM_TIME AS OF s.<a TIMESTAMP or BIGINT column of the "
                                   "stream>, or leave it out: the stream's event time is used"))
            ok = False
            continue
        chosen["timestamp"] = stream.column(column.name).name
    return ok


def _system_time_problem(version: exp.Expr, changelog: bool, temporal: bool, stream_alias: str,
                         stream: Relation) -> str | None:
    column = version.expression
    if not temporal or not changelog:
        return "FOR SYSTEM_TIME AS OF applies only to the changelog of a temporal join (stream JOIN changelog)"
    if str(version.this).upper() != "TIMESTAMP" or str(version.args.get("kind")).upper() != "AS OF":
        return f"only FOR SYSTEM_TIME AS OF is supported, got FOR {version.this} {version.args.get('kind')}"
    if not isinstance(column, exp.Column) or column.table not in ("", stream_alias) \
            or stream.column(column.name) is None:
        return (f"FOR SYSTEM_TIME AS OF must name a column of the stream '{stream_alias}', got "
                f"{column.sql() if column is not None else '?'}")
    return None


def temporal_join(qualified: exp.Select, aliases: tuple[str, str], changelog: Relation, side: str, where,
                  report: Report) -> TemporalJoin | None:
    """The join's keys from ON: equalities `s.col = c.pk` covering the changelog's primary key, nothing else."""
    join = qualified.args["joins"][0]
    stream_alias, changelog_alias = aliases
    pairs: dict[str, str] = {}
    for term in _conjuncts(join.args["on"]):
        pair = _key_pair(term, stream_alias, changelog_alias)
        if pair is None:
            report(Diagnostic("DSF-E132", f"a temporal join's ON may only equate a column of '{stream_alias}' with "
                              f"a key column of '{changelog_alias}', got {term.sql()}", where(term),
                              hint="move other conditions to WHERE"))
            return None
        pairs[pair[1].lower()] = pair[0]
    key = [k for k in changelog.primary_key]
    if set(pairs) != {k.lower() for k in key}:
        report(Diagnostic("DSF-E132", f"a temporal join must be ON the primary key ({', '.join(key)}) of "
                          f"'{changelog.fqn}'", where(join),
                          hint=f"e.g. ON {stream_alias}.{key[0]} = {changelog_alias}.{key[0]}"))
        return None
    return TemporalJoin(stream=stream_alias, changelog=changelog_alias, side="left" if side == "LEFT" else "inner",
                        stream_keys=tuple(pairs[k.lower()] for k in key), changelog_keys=tuple(key))


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _key_pair(term: exp.Expr, stream: str, changelog: str) -> tuple[str, str] | None:
    """(stream column, changelog column) of `s.a = c.b` (either order), else None."""
    if not isinstance(term, exp.EQ):
        return None
    sides = [term.this, term.expression]
    if not all(isinstance(s, exp.Column) for s in sides):
        return None
    by_table = {s.table: s.name for s in sides}
    if set(by_table) != {stream, changelog}:
        return None
    return by_table[stream], by_table[changelog]
