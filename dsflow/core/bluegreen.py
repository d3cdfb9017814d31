"""Blue/green replays: a query change that would replay is built beside the deployed version, checked, and then its
readers switch in one step (issue 44). Pure: what the plan says and what the state records.

    micro_batches  (a deployed version in Spark's real-time mode only) the deployed version restarted in
               micro-batches on a new checkpoint, its offsets carried from its last real-time checkpoint: that
               mode's stop cannot come at given offsets (at-least-once: what it wrote past that checkpoint may be in
               its log twice)
    build      the new version in its own checkpoint, writing its own versioned log (<topic>_v<N>), the old one
               running on
    catch_up   the new version reads its sources up to their end offsets when it was built, within a bound
    compare    the deployed version stopped once past what the new one caught up to: where it stopped is the cut;
               the new version run to exactly the cut (its reads capped there); both logs compared
    switch     every reader in the project restarted on the new log at the position where the old log's records up
               to the cut end; the new version resumes from its checkpoint; external consumers named
    keep_old   the old log and checkpoint kept (not deleted), the old version stopped

Only a replay of a query writing a stream or changelog in a store whose logs have offsets is carried out this
way, or one writing a table or materialized view in a store that swaps tables (Capability.SWAP: a database or
a table catalog) or relocates them (Capability.RELOCATE: tables at a path). A swapped table's new version writes
`<table>_v<N>`; at the switch one transaction of renames makes it the production table and keeps the old one as
`<table>_v<N-1>` (`kept_as`), views over it following (engine/bluegreen_tables.py). A relocated table's new version
writes the path `<path>_v<N>`, and the switch records the relation there, as a log's (`relocate`). The project's
queries reading a lake table as a stream switch as a log's readers do, at the tables' positions at the cut. Apply
walks what the plan froze (`BlueGreen` on the change) and records a `Deployment` in the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

DEPLOY = "deploy"
RETENTION = "deploy.retention"
"""The relation property keeping a blue/green deployment's old version that long after the switch (a duration);
without it, the next apply removes it."""
"""The relation property asking for blue/green replays of the query writing it: 'deploy' = 'blue_green'."""
BLUE_GREEN = "blue_green"
DEPLOY_VALUES = (BLUE_GREEN, "in_place")
PHASES = ("build", "catch_up", "compare", "switch", "keep_old")
MICRO_BATCHES = "micro_batches"
"""The phase before the build when the deployed version runs in real-time mode (first in `BlueGreen.phases`)."""
DEFAULT_CATCH_UP_SECONDS = 600
BLUE_GREEN_EFFECT = ("blue/green: {replay}, writing {new} beside the deployed version; its readers switch from {old} "
                     "once it caught up, {guarantee}")
EXACT = "nothing read twice or skipped"
REALTIME_NEW = ("; in real-time mode: built, caught up and cut in micro-batches (real-time mode cannot stop at given "
                "offsets), it resumes in real-time mode at the cut, its offsets carried")
"""Added to the effect of a blue/green replay whose new version runs in real-time mode (engine/bluegreen.py)."""
REALTIME_DEPLOYED = ("nothing skipped; the deployed version first moves to micro-batches (real-time mode cannot stop "
                     "at given offsets): restarted on a new checkpoint, its offsets carried from its last real-time "
                     "checkpoint, so what it wrote after that checkpoint may be written again to {old} and read twice "
                     "by its readers (at-least-once)")
"""The guarantee of a blue/green replay whose deployed version runs in real-time mode, in place of EXACT: apply
restarts it in micro-batches before anything is built (engine/bluegreen.py `_into_micro_batches`), as a switch out
of real-time mode does (core/plan.py)."""
LOG_KINDS = ("stream", "changelog")
TABLE_KINDS = ("table", "materialized_view")


RESUMABLE = ("build", "catch_up")
"""The phases an interrupted deployment resumes from: the deployed version and its readers were not touched yet."""


class Interrupted(BaseModel):
    """A deployment an apply was killed in, and what the next apply does with what it left."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    version: int = Field(description="its version")
    phase: str = Field(description="the last phase it noted")
    action: str = Field(description="'resume': its new version goes on from its own log and checkpoint (build or "
                                    "catch up, same SQL); 'roll back': its new version is stopped, its log deleted, "
                                    "its checkpoint removed (and, past the catch up, the deployed version started "
                                    "again) before this change is carried out; 'roll forward': killed in the "
                                    "switch of the same change: apply finishes the switch (readers not yet on the "
                                    "new log switched, those switched left there; a table's renames looked up in "
                                    "the catalog and done if they did not commit); 'refuse': killed in the switch, "
                                    "the SQL changed since or the switch noted nothing to finish it from: apply "
                                    "refuses the change (DSF-E966)")


