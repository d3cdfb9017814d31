"""The stream-changelog (temporal) join on Spark: each stream record joins the changelog's row for its key
as of the record's event time.

Both sides are unioned and grouped by the join key into `applyInPandasWithState` with an event-time
timeout. Per key the state holds the changelog's versions (event time, offset, row as JSON; a tombstone
is a version without a row) and the stream records still waiting for the watermark. A stream record is
emitted once the watermark (the stream's newest event time minus 'watermark.delay') reaches its event
time, joined with the newest version at or before that time, so changelog updates arriving up to the
delay later than the stream are still seen. Stream records already behind the watermark when they arrive
are late and dropped (as in windows and interval joins). Changelog records are never dropped. Versions
older than the newest one at or before the watermark can no longer be needed and are pruned.

    joined_view(spark, spec)   creates the view `spec.view`: __key plus one struct column per side
    step(...)                  the per-key state transition, pure Python (unit-tested on its own)
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Iterator
from typing import Any

from dsflow.adapters.spark.spec import RECORD_TIMESTAMP, TemporalSpec

STREAM, CHANGELOG = 0, 1
INTERNAL = {"__key", "__ts", RECORD_TIMESTAMP, "__deleted", "__offset", "__window"}
OUTPUT_SCHEMA = "key string, sv string, cv string"
STATE_SCHEMA = "versions string, pending string"

Version = list  # [event time ms, offset, row JSON or None (a tombstone)]
Pending = list  # [event time ms, record key, row JSON]


def step(versions: list[Version], pending: list[Pending], rows: Iterable[tuple], watermark: int,
         inner: bool, chained: bool = False, horizon: int = 0) -> tuple[list[Version], list[Pending], list[tuple]]:
    """One call for one key: add the new rows (side, event time, offset, key, stream row, changelog row), emit
    the stream records the watermark has reached, prune; returns (versions, pending, output rows). `chained`: the
    stream rows come from an earlier join, which let them through already: none is late, and versions are kept
    `horizon` ms further back than the watermark (adapters/spark/join_chain.py)."""
    versions = sorted(versions, key=_order)
    for side, ets, offset, key, stream_row, changelog_row in rows:
        if side == CHANGELOG:
            bisect.insort(versions, [int(ets), int(offset), changelog_row], key=_order)
        elif ets is not None and (chained or int(ets) > watermark):
            pending.append([int(ets), key, stream_row])
    pending.sort(key=lambda p: p[0])
    ready = [p for p in pending if p[0] <= watermark]
    pending = [p for p in pending if p[0] > watermark]
    out = []
    for ets, key, stream_row in ready:
        at = bisect.bisect_right(versions, (ets, float("inf")), key=_order) - 1
        changelog_row = versions[at][2] if at >= 0 else None
        if changelog_row is not None or not inner:
            out.append((key, stream_row, changelog_row))
    return _pruned(versions, watermark - horizon), pending, out


def _order(version: Version) -> tuple:
    return version[0], version[1]


def _pruned(versions: list[Version], watermark: int) -> list[Version]:
    """Keep the newest version at or before the watermark and all later ones; drop a tombstone left alone."""
    at = bisect.bisect_right(versions, (watermark, float("inf")), key=_order) - 1
    kept = versions[max(at, 0):]
    if len(kept) == 1 and kept[0][2] is None and kept[0][0] <= watermark:
        return []
    return kept


def _rows(frames: Iterator[Any]) -> Iterator[tuple]:
    for frame in frames:
        yield from zip(frame["side"], frame["ets"], frame["seq"], frame["key"], frame["sv"], frame["cv"], strict=True)


def _none(value: Any) -> Any:
    """pandas gives NaN/None for nulls; the state holds None."""
    return None if value is None or value != value else value


def key_types(stream, changelog, stream_keys: list[str], changelog_keys: list[str]) -> list[Any]:
    """The type each key pair is compared in: Spark's common type of the two columns (as its `=` casts them: a
    DOUBLE and a BIGINT as DOUBLEs, a VARCHAR and a BIGINT as BIGINTs, failing on a string that is no number under
    ANSI), so that equal values have equal texts (7.0 and 7 are both '7.0')."""
    from pyspark.sql import functions as F

    def common(s: str, c: str):
        left, right = stream.schema[s].dataType, changelog.schema[c].dataType
        if left == right:
            return left
        probe = stream.sparkSession.range(0).select(F.coalesce(F.lit(None).cast(left), F.lit(None).cast(right)))
        return probe.schema[0].dataType

    return [common(s, c) for s, c in zip(stream_keys, changelog_keys, strict=True)]


def key_text(columns: list[str], types: list[Any]):
    """The join key of a record: its key columns, each cast to its pair's common type, as a JSON array of texts."""
    from pyspark.sql import functions as F

    return F.to_json(F.array(*[F.col(f"`{c}`").cast(t).cast("string") for c, t in zip(columns, types, strict=True)]))


