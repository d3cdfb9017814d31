"""The supervisor's Prometheus text endpoint on 127.0.0.1: per query what `dsflow status --json` shows.

Metrics (label `query`: the query's name; generators under `datagen`):

    dsflow_query_up                               1 while the driver process runs
    dsflow_query_state{state}                     1 for the query's current state
    dsflow_query_uptime_seconds                   since the running driver started
    dsflow_query_restarts_total                   restarts by the supervisor of the deployed version
    dsflow_query_next_retry_timestamp_seconds     when a dead query is restarted (crash loop: growing)
    dsflow_query_last_error_info{error}           1, with the last error (first 200 characters) as a label
    dsflow_query_input_rows_per_second            from the driver's last progress
    dsflow_query_processed_rows_per_second
    dsflow_query_last_batch_id
    dsflow_query_last_batch_duration_seconds      the last micro-batch's trigger execution
    dsflow_query_batch_latency_seconds            the newest micro-batch with records: its trigger execution (none in
                                                  real-time mode; core/latency.py)
    dsflow_query_event_time_lag_seconds           that batch's end minus the newest event time it read (queries with a
                                                  watermark only)
    dsflow_query_oldest_event_lag_seconds         the same with the oldest event time it read
    dsflow_query_record_latency_p50_seconds       real-time mode: the median latency of the records the sink received
                                                  in the last minute, source timestamp to sink (core/latency.py)
    dsflow_query_record_latency_p99_seconds       the same, 99th percentile
    dsflow_query_state_rows                       rows the query's state stores hold (stateful queries)
    dsflow_query_state_bytes                      memory the state stores report using
    dsflow_query_lag_records                      records the sources hold past what the query read (all partitions)
    dsflow_query_partition_lag_records{topic, partition}   the same per source partition
    dsflow_query_lag_max_millis                   age of the oldest unread record (logs with sequence numbers)
    dsflow_query_partition_lag_millis{topic, partition}    the same per shard
    dsflow_query_lag_wal_bytes{topic, partition}  write-ahead log written since the last change read (change streams)
    dsflow_query_expectation_rows_total{expectation, action, result}   rows that passed or failed the rule since the
                                                  driver started (result: passed, failed)
    dsflow_query_expectation_last_batch_rows{expectation, result}      the same, in the last micro-batch
    dsflow_query_skipped_records_total            source records skipped ('source.deserialization.error.handling'
                                                  = IGNORE)
    dsflow_datagen_up, dsflow_datagen_restarts_total

The warm standby driver (`runtime.standby`; no label):

    dsflow_standby_enabled                        1 when the project asks for a standby
    dsflow_standby_ready                          1 while a standby waits, warmed up (0 while one starts or none runs)
    dsflow_standby_rss_bytes                      the waiting standby's memory with its JVM and Python workers
    dsflow_standby_handoffs_total                 queries handed to a standby since the supervisor started
    dsflow_standby_failures                       standbys in a row that failed to start (the keeper backs off)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

PROGRESS = {"input_rows_per_second": "dsflow_query_input_rows_per_second",
            "processed_rows_per_second": "dsflow_query_processed_rows_per_second",
            "batch_id": "dsflow_query_last_batch_id",
            "lag_records": "dsflow_query_lag_records",
            "lag_max_millis": "dsflow_query_lag_max_millis",
            "last_batch_duration_ms": "dsflow_query_last_batch_duration_seconds",
            "state_rows": "dsflow_query_state_rows",
            "state_bytes": "dsflow_query_state_bytes",
            "batch_latency_ms": "dsflow_query_batch_latency_seconds",
            "event_time_lag_ms": "dsflow_query_event_time_lag_seconds",
            "oldest_event_lag_ms": "dsflow_query_oldest_event_lag_seconds",
            "record_latency_p50_ms": "dsflow_query_record_latency_p50_seconds",
            "record_latency_p99_ms": "dsflow_query_record_latency_p99_seconds"}
PER_UNIT = dict.fromkeys(("last_batch_duration_ms", "batch_latency_ms", "event_time_lag_ms", "oldest_event_lag_ms",
                          "record_latency_p50_ms", "record_latency_p99_ms"), 1000.0)
"""Status fields exported in another unit: the field's value divided by this (milliseconds as seconds)."""
HELP = {"batch_latency_ms": "trigger execution of the query's newest micro-batch with records (core/latency.py)",
        "event_time_lag_ms": "end of the query's newest micro-batch with records minus the newest event time it read",
        "oldest_event_lag_ms": "end of the query's newest micro-batch with records minus the oldest event time it read",
        "record_latency_p50_ms": "median latency of a real-time query's records written in the last minute, from the "
                                 "source's timestamp to the sink's (core/latency.py)",
        "record_latency_p99_ms": "99th percentile latency of a real-time query's records written in the last minute, "
                                 "from the source's timestamp to the sink's (core/latency.py)"}