class BlueGreen(BaseModel):
    """How apply carries out one replay blue/green: the logs, the bound, who switches and who must move."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    sink: str = Field(description="the relation the query writes, e.g. relation.analytics.public.counts")
    old_log: str = Field(description="the log its readers read now (the deployed one)")
    new_log: str = Field(description="the new version's own log, <declared name>_v<version>")
    version: int = Field(description="the deployment's number for this relation (2 for the first)")
    catch_up_seconds: int = Field(description="the bound: the new version must reach its sources' end offsets "
                                  "(lag 0) within it, and each reader must read the old log to its end within it, "
                                  "else apply stops the new version and leaves production as it was")
    readers: list[str] = Field(default_factory=list, description="the project's queries reading the relation: "
                               "each restarts on the new log where it stood on the old one")
    consumers: list[str] = Field(default_factory=list, description="consumer groups outside the project the refresh "
                                 "saw on the old log: they must move to the new log themselves")
    phases: list[str] = Field(default_factory=lambda: list(PHASES), description="what apply does, in order; "
                              "'micro_batches' first when the deployed version runs in real-time mode: it is "
                              "restarted in micro-batches (offsets carried from its last real-time checkpoint) "
                              "before the build")
    kept_as: str | None = Field(None, description="a table's deployment: what the production table (old_log) is "
                                "renamed to at the switch, in the transaction that gives new_log its name; null "
                                "for a log's")
    relocate: bool = Field(False, description="a path-based table's deployment: new_log is the new "
                           "version's table path; at the switch the relation's recorded location moves to it in one "
                           "state write (no catalog to rename in); the old path is kept")
    interrupted: Interrupted | None = Field(None, description="an earlier apply of this change killed during its "
                                            "blue/green deployment (the state's pending intent): resumed or rolled "
                                            "back first")


class Deployment(BaseModel):
    """Where a blue/green deployment of a query stands, as apply recorded it (`dsflow status` shows it)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    query: str
    sink: str
    version: int
    old_log: str
    new_log: str
    phase: str = Field(description="the last phase reached: micro_batches, build, catch_up, compare, switch, "
                                   "keep_old (done) or failed")
    started_at: str
    updated_at: str
    built_to: dict[str, dict[str, int]] | None = Field(None, description="the sources' end offsets when the new "
                                                       "version was built: what it caught up to")
    micro_batches_from: dict[str, dict[str, int]] | None = Field(None, description="the deployed version ran in "
                                                                 "real-time mode: the sources' offsets of its last "
                                                                 "real-time checkpoint, where it restarted in "
                                                                 "micro-batches before the build (what it had "
                                                                 "written past them may be in old_log twice)")
    cut: dict[str, dict[str, int]] | None = Field(None, description="the sources' offsets both versions stopped at "
                                                  "before the switch: the old log holds what came before it, the "
                                                  "new log's readers start after it")
    compared: dict[str, int] | None = Field(None, description="records in each log at the cut, and those only in "
                                            "one of them (old_records, new_records, only_old, only_new)")
    switched: dict[str, dict[str, dict[str, int]]] = Field(default_factory=dict, description="by reader: where it "
                                                           "started on the new log")
    consumers: list[str] = Field(default_factory=list, description="external consumer groups that must move")
    kept: dict[str, str] = Field(default_factory=dict, description="what is kept of the old version: its log and "
                                 "checkpoint (a table: where it was renamed to)")
    views: list[str] = Field(default_factory=list, description="a table's deployment: the views over the production "
                             "table that the transaction of renames defined again on the new one")
    error: str | None = Field(None, description="why it failed; production was left as it was")


