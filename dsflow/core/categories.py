"""What a change to a continuous query does to its running state, decided from data.

    in_place         only runtime settings changed: restart on the same checkpoint
    keep_checkpoint  the SQL changed in a way Spark resumes from (stateless, same sources)
    carry_offsets    state cannot be kept; the new version starts each source where the old stopped
    replay           the new version rebuilds from an earlier position (earliest or a timestamp)
    replace_relation a relation's schema or key changed; every query downstream is listed
    reset_checkpoint asked for (--reset-checkpoint): a new checkpoint at the sources' end offsets; what the query had
                     not read is skipped, and the sink keeps what it holds

The rules follow Spark's checkpoint compatibility: filters and projections of a stateless query
may change; the set of sources may not; stateful operators keep state only for identical plans, so a
changed stateful query (aggregation, window, join) is replayed from the earliest offsets by default.
A query's 'start.position' property overrides the decision and the plan shows the override.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class Category(str, Enum):
    IN_PLACE = "in_place"
    KEEP_CHECKPOINT = "keep_checkpoint"
    CARRY_OFFSETS = "carry_offsets"
    REPLAY = "replay"
    REPLACE_RELATION = "replace_relation"
    RESET_CHECKPOINT = "reset_checkpoint"
    NEW = "new"


OVERRIDES = ("auto", "checkpoint", "carry", "earliest", "<epoch ms>")

EFFECTS = {
    Category.NEW: "new checkpoint; sources read from their starting position",
    Category.IN_PLACE: "restarted on the same checkpoint; resumes from its committed offsets",
    Category.KEEP_CHECKPOINT: "restarted with the new SQL on the same checkpoint; nothing reprocessed or skipped",
    Category.CARRY_OFFSETS: "new checkpoint; each source starts where the old version stopped "
                            "(offsets carried from the old checkpoint); nothing reprocessed or skipped",
    Category.REPLAY: "new checkpoint; sources re-read from {position}",
    Category.RESET_CHECKPOINT: "new checkpoint; each source starts at its end offsets when apply stops the old "
                               "version: the records it had not read by then are skipped (never read); what it wrote "
                               "stays in its sink; records arriving after the stop are read",
}

FORCED = ("replace", "reset_checkpoint")
"""What `plan|apply --replace ADDRESS` and `--reset-checkpoint ADDRESS` ask of a deployed query (Change.forced)."""


def is_replay_override(value: str | None) -> bool:
    return value is not None and (value == "earliest" or value.isdigit())


def query_category(before: dict[str, Any], after: dict[str, Any], override: str | None,
                   upstream_replaced: bool) -> tuple[Category, str | None]:
    """The category of a changed query's data, and the override that decided it (if any)."""
    if override and override != "auto":
        if override == "checkpoint":
            return Category.KEEP_CHECKPOINT, override
        if override == "carry":
            return Category.CARRY_OFFSETS, override
        if is_replay_override(override):
            return Category.REPLAY, override
    if upstream_replaced:
        return Category.REPLAY, None
    if after.get("stateful") and not checkpoint_compatible(before, after):
        return Category.REPLAY, None  # an aggregation started mid-stream would count only what follows
    if checkpoint_compatible(before, after):
        return Category.KEEP_CHECKPOINT, None
    return Category.CARRY_OFFSETS, None


def checkpoint_compatible(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Spark can resume `after` from `before`'s checkpoint: both stateless, same sources, same sink topic."""
    if before.get("stateful") or after.get("stateful"):
        return False
    same_sources = [s[0] for s in before.get("sources", [])] == [s[0] for s in after.get("sources", [])]
    same_trigger = before.get("trigger") == after.get("trigger")  # real-time mode reads through another source
    return same_sources and same_trigger and before.get("sink") == after.get("sink")


STOP_GRACE_SECONDS = 30
"""How long a planned stop waits for a running micro-batch before it stops the query anyway (adapters/spark/driver.py
stop_between_batches); REPEATS says it."""
REPEATS = (f"; a crash, or a micro-batch still running {STOP_GRACE_SECONDS} s after the stop, may write the last "
           "batch again")
"""Added to a restart's effect when the query writes a stream at-least-once (its records appended to a log): a
planned stop comes between two micro-batches (adapters/spark/driver.py, `stop_between_batches`), but nothing
undoes the records of a batch that a crash, or a stop after the wait, interrupts, and that batch runs again. Not
added for an exactly-once stream resuming on its checkpoint (core/plan.py `may_repeat`)."""
REALTIME = ("; in real-time mode its sink is at-least-once: a restart writes again what it wrote after its last "
            "checkpoint (every 'trigger.interval')")
"""Added to the effect of every change to a query in real-time mode (core/plan.py): Spark checkpoints a real-time
query every trigger interval, and a stop interrupts its running batch (adapters/spark/realtime.py)."""
RESUMING = (Category.IN_PLACE, Category.KEEP_CHECKPOINT, Category.CARRY_OFFSETS)


def effect_text(category: Category, override: str | None, repeats: bool = False) -> str:
    """The plan's words for what the change does to the query's data; `repeats`: its sink may get a batch again."""
    if category is Category.REPLAY:
        position = "the earliest offset" if override in (None, "earliest") else f"timestamp {override} (epoch ms)"
        return EFFECTS[category].format(position=position)
    return EFFECTS[category] + (REPEATS if repeats and category in RESUMING else "")
