"""What a plan is made of: the action enum and one planned change (with its estimate and data loss), and what a
refresh saw (`Observation` of one resource, `Observations` of everything, taken once before planning). core/plan.py
makes plans of them (and re-exports them); core/moves.py rewrites changes for moves.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dsflow.core.bluegreen import BlueGreen
from dsflow.core.categories import Category


class Action(str, Enum):
    """What apply does to one resource."""

    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    FORGET = "forget"
    REFRESH = "refresh"
    NOOP = "no-op"

    @property
    def symbol(self) -> str:
        return {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "forget": ".", "refresh": "!",
                "no-op": " "}[self.value]


class Estimate(BaseModel):
    """How much a replay re-reads: records from the sources' current offsets, and time at the measured rate."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    records: int = Field(description="records the replay re-reads: the sources' end offsets minus the start")
    rate_per_second: float | None = Field(None, description="records / seconds: the rate the estimate reads at; null "
                                          "if unknown")
    seconds: float | None = Field(None, description="time to read `records` once the query runs, from the query's "
                                  "measured micro-batches (core/catchup.py); null if none was measured")
    seconds_upper_bound: bool = Field(False, description="`seconds` is at most: the measured batches were too alike "
                                      "in size to tell their fixed cost from their cost per record")
    measured_batches: int | None = Field(None, description="micro-batches `seconds` rests on")
    largest_batch: int | None = Field(None, description="records of the largest of them")
    sources: dict[str, int] = Field(default_factory=dict, description="records the replay re-reads, by source log "
                                    "(empty when a store cannot say them apart)")
    read_again: int | None = Field(None, description="of `records`, those the deployed version read already (its last "
                                   "committed offsets): what they produced reaches the sink's readers again; null "
                                   "when not known")
    gone: dict[str, int] = Field(default_factory=dict, description="by source log: records the deployed version "
                                 "read that the log no longer holds (deleted by retention or on request since), so "
                                 "the replay rebuilds without them; apply needs --allow-destroy or --allow-data-loss")


class DataLoss(BaseModel):
    """What a delete or replacement destroys: an object that holds records, and how many it holds now."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    object: str = Field(description="the physical object, e.g. 'topic main/pageviews'")
    records: int | None = Field(None, description="records it holds, counted during the refresh; null if not "
                                                  "counted (--no-refresh, or a store that cannot count)")
    prevented: bool = Field(False, description="the relation declares 'lifecycle.prevent_destroy': no apply may "
                                               "run this change")


class Skipped(BaseModel):
    """What a reset checkpoint skips: the records its sources hold past its last committed batch, never read."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    records: int | None = Field(None, description="records its sources hold now past its last committed batch, "
                                                  "counted during planning; null if not counted (a source whose "
                                                  "store cannot say its offsets)")