class Retirement(BaseModel):
    """A blue/green deployment's kept old version that this apply removes: its log deleted (dsflow created it) and
    its checkpoint folder removed."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    query: str = Field(description="the query whose old version it was")
    sink: str = Field(description="the relation it wrote")
    log: str = Field(description="the old log (or table), deleted")
    checkpoint: str = Field(description="the old version's checkpoint folder, removed")
    reason: str = Field(description="why now, in words: the next apply after the switch, the retention passed, or "
                                    "a destroy")
    object: str = Field("log", description="what `log` names: a log, or a table")


def retirements(deployments: Mapping[str, Deployment], retention_ms: Mapping[str, int | None], now: datetime,
                destroy: bool) -> list[Retirement]:
    """The kept old versions a plan removes: every one at a destroy; else those without a retention on their
    relation ('deploy.retention', `retention_ms` by relation address), and those whose retention passed."""
    found = []
    for query, record in sorted(deployments.items()):
        if record.phase != "keep_old" or not record.kept.get("log"):
            continue
        keep = retention_ms.get(record.sink)
        since = datetime.fromisoformat(record.updated_at)
        if destroy:
            reason = "destroy"
        elif keep is None:
            reason = f"kept since the switch at {record.updated_at}; no '{RETENTION}' on its relation"
        elif now >= since + timedelta(milliseconds=keep):
            reason = f"'{RETENTION}' passed (switched at {record.updated_at})"
        else:
            continue
        found.append(Retirement(query=query, sink=record.sink, log=record.kept["log"],
                                checkpoint=record.kept.get("checkpoint", ""), reason=reason,
                                object="table" if record.kept.get("kind") in TABLE_KINDS else "log"))
    return found


def wanted_blue_green(sink: Mapping[str, Any] | None, asked: bool, store_types: Mapping[str, str]) -> bool:
    """Whether a replay writing `sink` (the relation's desired data and metadata merged) runs blue/green: asked for
    (--blue-green or 'deploy' = 'blue_green'), and the sink is a log in a broker's store (logs with offsets)."""
    from dsflow.core.stores import Capability, kinds_that

    if sink is None or not (asked or sink.get(DEPLOY) == BLUE_GREEN):
        return False
    store_type = store_types.get(sink.get("store", ""))
    if sink.get("kind") in TABLE_KINDS:
        return store_type in kinds_that(Capability.SWAP) + kinds_that(Capability.RELOCATE)
    return sink.get("kind") in LOG_KINDS and store_type in kinds_that(Capability.BROKER)


def planned(address: str, sink: Mapping[str, Any], sink_outputs: Mapping[str, Any], failed: Deployment | None,
            readers: list[str], consumers: list[str], seconds: int, relocate: bool = False,
            prior: Interrupted | None = None) -> BlueGreen:
    """The blue/green carrying out of a replay writing the deployed relation `sink` (its data and outputs);
    `relocate`: a table whose store has no catalog (a path) moves to its new path instead of being renamed;
    `prior`: a deployment an apply was killed in (resumed under its version, or rolled back and not taken again)."""
    made = _planned(address, sink, sink_outputs, readers, consumers, seconds, relocate, next_version(
        sink_outputs, failed, prior.version if prior is not None and prior.action != "resume" else 0))
    if prior is not None and prior.action == "resume" and prior.version != made.version:
        prior = prior.model_copy(update={"action": "roll back"})
    return made.model_copy(update={"interrupted": prior})


def _planned(address: str, sink: Mapping[str, Any], sink_outputs: Mapping[str, Any], readers: list[str],
             consumers: list[str], seconds: int, relocate: bool, version: int) -> BlueGreen:
    declared = str(sink.get("topic"))
    if relocate:
        return BlueGreen(sink=address, old_log=str(sink_outputs.get("topic") or declared),
                         new_log=versioned_log(declared, version), version=version, catch_up_seconds=seconds,
                         readers=readers, relocate=True)
    if sink.get("kind") in TABLE_KINDS:  # the production name stays; the old table is renamed away
        return BlueGreen(sink=address, old_log=declared, new_log=versioned_log(declared, version), version=version,
                         catch_up_seconds=seconds, readers=readers, kept_as=versioned_log(declared, version - 1))
    return BlueGreen(sink=address, old_log=str(sink_outputs.get("topic") or declared),
                     new_log=versioned_log(declared, version), version=version, catch_up_seconds=seconds,
                     readers=readers, consumers=consumers)


def next_version(deployed_outputs: Mapping[str, Any], failed: Deployment | None, taken: int = 0) -> int:
    """The number of the next deployment of a relation: one more than the log it is on now, or than a failed or
    rolled back attempt's (whose log may still be being deleted)."""
    current = int((deployed_outputs.get(BLUE_GREEN) or {}).get("version", 1))
    return max(current, failed.version if failed is not None else 1, taken) + 1


def interrupted(intent: Mapping[str, Any], data_hash: str | None, blue_green: bool) -> Interrupted | None:
    """What an apply killed during a blue/green deployment of this query left (the pending intent it noted), and
    whether the change planned now resumes it: a blue/green change of the same SQL, killed before the deployed
    version was stopped; rolls it forward: the same change, killed in the switch (which noted what finishing it
    needs); refuses it: killed in the switch otherwise; anything else rolls it back."""
    noted, run = intent.get(BLUE_GREEN), intent.get(RUN_NOTE)
    if not noted or not run:
        return None
    same = blue_green and run.get("data_hash") == data_hash
    if noted.get("phase") == "switch":
        action = "roll forward" if same and intent.get(SWITCH_NOTE) else "refuse"
    else:
        action = "resume" if same and noted.get("phase") in RESUMABLE else "roll back"
    return Interrupted(version=int(noted["version"]), phase=str(noted["phase"]), action=action)


RUN_NOTE = "blue_green_run"
"""The pending intent's note of a deployment under way: its plan, the new version's checkpoint and SQL hash, and
the log it created (what a later apply resumes or rolls back)."""
SWITCH_NOTE = "blue_green_switch"
"""The pending intent's note of a switch under way, made before anything in it moves: the deployment record so far
(cut, compare), what stopping the deployed version returned, the new log's end offsets at the cut and the offsets
the new version first read (what a later apply rolls it forward from)."""
MICRO_BATCHES_NOTE = "blue_green_micro_batches"
"""The pending intent's note of a deployed version in real-time mode being restarted in micro-batches: its new
checkpoint (noted before it starts), where the real-time version stopped, and the new version's state entry once
recorded (a later apply of the same change reuses the checkpoint and the stop)."""
SWITCHED_NOTE = "blue_green_switched"
"""By reader: its new version's outputs, ledger entries and start offsets, noted once it started on the new log."""


def interrupted_text(found: Interrupted, plan: BlueGreen | None = None) -> str:
    """The plan's words for what happens to an interrupted deployment (`plan`: the deployment's, for a roll
    forward's)."""
    head = f"an apply was killed during the blue/green deployment v{found.version} ({found.phase}): "
    if found.action == "refuse":
        return head + ("its readers may have moved already and the change planned now is not the one it was "
                       "switching: apply refuses this change (DSF-E966); apply that SQL again to roll it forward, "
                       "or finish the switch by hand, see docs/plan.md")
    if found.action == "roll forward":
        return head + "it rolls forward: " + _forward_text(plan)
    if found.action == "resume":
        return head + ("it resumes: its new version restarted on its own checkpoint and log, where it stopped; "
                       "the deployed version and its readers were not touched")
    restart = "" if found.phase in RESUMABLE else "; the deployed version started again on its checkpoint"
    return head + f"it is rolled back first: its new version stopped, its log deleted, its checkpoint removed{restart}"


def _forward_text(plan: BlueGreen | None) -> str:
    resumes = "the new version resumes from its checkpoint"
    if plan is None:
        return f"the switch is finished and {resumes}"
    if plan.kept_as is not None:
        readers = " (readers not yet switched stopped first), and those readers restart on the new table after " \
                  "the cut" if plan.readers else ""
        return (f"the catalog says whether its transaction of renames committed ({plan.new_log} named "
                f"{plan.old_log}, {plan.old_log} kept as {plan.kept_as}); if not, the renames are done now{readers}; "
                f"then {resumes} writing {plan.old_log}")
    if plan.relocate:
        moved = f"readers not yet on {plan.new_log} are switched as the switch does, then " if plan.readers else ""
        return f"{moved}{resumes} writing the table at {plan.new_log}, and the relation moves there in one state write"
    return (f"readers not yet on {plan.new_log} are switched as the switch does ({plan.old_log} read to its end, "
            f"then restarted on {plan.new_log} at the cut), readers switched already stay on their new checkpoint "
            f"(restarted there if their driver ended); then {resumes}")


def versioned_log(declared: str, version: int) -> str:
    return f"{declared}_v{version}"


def redirects(resources: Mapping[str, Any]) -> dict[str, str]:
    """Relation fqn -> the log it is on after a blue/green switch (its deployed outputs say), for every relation
    that was switched."""
    found = {}
    for key, entry in resources.items():
        switched = entry.outputs.get(BLUE_GREEN) if key.startswith("relation.") else None
        if switched and entry.outputs.get("topic"):
            found[key.split(".", 1)[1]] = str(entry.outputs["topic"])
    return found


def redirected(project: Any, logs: Mapping[str, str]) -> Any:
    """The project (core/model.py Project) with each relation named in `logs` (fqn -> log) on that log: what apply
    starts queries and creates logs from after a switch."""
    if not logs:
        return project
    relations = tuple(_on(r, logs[r.fqn]) if r.fqn in logs else r for r in project.relations)
    return project.model_copy(update={"relations": relations})


def in_micro_batches(project: Any, query: str) -> Any:
    """The project with the query `query` (its fqn) in micro-batches: how a new version in Spark's real-time mode is
    built, caught up and run to the cut (that mode's source reads past any ending offset and its stop interrupts a
    running batch); it resumes in real-time mode at the switch, its offsets carried (engine/bluegreen.py)."""
    queries = tuple(q.model_copy(update={"trigger": "micro-batch"}) if q.fqn == query else q for q in project.queries)
    return project.model_copy(update={"queries": queries})


def _on(relation: Any, log: str) -> Any:
    """The relation on `log`; a table option naming its old place (a table's path) follows."""
    options = {k: (log if v == relation.topic else v) for k, v in (relation.table_options or {}).items()}
    return relation.model_copy(update={"topic": log, "table_options": options})


def phase_text(blue_green: BlueGreen) -> list[str]:
    """The plan's words for each phase."""
    if blue_green.kept_as is not None:
        return _table_phase_text(blue_green)
    if blue_green.relocate:
        return _path_phase_text(blue_green)
    readers = ", ".join(blue_green.readers) or "none in the project"
    consumers = ", ".join(blue_green.consumers) or "none seen"
    return _micro_batches_text(blue_green) + [
        f"build: new version in its own checkpoint writing {blue_green.new_log}; the old version keeps writing "
        f"{blue_green.old_log}",
        f"catch up: lag 0 on the sources' end offsets within {blue_green.catch_up_seconds} s, else the new version "
        "is stopped and production is left as it was",
        "compare: the deployed version stopped once past what the new one caught up to, the new one run to the "
        f"same source offsets; {blue_green.old_log} and {blue_green.new_log} compared record by record",
        f"switch: readers restart on {blue_green.new_log} where they stood on {blue_green.old_log} ({readers}); "
        f"external consumer groups must move themselves ({consumers})",
        f"keep old: {blue_green.old_log} and the old checkpoint kept; the old version stopped",
    ]


def _micro_batches_text(blue_green: BlueGreen) -> list[str]:
    """The first phase's words when the deployed version runs in real-time mode (a log's deployment only: a
    real-time query writes a stream or changelog)."""
    if MICRO_BATCHES not in blue_green.phases:
        return []
    return [f"micro batches: the deployed version, in real-time mode, restarted in micro-batches on a new "
            f"checkpoint, its offsets carried from its last real-time checkpoint: what it wrote after that "
            f"checkpoint may be written again to {blue_green.old_log} (at-least-once), nothing skipped"]


def _table_phase_text(blue_green: BlueGreen) -> list[str]:
    old, new, kept = blue_green.old_log, blue_green.new_log, blue_green.kept_as
    return [
        f"build: new version in its own checkpoint writing the table {new}; the old version keeps writing {old}",
        f"catch up: lag 0 on the sources' end offsets within {blue_green.catch_up_seconds} s, else the new version "
        "is stopped, its table dropped, and production is left as it was",
        "compare: the deployed version stopped once past what the new one caught up to, the new one run to the "
        f"same source offsets; {old} and {new} compared row by row",
        f"switch: one transaction of renames: {old} -> {kept}, {new} -> {old}; views over {old} defined again on "
        f"the new table, its grants carried; the new version resumes writing it{_lake_readers(blue_green, old)}",
        f"keep old: {kept} and the old checkpoint kept; the old version stopped",
    ]


def _path_phase_text(blue_green: BlueGreen) -> list[str]:
    old, new = blue_green.old_log, blue_green.new_log
    return [
        f"build: new version in its own checkpoint writing the table at {new}; the old version keeps writing the "
        f"table at {old}",
        f"catch up: lag 0 on the sources' end offsets within {blue_green.catch_up_seconds} s, else the new version "
        "is stopped, its table deleted, and production is left as it was",
        "compare: the deployed version stopped once past what the new one caught up to, the new one run to the "
        f"same source offsets; the tables at {old} and {new} compared row by row",
        f"switch: the relation's table moves to {new} in one state write (a path has no catalog to rename in); "
        f"the new version resumes writing it{_lake_readers(blue_green, new)}; readers outside dsflow must move to "
        f"{new} themselves",
        f"keep old: the table at {old} and the old checkpoint kept; the old version stopped",
    ]


def _lake_readers(blue_green: BlueGreen, new: str) -> str:
    """The switch's words for the project's queries reading the table as a stream (none: nothing)."""
    if not blue_green.readers:
        return ""
    return (f"; readers ({', '.join(blue_green.readers)}) read {blue_green.old_log} to its end, then restart on "
            f"{new} right after its version (snapshot) at the cut")


def reached(committed: Mapping[str, Mapping[str, Any]] | None, target: Mapping[str, Mapping[str, int]]) -> bool:
    """A checkpoint's committed offsets are at `target` (every partition of every log named)."""
    if committed is None:
        return all(int(v) == 0 for parts in target.values() for v in parts.values())
    return all(int(committed.get(log, {}).get(p, 0)) >= int(end)
               for log, parts in target.items() for p, end in parts.items())


def compared(old: list[tuple[Any, Any]], new: list[tuple[Any, Any]]) -> dict[str, int]:
    """Two logs' records, (key, value) each, compared as multisets."""
    from collections import Counter

    before, after = Counter(old), Counter(new)
    return {"old_records": len(old), "new_records": len(new), "only_old": sum((before - after).values()),
            "only_new": sum((after - before).values())}