def state_function(inner: bool):
    """The function for applyInPandasWithState (group key, frames, GroupState) -> frames of (key, sv, cv)."""
    import pandas as pd

    def apply(_key, frames, state):
        versions, pending = ([], []) if not state.exists else (json.loads(state.get[0]), json.loads(state.get[1]))
        rows = [] if state.hasTimedOut else ((int(s), _none(e), _none(o), _none(k), _none(sv), _none(cv))
                                            for s, e, o, k, sv, cv in _rows(frames))
        versions, pending, out = step(versions, pending, rows, state.getCurrentWatermarkMs(), inner)
        if versions or pending:
            state.update((json.dumps(versions), json.dumps(pending)))
        elif state.exists:
            state.remove()
        if pending:
            state.setTimeoutTimestamp(min(p[0] for p in pending) - 1)  # fires once the watermark reaches it
        yield pd.DataFrame(out, columns=["key", "sv", "cv"], dtype=object)

    return apply


def joined_view(spark, spec: TemporalSpec) -> None:
    """Create the view `spec.view` (__key, <stream alias> struct, <changelog alias> struct) from the two source
    views; the stream view carries the watermark, the changelog view none (its records are never late)."""
    from pyspark.sql import functions as F

    stream, changelog = spark.table(spec.stream_view), spark.table(spec.changelog_view)
    types = key_types(stream, changelog, spec.stream_keys, spec.changelog_keys)

    def join_key(columns: list[str]):
        return key_text(columns, types)

    def row(frame):
        return F.to_json(F.struct(*[F.col(f"`{c}`") for c in frame.columns if c not in INTERNAL]))

    left = stream.select(F.lit(STREAM).alias("side"), join_key(spec.stream_keys).alias("jk"),
                         F.unix_millis("__ts").alias("ets"), F.lit(0).cast("long").alias("seq"),
                         F.col("__key").alias("key"), row(stream).alias("sv"),
                         F.lit(None).cast("string").alias("cv"), F.col("__ts"))
    right = changelog.select(F.lit(CHANGELOG).alias("side"), join_key(spec.changelog_keys).alias("jk"),
                             F.unix_millis("__ts").alias("ets"), F.col("__offset").alias("seq"),
                             F.lit(None).cast("string").alias("key"), F.lit(None).cast("string").alias("sv"),
                             F.when(~F.col("__deleted"), row(changelog)).alias("cv"),
                             F.lit(None).cast("timestamp").alias("__ts"))
    joined = (left.unionByName(right).groupBy("jk")
              .applyInPandasWithState(state_function(spec.side == "inner"), OUTPUT_SCHEMA, STATE_SCHEMA, "append",
                                      "EventTimeTimeout"))
    (joined.select(F.col("key").alias("__key"), F.from_json("sv", spec.stream_ddl).alias(spec.stream_alias),
                   F.from_json("cv", spec.changelog_ddl).alias(spec.changelog_alias))
     .createOrReplaceTempView(spec.view))
