"""The deployed state: what the last apply made, with lineage and serial (pure data)."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dsflow.core.shadow import ShadowRun
from dsflow.core.bluegreen import Deployment

STATE_FORMAT_VERSION = 1


class DeployedResource(BaseModel):
    """A resource as recorded after it was applied."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    address: str
    depends_on: list[str] = Field(default_factory=list)
    data_hash: str
    metadata_hash: str
    data: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict, description="what apply made: pid, checkpoint, created topic")


class LedgerEntry(BaseModel):
    """One version of a continuous query: how it started, where it kept its checkpoint, where it stopped."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    query: str
    version: str = Field(description="the query's data hash")
    category: str | None = Field(None, description="how this version started: new, in_place, keep_checkpoint, ...")
    checkpoint: str
    started_at: str
    start_offsets: dict[str, dict[str, int | str]] | None = Field(
        None, description="topic -> partition -> offset carried in (or shard -> position)")
    start_timestamp: int | None = None
    source_logs: dict[str, str] | None = Field(None, description="topic -> the broker's topic id when this version "
                                                                 "started: its offsets mean something on that log only")
    forced: str | None = Field(None, description="asked for on the command line: 'replace' (--replace) or "
                               "'reset_checkpoint' (--reset-checkpoint)")
    skipped_records: int | None = Field(None, description="a reset checkpoint: the records between where the version "
                                        "before stopped and where this one started, never read")
    stopped_at: str | None = None
    stop_offsets: dict[str, dict[str, int | str]] | None = Field(None, description="committed offsets when it stopped "
                                                               "(or shard -> position)")
    state_serial: int = 0
    forgotten_at: str | None = Field(None, description="when a `removed:` entry took the query out of dsflow's "
                                     "management (left running, or stopped: stopped_at says which)")


class ForgottenEntry(BaseModel):
    """An object a `removed:` entry took out of management: its state entry went, the object itself was kept."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    address: str
    forgotten_at: str
    object: str | None = Field(None, description="a relation's physical object, kept with its records")
    kept: str = Field(description="'running' (a query left running), 'stopped' (a query stopped on its checkpoint) "
                      "or 'kept' (anything else, as it is)")
    data: dict[str, Any] = Field(default_factory=dict, description="its last deployed data fields")
    state_serial: int = 0


class PendingChange(BaseModel):
    """A change apply started but has not recorded yet, with what the executor noted on the way."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    address: str
    action: str
    intent: dict[str, Any] = Field(default_factory=dict)


class State(BaseModel):
    """All deployed resources of one project environment."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    version: int = STATE_FORMAT_VERSION
    lineage: str = Field("", description="set on the first write; a plan records it")
    serial: int = 0
    project: str = ""
    environment: str = ""
    resources: dict[str, DeployedResource] = Field(default_factory=dict)
    ledger: list[LedgerEntry] = Field(default_factory=list, description="every query version ever applied")
    pending: PendingChange | None = Field(None, description="set while a change runs; left behind if apply died")
    forgotten: list[ForgottenEntry] = Field(default_factory=list, description="every object a `removed:` entry "
                                            "took out of management, oldest first")
    shadows: dict[str, ShadowRun] = Field(default_factory=dict, description="shadow runs by the live query's "
                                          "address (`dsflow shadow start`): no resources, never planned")
    deployments: dict[str, Deployment] = Field(default_factory=dict, description="by query address: its last "
                                               "blue/green deployment and the phase it reached (core/bluegreen.py)")

    def with_pending(self, pending: PendingChange | None) -> State:
        return self.model_copy(update={"pending": pending, "serial": self.serial + 1})

    def history(self, query: str) -> list[LedgerEntry]:
        return [e for e in self.ledger if e.query == query]

    def with_ledger(self, entries: list[LedgerEntry]) -> State:
        return self.model_copy(update={"ledger": entries})

    def with_deployment(self, deployment: Deployment) -> State:
        deployments = {**self.deployments, deployment.query: deployment}
        return self.model_copy(update={"deployments": deployments, "serial": self.serial + 1})

    def with_lineage(self) -> State:
        return self if self.lineage else self.model_copy(update={"lineage": str(uuid.uuid4())})

    def with_resource(self, resource: DeployedResource) -> State:
        resources = {**self.resources, resource.address: resource}
        return self.model_copy(update={"resources": resources, "serial": self.serial + 1})

    def with_move(self, old: str, new: str) -> State:
        """The resource at `old` recorded at `new` (a move), a query's versions in the ledger with it."""
        resources = {k: v for k, v in self.resources.items() if k != old}
        resources[new] = self.resources[old].model_copy(update={"address": new})
        ledger = [e.model_copy(update={"query": new}) if e.query == old else e for e in self.ledger]
        return self.model_copy(update={"resources": resources, "ledger": ledger, "serial": self.serial + 1})

    def with_shadow(self, query: str, run: ShadowRun | None) -> State:
        """The state with the shadow run of `query` recorded (None: removed)."""
        shadows = {k: v for k, v in self.shadows.items() if k != query} | ({query: run} if run is not None else {})
        return self.model_copy(update={"shadows": shadows, "serial": self.serial + 1})

    def without(self, address: str) -> State:
        resources = {k: v for k, v in self.resources.items() if k != address}
        return self.model_copy(update={"resources": resources, "serial": self.serial + 1})
