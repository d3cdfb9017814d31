"""A query's trigger ('trigger', runtime.trigger) and what Spark's real-time mode cannot run (DSF-E872, DSF-E873).

Real-time mode (Spark 4.1 and later) runs long micro-batches whose tasks process records as they arrive; the
trigger interval is then how often it checkpoints. It reads and writes logs through Spark's own connector only
(Python data sources are not supported in it), so dsflow runs in it what that connector can do as dsflow would:
stateless queries (filters, projections) from streams of JSON values to a stream or changelog of JSON values,
keys as text. Its sink is at-least-once: a restart writes again what the last checkpoint had not committed.
"""

from __future__ import annotations

import re
from importlib import metadata
from collections.abc import Callable
from typing import Any

from dsflow.core import stores as registry
from dsflow.core.model import Query, Relation
from dsflow.errors import Diagnostic, Location
from dsflow.load.rules import rule
from dsflow.sql.statements import RawStatement

Report = Callable[[Diagnostic], None]
Namespace = Any
"""load/queries.py's Namespace (its relations, stores, trigger and isolation); named so, as it imports this module."""

TRIGGERS = {"micro-batch": "micro-batch", "microbatch": "micro-batch", "realtime": "realtime",
            "real-time": "realtime"}
REALTIME_SPARK = (4, 1)
"""The first Spark with real-time mode."""
UNITS = ((("ms", "millisecond", "milliseconds"), 1), (("s", "second", "seconds"), 1000),
         (("m", "minute", "minutes"), 60_000), (("h", "hour", "hours"), 3_600_000))
MIN_INTERVAL = "5 seconds"
"""Real-time mode's shortest checkpoint interval (Spark's spark.sql.streaming.realTimeMode.minBatchDuration)."""


def checked_trigger(query: Query, st: RawStatement, ns: Namespace, report: Report) -> Query:
    """The query with its trigger. 'trigger' = 'realtime' asks for real-time mode: each thing the query uses that
    the mode cannot run is reported (DSF-E872) at the property. runtime.trigger 'realtime' is a default: the queries
    real-time mode can run take it, the others run in micro-batches."""
    prop = st.prop("trigger")
    if prop is None:
        runs = ns.trigger == "realtime" and _spark_version() >= REALTIME_SPARK and \
            not unsupported(_realtime(query, st), ns)
        return _realtime(query, st) if runs else query
    value = prop.value.strip().lower()
    if value not in TRIGGERS:
        report(Diagnostic("DSF-E032", f"'trigger' must be 'micro-batch' or 'realtime', got '{prop.value}'",
                          prop.location, hint="'trigger' = 'realtime' runs it in Spark's real-time mode"))
        return query
    trigger = TRIGGERS[value]
    if trigger == "micro-batch":
        return query
    where = prop.location
    _check_spark(where, report)
    for reason in unsupported(_realtime(query, st), ns):
        report(Diagnostic("DSF-E872", f"query '{query.fqn}' runs in real-time mode ('trigger' = 'realtime'), which "
                          f"cannot run it: {reason}", where, hint="remove 'trigger' = 'realtime' (micro-batches run "
                          "it), or keep real-time queries to filters and projections of JSON streams in a "
                          f"{_stores()} store, without expectations or dead letters"))
    return _realtime(query, st)


def _realtime(query: Query, st: RawStatement) -> Query:
    """The query in real-time mode; an interval it inherits below real-time mode's minimum is raised to it."""
    update = {"trigger": "realtime"}
    if st.prop("trigger.interval") is None and interval_ms(query.trigger_interval) < interval_ms(MIN_INTERVAL):
        update["trigger_interval"] = MIN_INTERVAL
    return query.model_copy(update=update)


def interval_ms(interval: str) -> int:
    """Milliseconds of an interval as 'trigger.interval' takes it ('500 ms', '5 seconds', '1 m'); 0 if not one
    (load/queries.py reports that, DSF-E032). Parsed here: sqlglot's dialect is not loaded on a warm load."""
    found = re.match(r"^(\d+(?:\.\d+)?)\s*([a-z]+)$", interval.strip().lower())
    unit = found and next((ms for names, ms in UNITS if found.group(2) in names), None)
    return round(float(found.group(1)) * unit) if found and unit else 0