"""Help texts of the progress metrics that are not "<field> of the query's last progress"."""
PARTITION_LAG = {"lag": ("dsflow_query_partition_lag_records", "records a source partition holds past the offset "
                         "the query's last micro-batch read up to"),
                 "lag_millis": ("dsflow_query_partition_lag_millis", "age of the oldest record of a source shard "
                                "the query has not read (ms)"),
                 "lag_wal_bytes": ("dsflow_query_lag_wal_bytes", "bytes of write-ahead log written since the last "
                                   "change the query read")}
"""status field {topic: {partition: n}} -> (metric, help); labels query, topic and partition."""


class StatusCollector:
    """Collects, on each scrape, the entries `operations.status` gives (dead-letter counts left out: a scrape
    does not ask the broker)."""

    def __init__(self, entries):
        self.entries = entries

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families = {
            "up": GaugeMetricFamily("dsflow_query_up", "1 while the query's driver process runs", labels=["query"]),
            "state": GaugeMetricFamily("dsflow_query_state", "1 for the query's current state",
                                       labels=["query", "state"]),
            "uptime": GaugeMetricFamily("dsflow_query_uptime_seconds", "seconds since the running driver started",
                                        labels=["query"]),
            "restarts": CounterMetricFamily("dsflow_query_restarts", "restarts of the deployed version by the "
                                            "runtime supervisor", labels=["query"]),
            "retry": GaugeMetricFamily("dsflow_query_next_retry_timestamp_seconds", "when the supervisor restarts "
                                       "the dead query (epoch seconds)", labels=["query"]),
            "error": GaugeMetricFamily("dsflow_query_last_error_info", "the query's last error",
                                       labels=["query", "error"]),
            **{field: GaugeMetricFamily(metric, text, labels=["query", "topic", "partition"])
               for field, (metric, text) in PARTITION_LAG.items()},
            "rules": CounterMetricFamily("dsflow_query_expectation_rows", "rows that passed or failed an "
                                         "expectation since the driver started",
                                         labels=["query", "expectation", "action", "result"]),
            "rules_batch": GaugeMetricFamily("dsflow_query_expectation_last_batch_rows", "rows that passed or failed "
                                             "an expectation in the last micro-batch",
                                             labels=["query", "expectation", "result"]),
            "skipped": CounterMetricFamily("dsflow_query_skipped_records", "source records that did not decode, "
                                           "skipped ('source.deserialization.error.handling' = IGNORE)",
                                           labels=["query"]),
            "gen_up": GaugeMetricFamily("dsflow_datagen_up", "1 while the generator runs", labels=["datagen"]),
            "gen_restarts": CounterMetricFamily("dsflow_datagen_restarts", "restarts of the generator by the "
                                                "runtime supervisor", labels=["datagen"]),
        }
        progress = {key: GaugeMetricFamily(name, HELP.get(key, f"{key.removesuffix('_ms').replace('_', ' ')} of the "
                                                    "query's last progress"), labels=["query"])
                    for key, name in PROGRESS.items()}
        for entry in self.entries():
            _add(families, progress, entry)
        yield from families.values()
        yield from progress.values()


