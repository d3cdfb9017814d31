"""A stream joined with a windowed aggregation in a subquery (sql/nested.py), bounded in event time:

    SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra                    (Nexmark q7)
    FROM bid B
    JOIN (SELECT MAX(price) AS maxprice, window_end AS dateTime
          FROM TUMBLE(bid, SIZE 10 SECONDS) GROUP BY window_start, window_end) B1
    ON B.price = B1.maxprice
    WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime

The subquery's row of a window is appended once the watermark passes the window's end; Spark joins it with the
stream's rows kept in state, and drops a row of either side once no row of the other side can match it. It can
only do so from a condition between the two sides' event times: the stream's event-time column (its 'timestamp')
between the subquery's window_start or window_end column, plus or minus constant intervals, below and above (in ON
or WHERE: `BETWEEN`, or `>=`/`>` and `<=`/`<`). `bound` finds it, as milliseconds from the window's end; the
conditions stay as written (adapters/spark/nested.py adds Spark's own form of the bound beside them). Without
both sides of it the join's state would grow for ever: DSF-E295.
"""

from __future__ import annotations

from sqlglot import exp

from dsflow.core.model import Window
from dsflow.sql.dialect import milliseconds, normalized_duration

HINT = ("bound the stream's event time by the subquery's window in ON or WHERE, below and above, e.g. WHERE "
        "s.ts BETWEEN w.window_end - INTERVAL '10' SECOND AND w.window_end")


def bound(select: exp.Select, stream: tuple[str, str], window_side: tuple[str, tuple[str, str]],
          window: Window) -> tuple[int, int] | None:
    """(lower, upper): the stream's event time lies between the window's end plus `lower` and plus `upper`
    milliseconds, by the SELECT's conditions (the tightest ones); None if a side is not bounded. `stream`: (its
    alias, its event-time column); `window_side`: (the subquery's alias, its window_start and window_end columns)."""
    lowers: list[int] = []
    uppers: list[int] = []
    for condition in _conjuncts(select):
        if isinstance(condition, exp.Between) and _is(condition.this, *stream):
            lowers += _offset(condition.args.get("low"), window_side, window)
            uppers += _offset(condition.args.get("high"), window_side, window)
        elif isinstance(condition, exp.GTE | exp.GT | exp.LTE | exp.LT):
            big, small = (condition.this, condition.expression) if isinstance(condition, exp.GTE | exp.GT) else \
                (condition.expression, condition.this)
            if _is(big, *stream):
                lowers += _offset(small, window_side, window)
            elif _is(small, *stream):
                uppers += _offset(big, window_side, window)
    if not lowers or not uppers:
        return None
    return max(lowers), min(uppers)


def _conjuncts(select: exp.Select) -> list[exp.Expr]:
    """The ANDed conditions of the first join's ON and of the WHERE."""
    found: list[exp.Expr] = []
    joins = select.args.get("joins") or []
    for clause in ([joins[0].args.get("on")] if joins else []) + [select.args.get("where")]:
        if clause is None:
            continue
        condition = clause.this if isinstance(clause, exp.Where) else clause
        found += list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
    return [c.unnest() for c in found]


def _is(node: exp.Expr | None, table: str, name: str) -> bool:
    node = node.unnest() if node is not None else None
    return isinstance(node, exp.Column) and node.table.lower() == table.lower() and node.name.lower() == name.lower()


def _offset(node: exp.Expr | None, window_side: tuple[str, tuple[str, str]], window: Window) -> list[int]:
    """[ms from the window's end] of `w.window_end`, `w.window_start` (minus the SIZE) plus or minus constant
    intervals; [] for anything else."""
    node = node.unnest() if node is not None else None
    alias, (start, end) = window_side
    if _is(node, alias, end):
        return [0]
    if _is(node, alias, start):
        return [-milliseconds(window.size)]
    if isinstance(node, exp.Add | exp.Sub):
        interval = _interval_ms(node.expression)
        base = _offset(node.this, window_side, window)
        if interval is not None and base:
            return [base[0] + (interval if isinstance(node, exp.Add) else -interval)]
    return []


def _interval_ms(node: exp.Expr) -> int | None:
    """`INTERVAL '10' SECOND` (or `10 SECONDS`) in milliseconds; None for anything else."""
    node = node.unnest()
    if not isinstance(node, exp.Interval) or node.args.get("unit") is None:
        return None
    text = normalized_duration(f"{node.this.name} {node.args['unit'].name}")
    return milliseconds(text) if text else None
