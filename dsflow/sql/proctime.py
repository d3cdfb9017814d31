"""Processing time, `PROCTIME()` (Flink's; the published Nexmark q12 and q13).

`PROCTIME()` is a column of a view, a CTE or a subquery read in FROM: `SELECT *, PROCTIME() AS p_time FROM bid`.
On Spark a row's processing time is the start of the micro-batch that reads it (Spark's batch timestamp, which
`current_timestamp()` gives in a streaming query): every row of a micro-batch has the same one.

- A window over it, `TABLE(TUMBLE(TABLE v, DESCRIPTOR(p_time), INTERVAL '10' SECOND))`, is a processing-time
  window (`Window.processing_time`): the rows of a micro-batch started at T fall in the window of T (TUMBLE: the
  10-second window, aligned to the epoch, that holds T). Its watermark is T itself (delay 0: no row is late), so a
  window is written once, when a micro-batch starts at or after its end (one with new rows: Spark moves a watermark
  by the rows it reads, then runs a batch without rows that writes what the watermark closed).
- A temporal join `JOIN c FOR SYSTEM_TIME AS OF v.p_time` is a processing-time one (`Source.lookup`): each
  micro-batch joins its rows with the changelog's newest version, read whole when the micro-batch runs (Spark's
  stream-static join); ON may be any condition (`ON mod(B.auction, 10000) = S.key`).

A subquery in FROM or JOIN that projects and filters one relation and selects PROCTIME() is read as a CTE (inlined,
sql/ctes.py). PROCTIME() anywhere else is DSF-E262, and so is a processing-time SESSION window, a processing-time
join of more than two relations, or one whose result is aggregated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sqlglot import exp

from dsflow.errors import Diagnostic
from dsflow.sql.ctes import _problem as cte_problem
from dsflow.sql.dialect import window_call
from dsflow.sql.flink_windows import FLINK

Report = Callable[[Diagnostic], None]
NAME = "PROCTIME"
HINT = ("PROCTIME() is a column of a view, a CTE or a subquery (SELECT *, PROCTIME() AS p_time FROM rel), read as a "
        "TUMBLE or HOP window's time (DESCRIPTOR(p_time)) or by a join with a changelog FOR SYSTEM_TIME AS OF x.p_time")


def is_proctime(node: exp.Expr | None) -> bool:
    """`PROCTIME()`."""
    return isinstance(node, exp.Anonymous) and node.name.upper() == NAME and not node.expressions


def prepare(select: exp.Expr) -> None:
    """Before CTEs are inlined: subqueries that select PROCTIME() become CTEs, and the Flink windows over a CTE's
    PROCTIME() column are marked as processing-time windows."""
    if not isinstance(select, exp.Select) or not any(is_proctime(n) for n in select.find_all(exp.Anonymous)):
        return
    _subqueries_as_ctes(select)
    with_ = select.args.get("with_")
    if with_ is None:
        return
    timed = {cte.alias_or_name.lower(): {p.alias_or_name.lower() for p in cte.this.selects if is_proctime(p.unalias())}
             for cte in with_.expressions if isinstance(cte.this, exp.Select)}
    for table in select.find_all(exp.Table):
        flink, call = table.meta.get(FLINK), window_call(table)
        if flink is not None and call is not None and flink.time.name.lower() in timed.get(call.relation.name.lower(),
                                                                                          ()):
            table.meta[FLINK] = replace(flink, processing=True)


def _subqueries_as_ctes(select: exp.Select) -> None:
    items = [select.args["from_"].this] if select.args.get("from_") else []
    items += [j.this for j in select.args.get("joins") or ()]
    ctes: list[exp.CTE] = []
    for item in items:
        if not isinstance(item, exp.Subquery) or not any(is_proctime(p.unalias()) for p in item.this.selects
                                                         if isinstance(item.this, exp.Select)):
            continue
        name = f"__proctime_{len(ctes)}"
        cte = exp.CTE(this=item.this.copy(), alias=exp.TableAlias(this=exp.to_identifier(name)))
        if cte_problem(cte) is not None:
            continue
        ctes.append(cte)
        item.replace(exp.Table(this=exp.to_identifier(name),
                               alias=exp.TableAlias(this=exp.to_identifier(item.alias_or_name))))
    if ctes:
        existing = select.args.get("with_")
        select.set("with_", exp.With(expressions=[*(existing.expressions if existing is not None else []), *ctes]))


def lookup_system_time(version: exp.Expr) -> bool:
    """`FOR SYSTEM_TIME AS OF <PROCTIME()>` (a PROCTIME() column, once inlined)."""
    return str(version.this).upper() == "TIMESTAMP" and str(version.args.get("kind")).upper() == "AS OF" \
        and is_proctime(version.expression)


def check_rest(select: exp.Expr, where, report: Report) -> bool:
    """DSF-E262 for a PROCTIME() left where dsflow does not take it (after windows and joins took theirs)."""
    left = [n for n in select.find_all(exp.Anonymous) if is_proctime(n) and not n.find_ancestor(exp.Version)]
    for node in left[:1]:
        report(Diagnostic("DSF-E262", "PROCTIME() is supported only as a window's time column or a temporal join's "
                          "FOR SYSTEM_TIME AS OF", where(node), hint=HINT))
    return not left


def check_lookup(tables: int, aggregated: bool, place, report: Report) -> bool:
    """A processing-time join joins one stream with one changelog, and its rows are not aggregated (DSF-E262)."""
    problem = "a processing-time join (FOR SYSTEM_TIME AS OF PROCTIME()) of more than two relations" if tables > 2 \
        else "an aggregation of a processing-time join (FOR SYSTEM_TIME AS OF PROCTIME())" if aggregated else None
    if problem is not None:
        report(Diagnostic("DSF-E262", f"{problem} is not supported", place,
                          hint="join the stream with one changelog FOR SYSTEM_TIME AS OF PROCTIME() into a stream of "
                               "its own, and aggregate or join that"))
    return problem is None
