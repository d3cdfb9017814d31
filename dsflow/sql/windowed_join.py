"""A windowed GROUP BY over an interval join of two streams, in one query:

    SELECT window_start, window_end, a.k, COUNT(*), SUM(b.x)
    FROM TUMBLE(a, SIZE 1 MINUTE) [AS a] [LEFT] JOIN b WITHIN 10 SECONDS ON a.id = b.id
    GROUP BY window_start, window_end, a.k

The window (TUMBLE or HOP) is over the event time of the first relation. Spark runs it as two stateful operators,
the stream-stream join then the window aggregation, both driven by event-time watermarks: a stream-stream join runs
only in append mode, so each window's row is emitted once, when the watermark (propagated through the join) passes
the window's end (Query.output_mode 'append').

Refused with DSF-E045, each with its reason:
    a window over a join that is not an interval join of two streams (WITHIN), or of more than two relations;
    a SESSION window over a join; a FULL join (a row of the right side alone has no window); a window over the
    joined relation;
    aggregating a temporal join, or a join of more than two streams.

    an aggregation without a window over a LEFT or FULL join (Spark runs an outer stream-stream join only in
    append mode, where a group that is not a window never closes).

Without a window, a GROUP BY (or an aggregate without one) over an INNER interval join of two streams is an
aggregation in update mode, as over one stream: the join's rows, each once, are added to their group, whose new row
is written when it changes (Spark runs an inner stream-stream join followed by an aggregation in update mode).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.errors import Diagnostic, Location
from dsflow.sql.dialect import WITHIN, window_call

Report = Callable[[Diagnostic], None]
EXAMPLE = ("SELECT window_start, window_end, a.k, COUNT(*) AS n FROM TUMBLE(a, SIZE 1 MINUTE) AS a "
           "JOIN b WITHIN 10 SECONDS ON a.id = b.id GROUP BY window_start, window_end, a.k")
SPLIT = "or write the join into a stream (CREATE STREAM ... AS SELECT) and aggregate that stream in another query"


def window_problem(select: exp.Select, wrapped: exp.Table) -> str | None:
    """Why the window `wrapped` (a TUMBLE/HOP/SESSION in FROM or JOIN) cannot be over the SELECT's joins, or None
    when it can: one interval join of two relations, INNER or LEFT, windowed on its first relation."""
    joins = select.args.get("joins") or []
    function = window_call(wrapped)
    assert function is not None  # `wrapped` is a window (is_window)
    if len(joins) > 1:
        return "a window over a join of more than two relations is not supported yet"
    join = joins[0]
    if join.args.get(WITHIN) is None:
        return "a window over a join needs an interval join of two streams (JOIN ... WITHIN ... ON ...)"
    if function.kind == "session":
        return "a SESSION window over a join is not supported yet (TUMBLE and HOP are)"
    side = (join.side or "").upper()
    if side == "FULL":
        return "a window over a FULL join is not supported: a row of one side alone has no window"
    if wrapped.parent is join:
        return "a window over the joined relation is not supported: window the first one (FROM TUMBLE(a, ..) JOIN b)"
    return None


def check_aggregation(within: str | None, side: str, windowed: bool, chained: bool, where: Location,
                      report: Report) -> bool:
    """Whether the join a GROUP BY or an aggregate reads may be aggregated in the same query (an interval join of
    two streams, INNER or windowed); else DSF-E045 with the reason, reported."""
    if within is not None and not chained and (windowed or side == "inner"):
        return True
    if within is None:
        message, hint = "aggregating the result of a temporal join is not supported yet", \
            "write the join into a stream, and aggregate that stream in another query"
    elif not chained:
        message = (f"an aggregation without a window over a {side.upper()} join of two streams cannot run: Spark runs "
                   "an outer stream-stream join only in append mode, where a group is written once the watermark "
                   "closes it, and a group that is not a window never closes")
        hint = f"group by a window of the first stream, e.g. {EXAMPLE}; or join INNER; {SPLIT}"
    else:
        message, hint = "aggregating a join of more than two streams is not supported yet", \
            "join two streams in the query that aggregates; " + SPLIT
    report(Diagnostic("DSF-E045", message, where, hint=hint))
    return False