def _add(families: dict, progress: dict, entry: dict[str, Any]) -> None:
    kind, _, name = entry["address"].partition(".")
    running = entry.get("uptime_seconds") is not None  # the process runs (also while a crash loop tries again)
    if kind == "datagen":
        families["gen_up"].add_metric([name], 1.0 if running else 0.0)
        families["gen_restarts"].add_metric([name], float(entry.get("restarts") or 0))
        return
    families["up"].add_metric([name], 1.0 if running else 0.0)
    families["state"].add_metric([name, str(entry["state"])], 1.0)
    families["restarts"].add_metric([name], float(entry.get("restarts") or 0))
    if entry.get("uptime_seconds") is not None:
        families["uptime"].add_metric([name], float(entry["uptime_seconds"]))
    if entry.get("next_retry"):
        families["retry"].add_metric([name], datetime.fromisoformat(entry["next_retry"]).timestamp())
    error = entry.get("last_error") or entry.get("error")
    if error:
        families["error"].add_metric([name, str(error)[:200]], 1.0)
    for field in PARTITION_LAG:
        for topic, partitions in (entry.get(field) or {}).items():
            for partition, amount in partitions.items():
                families[field].add_metric([name, topic, str(partition)], float(amount))
    _add_expectations(families, name, entry)
    for key, family in progress.items():
        if isinstance(entry.get(key), (int, float)):
            family.add_metric([name], float(entry[key]) / PER_UNIT.get(key, 1.0))


def _add_expectations(families: dict, name: str, entry: dict[str, Any]) -> None:
    """The counts of the query's expectations and the records it skipped (adapters/spark/driver.py writes them)."""
    for rule, found in sorted((entry.get("expectations") or {}).items()):
        for result in ("passed", "failed"):
            families["rules"].add_metric([name, rule, str(found.get("action", "")), result],
                                         float(found.get(result) or 0))
            if found.get(f"last_batch_{result}") is not None:
                families["rules_batch"].add_metric([name, rule, result], float(found[f"last_batch_{result}"]))
    if isinstance(entry.get("skipped_records"), int):
        families["skipped"].add_metric([name], float(entry["skipped_records"]))


class StandbyCollector:
    """Collects, on each scrape, what `dsflow runtime status` shows of the standby (control.standby_info)."""

    def __init__(self, info: Callable[[], dict[str, Any]]):
        self.info = info

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        info = self.info()
        waiting, keeper = info.get("standby") or {}, info.get("standby_keeper") or {}
        yield GaugeMetricFamily("dsflow_standby_enabled", "1 when runtime.standby is on",
                                value=1.0 if info.get("enabled") else 0.0)
        yield GaugeMetricFamily("dsflow_standby_ready", "1 while a warmed-up standby driver waits",
                                value=1.0 if waiting.get("state") == "ready" else 0.0)
        if waiting.get("rss_bytes") is not None:
            yield GaugeMetricFamily("dsflow_standby_rss_bytes", "resident memory of the waiting standby with its "
                                    "JVM and Python workers", value=float(waiting["rss_bytes"]))
        yield CounterMetricFamily("dsflow_standby_handoffs", "queries handed to a standby driver",
                                  value=float(keeper.get("handoffs") or 0))
        yield GaugeMetricFamily("dsflow_standby_failures", "standby starts in a row that failed",
                                value=float(keeper.get("failures") or 0))


def registry(entries: Callable[[], list[dict[str, Any]]],
             standby: Callable[[], dict[str, Any]] | None = None) -> Any:
    """The collectors of `entries` (what `operations.status` gives) and `standby` (control.standby_info), for the
    supervisor's endpoint (runtime/endpoint.py) to serve at /metrics."""
    from prometheus_client import CollectorRegistry

    found = CollectorRegistry(auto_describe=False)
    found.register(StatusCollector(entries))
    if standby is not None:
        found.register(StandbyCollector(standby))
    return found
