"""Shadow runs (pure): a candidate version of a deployed query run on the same sources into a shadow topic, and
the diff of its output with the live version's over the input both have read.

A shadow is recorded in the state beside the resources (`State.shadows`, by the live query's address), never as
one: the plan neither shows it nor touches it, and no query can read its topic (it is no relation's).

The diff compares two *cuts*: each side's output after its last committed batch, read while no batch ran (so the
topic holds exactly that batch's output and those before it), and the source offsets that batch ended at. The cuts
are aligned when both sides ended at the same offsets of every source they share: their outputs then come from the
same input. A stream compares the multisets of its rows; a changelog folds each side by key (the last value wins,
a tombstone deletes) and compares the keys' values.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SUFFIX = "__shadow"
"""Appended to the live topic's name (and to the query's name, in its run folder and spec) for its shadow."""

Positions = Mapping[str, Mapping[str, int | str]]
"""topic -> partition -> offset."""


def shadow_topic(live_topic: str) -> str:
    return f"{live_topic}{SUFFIX}"


class ShadowRun(BaseModel):
    """A candidate version of a deployed query running beside it on the same sources (`dsflow shadow start`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    query: str = Field(description="the live query's address")
    live_version: str = Field(description="the deployed version's data hash when the shadow started")
    candidate_version: str = Field(description="the project's version (data hash) the shadow runs")
    kind: Literal["stream", "changelog"] = Field(description="what its sink relation is: how the diff compares")
    live_topic: str
    topic: str = Field(description="the shadow's own topic: <live topic>__shadow")
    store: str = Field(description="the store of both topics")
    checkpoint: str
    started_at: str
    start_offsets: dict[str, dict[str, int]] | None = Field(
        None, description="where the shadow's sources started: the live version's first read offsets, when recorded")
    created_topic: bool = Field(True, description="dsflow created the shadow topic (stop deletes only such a one)")
    outputs: dict[str, Any] = Field(default_factory=dict, description="what the engine started: pid, run_dir, "
                                    "topics (its sources in order), a shared application's app keys")


class Cut(BaseModel):
    """One side's output after a committed batch: the source offsets it ended at and the sink records then held."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    batch: int | None = Field(description="its last committed batch (None: nothing committed yet)")
    offsets: dict[str, dict[str, int | str]] = Field(description="topic -> partition -> end offset read")


class Row(BaseModel):
    """A row only one side holds: a stream's row with how many more times that side has it, or a changelog key's
    value."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    key: str | None = None
    value: Any = None
    count: int = 1


class Differ(BaseModel):
    """A changelog key both sides hold with different values."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    key: str
    live: Any
    shadow: Any


class ShadowDiff(BaseModel):
    """The shadow's output against the live one's over the input both have read (`dsflow shadow diff --json`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    query: str
    kind: Literal["stream", "changelog"]
    live_topic: str
    shadow_topic: str
    offsets: dict[str, dict[str, int | str]] = Field(description="the aligned cut: source offsets both sides ended at")
    live_batch: int | None = None
    shadow_batch: int | None = None
    live_records: int = Field(description="records read from the live topic")
    shadow_records: int = Field(description="records read from the shadow topic")
    live_rows: int = Field(description="a stream: its rows; a changelog: its keys after folding")
    shadow_rows: int
    same: int = Field(description="rows (stream) or keys (changelog) equal on both sides")
    only_live: list[Row] = Field(default_factory=list)
    only_shadow: list[Row] = Field(default_factory=list)
    differ: list[Differ] = Field(default_factory=list, description="a changelog's keys whose values differ")

    @property
    def empty(self) -> bool:
        return not (self.only_live or self.only_shadow or self.differ)


def aligned(live: Cut, shadow: Cut) -> bool:
    """Both cuts ended at the same offsets of every source they share (and share one at least)."""
    common = set(live.offsets) & set(shadow.offsets)
    return bool(common) and all(_normal(live.offsets[t]) == _normal(shadow.offsets[t]) for t in common)


def _normal(parts: Mapping[str, int | str]) -> dict[str, str]:
    return {str(p): str(o) for p, o in parts.items()}


def canonical(value: Any) -> str:
    """A row's text, equal for equal rows (keys sorted)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def stream_parts(live: Iterable[Any], shadow: Iterable[Any]) -> tuple[list[Row], list[Row], int, int, int]:
    """The multisets of rows: (only live, only shadow, live rows, shadow rows, equal rows); a row that one side
    holds n times more than the other is listed once with count n."""
    left, right = Counter(canonical(v) for v in live), Counter(canonical(v) for v in shadow)
    only_live = sorted(((k, n) for k, n in (left - right).items()), key=lambda kn: kn[0])
    only_shadow = sorted(((k, n) for k, n in (right - left).items()), key=lambda kn: kn[0])
    return ([Row(value=json.loads(k), count=n) for k, n in only_live],
            [Row(value=json.loads(k), count=n) for k, n in only_shadow],
            sum(left.values()), sum(right.values()), sum((left & right).values()))


def fold(records: Iterable[tuple[str | None, Any]]) -> dict[str, Any]:
    """A changelog's rows by key, records taken in order: the last value of a key wins, a None value (a tombstone)
    deletes it; a record without a key is keyed by its value's text."""
    rows: dict[str, Any] = {}
    for key, value in records:
        key = key if key is not None else canonical(value)
        if value is None:
            rows.pop(key, None)
        else:
            rows[key] = value
    return rows


def changelog_parts(live: Iterable[tuple[str | None, Any]], shadow: Iterable[tuple[str | None, Any]]
                    ) -> tuple[list[Row], list[Row], list[Differ], int, int, int]:
    """Each side folded by key: (keys only live, keys only shadow, keys whose values differ, live keys, shadow
    keys, equal keys)."""
    left, right = fold(live), fold(shadow)
    only_live = [Row(key=k, value=left[k]) for k in sorted(left.keys() - right.keys())]
    only_shadow = [Row(key=k, value=right[k]) for k in sorted(right.keys() - left.keys())]
    both = sorted(left.keys() & right.keys())
    differ = [Differ(key=k, live=left[k], shadow=right[k]) for k in both if canonical(left[k]) != canonical(right[k])]
    return only_live, only_shadow, differ, len(left), len(right), len(both) - len(differ)


def diff(run: ShadowRun, live: Cut, shadow: Cut, live_records: list[tuple[str | None, Any]],
         shadow_records: list[tuple[str | None, Any]]) -> ShadowDiff:
    """The diff of two aligned cuts' records ((key, value) in each partition's order)."""
    head = {"query": run.query, "kind": run.kind, "live_topic": run.live_topic, "shadow_topic": run.topic,
            "offsets": {t: dict(p) for t, p in live.offsets.items() if t in shadow.offsets},
            "live_batch": live.batch, "shadow_batch": shadow.batch,
            "live_records": len(live_records), "shadow_records": len(shadow_records)}
    if run.kind == "stream":
        only_live, only_shadow, rows_live, rows_shadow, same = stream_parts(
            (v for _, v in live_records), (v for _, v in shadow_records))
        return ShadowDiff(**head, only_live=only_live, only_shadow=only_shadow, live_rows=rows_live,
                          shadow_rows=rows_shadow, same=same)
    only_live, only_shadow, differ, rows_live, rows_shadow, same = changelog_parts(live_records, shadow_records)
    return ShadowDiff(**head, only_live=only_live, only_shadow=only_shadow, differ=differ, live_rows=rows_live,
                      shadow_rows=rows_shadow, same=same)


def positions(topics: list[str], committed: list[dict[str, Any]] | None) -> dict[str, dict[str, int | str]]:
    """A checkpoint's committed offsets per source (in query order) by source topic."""
    return {t: dict(o) for t, o in zip(topics, committed or [], strict=False)}


def not_aligned_text(live: Cut, shadow: Cut) -> str:
    """Where each side stands, for the error that no aligned cut was found."""
    return (f"live at batch {live.batch} offsets {canonical(live.offsets)}, shadow at batch {shadow.batch} "
            f"offsets {canonical(shadow.offsets)}")