def unsupported(query: Query, ns: Namespace) -> list[str]:
    """Why real-time mode cannot run the query in dsflow, one reason a line (none: it can)."""
    reasons = [f"{what} '{relation.fqn}' is {why}"
               for what, relation in [*(("source", ns.relations[s.relation]) for s in query.sources),
                                      ("sink", ns.relations[query.sink])]
               if (why := _relation_misfit(relation, ns, what))]
    if query.stateful or query.output_mode != "append" or query.window is not None:
        reasons.append("it is stateful (an aggregation, a window or a join); real-time mode runs stateless queries")
    if query.temporal_join or query.changelog_join or query.join_chain or query.join_within or len(query.sources) > 1:
        reasons.append("it joins relations")
    if query.expectations:
        reasons.append("it has CONSTRAINT ... EXPECT rules")
    if query.functions:
        reasons.append(f"it calls Python functions ({', '.join(query.functions)})")
    if query.delivery_guarantee == "exactly-once":
        reasons.append("'delivery.guarantee' is 'exactly-once'; real-time mode's sink is at-least-once")
    if query.deserialization_errors not in (None, "TERMINATE") or query.dlq_topic:
        reasons.append("it sets dead letters or skips undecodable records; in real-time mode a record that does not "
                       "parse gives NULL columns")
    if query.deletes != "none":
        reasons.append("it reads a changelog's deletes")
    if interval_ms(query.trigger_interval) < interval_ms(MIN_INTERVAL):
        reasons.append(f"its 'trigger.interval' '{query.trigger_interval}', real-time mode's checkpoint interval, is "
                       f"shorter than its minimum of {MIN_INTERVAL}")
    if (query.isolation or ns.isolation) == "shared":
        reasons.append("it runs in a shared Spark application (runtime.isolation 'shared'), whose session has no "
                       "connector; real-time queries run in their own driver ('runtime.isolation' = "
                       "'query')")
    return reasons


def _relation_misfit(relation: Relation, ns: Namespace, what: str) -> str | None:
    store = ns.stores.get(relation.store or "")
    if store is None or not rule(store.type, "realtime_logs"):
        return f"in a {getattr(store, 'type', 'no')} store; real-time mode reads and writes {_stores()} logs only"
    refused = rule(store.type, "realtime_refusals")
    if refused is not None and refused(store.properties):
        return f"in store '{store.name}', whose settings real-time mode's connector cannot use: " + \
            "; ".join(refused(store.properties))
    if relation.kind not in ("stream", "changelog") or (what == "source" and relation.kind != "stream"):
        return f"a {relation.kind.replace('_', ' ')}; real-time mode reads streams and writes streams or changelogs"
    if (relation.value_format or "json") != "json":
        return f"of value.format '{relation.value_format}'; real-time mode reads and writes JSON values only"
    if relation.key_format:
        return f"of key.format '{relation.key_format}'; real-time mode reads and writes keys as text only"
    return None


def _spark_version() -> tuple[int, ...]:
    """(major, minor) of the installed pyspark; (0,) without one."""
    try:
        version = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return (0,)
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


def _stores() -> str:
    """The store kinds whose logs real-time mode reads and writes (their rules say `realtime_logs`)."""
    return registry.listing([t for t in registry.kinds_that(registry.Capability.LOGS) if rule(t, "realtime_logs")])


def _check_spark(where: Location | None, report: Report) -> None:
    """DSF-E873 when the installed pyspark predates real-time mode."""
    found = _spark_version()
    if found < REALTIME_SPARK:
        shown = ".".join(map(str, found)) if found != (0,) else "not installed"
        report(Diagnostic("DSF-E873", f"'trigger' = 'realtime' needs Spark 4.1 or later (real-time mode); the "
                          f"installed pyspark is {shown}", where, hint="upgrade pyspark, or remove 'trigger'"))