class Change(BaseModel):
    """One planned change, with the reason (for display only) and its effect on query state."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    address: str = Field(description="the resource: kind.name, e.g. query.analytics.curated.pageviews_filtered")
    action: Action = Field(description="what apply does: create, update, replace, delete, forget "
                          "(a `removed:` entry: out of state, nothing deleted), refresh or no-op")
    reason: str = Field(description="why, in words; for display only, never parsed")
    effect: str | None = Field(None, description="what happens to a query's checkpoint and offsets")
    depends_on: list[str] = Field(default_factory=list, description="addresses this resource depends on")
    before: dict[str, Any] | None = Field(None, description="the deployed data fields (from state); null if new")
    after: dict[str, Any] | None = Field(None, description="the desired data fields; null for a delete")
    after_metadata: dict[str, Any] | None = Field(None, description="the desired metadata fields (change in place)")
    data_hash: str | None = Field(None, description="desired data hash (a change forces a replacement)")
    metadata_hash: str | None = Field(None, description="desired metadata hash (a change updates in place)")
    drift: bool = Field(False, description="true if the change repairs drift seen by the refresh, not a project edit")
    category: Category | None = Field(None, description="for queries: what happens to running state")
    override: str | None = Field(None, description="the 'start.position' override that decided the category")
    estimate: Estimate | None = Field(None, description="for replays: what will be re-read")
    affected: list[str] = Field(default_factory=list, description="for a relation updated, replaced, deleted or "
                                "moved: the queries downstream of it, its readers in the project")
    consumers: list[str] = Field(default_factory=list, description="for a relation updated, replaced or deleted: the "
                                 "consumer groups outside the project the refresh saw on its log")
    rollback_of: str | None = Field(None, description="the earlier version this change returns to")
    observed: str | None = Field(None, description="what the refresh saw: drift (refresh-only), or the log a new "
                                                   "relation names (exists with N partitions, or does not exist)")
    destroys: DataLoss | None = Field(None, description="the records this change deletes: apply refuses it unless "
                                                        "the user allowed it (--allow-destroy, --allow-data-loss)")
    physical: str | None = Field(None, description="for relations: the physical object, e.g. '<store type> "
                                                   "topic main/pageviews'")
    forced: str | None = Field(None, description="asked for on the command line, not by a project edit: 'replace' "
                               "(--replace: rebuilt from the earliest offsets) or 'reset_checkpoint' "
                               "(--reset-checkpoint: a new checkpoint at the sources' end offsets)",
                               json_schema_extra={"enum": ["replace", "reset_checkpoint", None]})
    duplicates: list[str] = Field(default_factory=list, description="for a forced replay: the streams that receive "
                                  "records again, its sink and every stream a query downstream copies them into")
    skips: Skipped | None = Field(None, description="for a reset checkpoint: the records skipped; apply refuses it "
                                  "unless the user allowed it (--allow-destroy ADDRESS, --allow-data-loss)")
    moved_from: str | None = Field(None, description="a move (a `moved:` entry, or a relation renamed onto the "
                                                     "same physical object): the deployed address whose state "
                                                     "entry this change takes over (core/moves.py)")
    imported: str | None = Field(None, description="an import (an `import:` entry, `dsflow import`): the ID of the "
                                 "existing object (topic, stream) taken into the state as it is; the action is what "
                                 "the declaration changes in it (no-op: it is only recorded)")
    blue_green: BlueGreen | None = Field(None, description="a replay carried out beside the deployed version "
                                         "(--blue-green, 'deploy' = 'blue_green'): its logs, bound, readers and "
                                         "phases (core/bluegreen.py); null for anything else")
    keep_running: bool | None = Field(None, description="a forgotten query (a `removed:` entry): true if it is left "
                                      "running, false if apply stops it on its checkpoint; null for anything else")


class Observation(BaseModel):
    """What a refresh saw of a resource in the real system: a deployed one (drift), or the log a relation not yet
    deployed names (whether it exists already, and its size)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    address: str
    healthy: bool
    detail: str = ""
    size: int | None = Field(None, description="a relation not yet deployed whose log exists already: the log's "
                                               "partitions (open shards) now; null otherwise")
    columns: list[list[str]] | None = Field(None, description="a table an import adopts, which exists: its columns "
                                            "as its store's catalog has them, [name, type], in order; null otherwise")
    refused: str | None = Field(None, description="a table an import adopts: why it cannot take the declaration's "
                                "rows as it is (DSF-E869 at plan time); null when it can")
    running: dict[str, Any] | None = Field(None, description="a running query an import adopts: as its run folder "
                                           "records it, `outputs` (pid, version, checkpoint, run_dir, topics) and "
                                           "the declaration it was started from (`data`, `metadata`, their hashes); "
                                           "null otherwise")


class Observations(BaseModel):
    """Everything one refresh saw of the live systems, taken once before planning (engine/refresh.py `observe`; what
    to look at is derived from the project and the state alone, core/observing.py). The plan is a pure function of
    (project, state, observations), carries them, and apply checks the facts a change relies on against them."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    refreshed: bool = Field(False, description="true when the stores and processes were looked at (false with "
                                               "--no-refresh and for a destroy, where only replays are measured)")
    observed_at: str | None = Field(None, description="when the observation was taken, ISO 8601 UTC; null if "
                                                      "nothing was looked at")
    resources: dict[str, Observation] = Field(
        default_factory=dict, description="by address: each deployed query's, generator's and store object's health "
                                          "(drift), and the log each stream or changelog not yet deployed names")
    log_sizes: dict[str, int | None] = Field(
        default_factory=dict, description="by relation address: the partitions (open shards) of each log a decision "
                                          "relies on (a relation not yet deployed, a stream that may grow in place); "
                                          "null when it does not exist. Apply refuses the plan if one differs now")
    growable: list[str] = Field(default_factory=list, description="the relations whose store said it can add the "
                                                                  "partitions they gain in place, sorted")
    estimates: dict[str, Estimate] = Field(default_factory=dict, description="by query address: what a replay of "
                                                                             "it would re-read, measured on its "
                                                                             "sources")
    record_counts: dict[str, int] = Field(default_factory=dict, description="by relation address: the records a "
                                                                            "deployed object the plan may delete or "
                                                                            "empty holds")
    foreign_logs: dict[str, str] = Field(default_factory=dict, description="by query address: which of its source "
                                                                           "logs is another log now than the one its "
                                                                           "offsets were read from, in words")
    skipped: dict[str, int] = Field(default_factory=dict, description="by query address: the records its sources "
                                    "hold past its last committed batch, which a reset checkpoint skips")
    schema_refusals: dict[str, str] = Field(default_factory=dict, description="by relation address: why the "
                                                                              "registry would reject a query sink's "
                                                                              "new columns (DSF-E841)")
    consumer_groups: dict[str, list[str]] = Field(default_factory=dict, description="by relation address: the "
                                                  "consumer groups outside the project registered on the log of a "
                                                  "relation the plan changes or deletes (committed offsets or "
                                                  "assigned members), sorted")
