"""UNION ALL of streams: `SELECT ... FROM a [WHERE ..] UNION ALL SELECT ... FROM b [WHERE ..] ...`.

Each branch is resolved as a query of its own (sql/select.py) and must be a projection/filter of one stream
(DSF-E171); the branches' columns must match in count and type (DSF-E172, at the branch that differs); the
result takes the first branch's column names. UNION without ALL would deduplicate, which needs state
(DSF-E170). The resolved SQL is the branches' SQL joined by UNION ALL, their sources in branch order
(`union_branches`), each keeping its own offsets in the checkpoint (adapters/spark/translate.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sqlglot import exp

from dsflow.core.model import Relation
from dsflow.errors import Diagnostic
from dsflow.sql.cdc import SLOT_KEY
from dsflow.sql.parse import node_location
from dsflow.sql.statements import Analysed, RawStatement

Report = Callable[[Diagnostic], None]


def union_branches(union: exp.Expr) -> list[exp.Expr]:
    """The branches of a (left- or right-nested) UNION, left to right."""
    if isinstance(union, exp.Union):
        return union_branches(union.this) + union_branches(union.expression)
    return [union]


def analyse_union(path: str, st: RawStatement, union: exp.Union, relations: dict[str, Relation], qualify_name,
                  report: Report, analyse) -> Analysed | None:
    """Resolve a UNION ALL of projections/filters of streams; every problem is reported, None if any."""
    where = lambda node: node_location(path, node, st.location)  # noqa: E731
    if not _shape_ok(union, where, report):
        return None
    branches = union_branches(union)
    results: list[Analysed | None] = []
    for branch in branches:
        analysed = analyse(path, replace(st, select=branch), relations, qualify_name, report, copy=False)
        if analysed is not None and not _plain_stream(analysed, relations):
            report(Diagnostic("DSF-E171", "each branch of a UNION ALL must select and filter one stream (no join, "
                              "window, GROUP BY or aggregate, no changelog)", where(branch),
                              hint="write that branch as its own CREATE STREAM ... AS SELECT, and read the "
                                   "resulting stream in the UNION ALL"))
            analysed = None
        results.append(analysed)
    done = [r for r in results if r is not None]
    if len(done) < len(results) or not _columns_match(branches, done, where, report):
        return None
    first = done[0]
    sql = " UNION ALL ".join(r.select_sql for r in done)
    return Analysed(sql, tuple(s for r in done for s in r.sources), first.columns)


def _shape_ok(union: exp.Union, where, report: Report) -> bool:
    for node in union.find_all(exp.Union):
        if node.args.get("distinct"):
            report(Diagnostic("DSF-E170", "UNION (without ALL) would drop duplicate rows, which needs state a "
                              "continuous query does not keep", where(node.expression),
                              hint="write UNION ALL; to keep one row per value, GROUP BY it into a changelog"))
            return False
        for clause, what in (("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET")):
            if node.args.get(clause) is not None:
                report(Diagnostic("DSF-E045", f"{what} on a UNION ALL is not supported",
                                  where(node.args[clause]), hint="remove it: a continuous query has no end to "
                                  "order or limit"))
                return False
    return True


def _plain_stream(analysed: Analysed, relations: dict[str, Relation]) -> bool:
    """A branch reads one stream (not a CDC stream: its events are changes) and only projects and filters it."""
    relation = relations[analysed.sources[0].relation]
    return (len(analysed.sources) == 1 and relation.kind == "stream" and SLOT_KEY not in relation.table_options
            and not analysed.stateful and analysed.window is None)


def _columns_match(branches: list[exp.Expr], results: list[Analysed], where, report: Report) -> bool:
    """DSF-E172 at each branch whose columns differ in count or type from the first branch's."""
    first = results[0].columns
    ok = True
    for number, (branch, analysed) in enumerate(zip(branches, results, strict=False), start=1):
        columns = analysed.columns
        if len(columns) != len(first):
            problem = f"selects {len(columns)} columns, the first branch {len(first)}"
        else:
            differ = [(a, b) for a, b in zip(first, columns, strict=True) if a.type.upper() != b.type.upper()]
            if not differ:
                continue
            a, b = differ[0]
            problem = f"column '{b.name}' is {b.type}, the first branch's '{a.name}' is {a.type}"
        report(Diagnostic("DSF-E172", f"branch {number} of the UNION ALL {problem}", where(branch),
                          hint="select the same number of columns, in the same order and of the same types, in "
                               "every branch (CAST(x AS type) to align a type)"))
        ok = False
    return ok
