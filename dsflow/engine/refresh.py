"""Refresh: look at the real systems once, before planning, into a frozen `Observations` (core/changes.py): drift
(dead queries, missing topics), the logs new relations name, in-place growth, replay estimates, record counts,
source logs deleted and created again, and the registry's verdict on evolving sink schemas. What to ask beyond drift
comes from core/observing.py, derived from the project and the state alone; the plan is then made from the
observations without asking anything more (core/plan.py make_plan)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dsflow.adapters import process
from dsflow.core.address import Address, Kind
from dsflow.core.catchup import catch_up
from dsflow.core.observing import Questions
from dsflow.core.plan import Estimate, Observation, Observations
from dsflow.core.state import DeployedResource, State


def observe(project, state: State, asked: Questions, refresh: bool) -> Observations:
    """Everything the plan needs of the live systems, looked at once. `refresh`: drift, the logs of relations not
    yet deployed, growth and the registry too (else, as with --no-refresh, only what `asked` measures: replay
    estimates and, when asked, record counts and source-log identities)."""
    seen: dict[str, Observation] = {}
    sizes: dict[str, int | None] = {}
    growable: list[str] = []
    refusals: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    if refresh:
        seen = refresh_resources(state, project)
        new_logs, sizes = observe_logs(state, project, asked.growing)
        seen |= new_logs | observe_tables(project, asked.adopting) | observe_drivers(project, asked.running)
        growable = sorted(key for key, (data, total) in asked.growing.items() if _can_grow(project, data, total))
        refusals = schema_refusals(project, asked.evolving)
        groups = consumer_groups(project, asked.consumed)
    estimates = {key: found for key, (deployed, since) in asked.replays.items()
                 if (found := replay_estimate(project, key, since, deployed)) is not None}
    counts = {key: count for key, deployed in asked.counted.items()
              if (count := record_count(project, deployed)) is not None}
    skipped = {key: count for key, deployed in asked.skipping.items()
               if (count := skipped_records(project, deployed)) is not None}
    return Observations(refreshed=refresh, observed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        resources=seen, log_sizes=sizes, growable=growable, estimates=estimates,
                        record_counts=counts, foreign_logs=foreign_logs(project, asked.carried),
                        skipped=skipped,
                        schema_refusals=refusals, consumer_groups=groups)


def consumer_groups(project, consumed: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """The consumer groups outside the project on the logs of the relations the plan may change or delete."""
    from dsflow.adapters.objects import consumer_groups as registered

    return registered(project, consumed) if consumed else {}


def _can_grow(project, data, total: int) -> bool:
    from dsflow.adapters.objects import can_grow

    return can_grow(project, data, total)


def refresh_resources(state: State, project=None) -> dict[str, Observation]:
    """One observation per deployed query, datagen and object a store kind observes (a topic, a stream, a view's
    table, a grant, a user's login: asked of its `objects` facet, adapters/objects.py); store settings from the
    project if known."""
    from dsflow.adapters.objects import observe

    observations: dict[str, Observation] = {}
    cache: dict[str, object] = {}  # shared by the store kinds' observations (the topics of each broker)
    for key, deployed in state.resources.items():
        kind = Address.parse(key).kind
        if kind is Kind.QUERY:
            observations[key] = _observe_query(deployed)
        elif kind is Kind.DATAGEN:
            observations[key] = _observe_datagen(deployed)
        elif kind in (Kind.RELATION, Kind.GRANT, Kind.BINDING):
            observation = observe(project, deployed, cache)
            if observation is not None:
                observations[key] = observation
    return observations


def observe_logs(state: State, project, growing: Mapping[str, object] = {}) -> tuple[dict[str, Observation],
                                                                                   dict[str, int | None]]:
    """One observation per stream or changelog not yet deployed whose store kind can look at its log: whether the
    log exists already (the plan adopts it as it is, with its own size) and its partitions or shards. And the size
    of every such log and of the logs of the `growing` relations, by address (one call per store)."""
    from dsflow.adapters.objects import log_sizes
    from dsflow.core.physical import log_size, physical_object

    new = [r for r in project.relations if r.kind in ("stream", "changelog")
           and f"relation.{r.fqn}" not in state.resources and project.store(r.store) is not None]
    grown = [project.relation(Address.parse(key).name) for key in sorted(growing)]
    if not new and not grown:
        return {}, {}
    sizes = log_sizes(project, new + [r for r in grown if r is not None])
    types = {s.name: s.type for s in project.stores}
    observations = {}
    for relation in new:
        if relation.fqn not in sizes:
            continue
        size = sizes[relation.fqn]
        data = {"kind": relation.kind, "store": relation.store, "topic": relation.topic, "partitions": size}
        where = physical_object(data, types)
        detail = f"{where} does not exist" if size is None else f"{where} exists with {log_size(data, types)}"
        observations[f"relation.{relation.fqn}"] = Observation(address=f"relation.{relation.fqn}", healthy=True,
                                                               detail=detail, size=size)
    return observations, {f"relation.{fqn}": size for fqn, size in sorted(sizes.items())}


def observe_tables(project, addresses: tuple[str, ...]) -> dict[str, Observation]:
    """One observation per table an import adopts whose store kind can read its catalog (Capability.IMPORT_TABLES):
    whether it exists, its columns and types as the catalog has them, and the store's verdict on taking the
    declaration's rows as it is (`refused`). A store that cannot be reached: no columns, and the detail says why."""
    from dsflow.adapters.objects import existing_tables
    from dsflow.core.physical import physical_object

    relations = [r for key in addresses if (r := project.relation(Address.parse(key).name)) is not None]
    if not relations:
        return {}
    found = existing_tables(project, relations)
    types = {s.name: s.type for s in project.stores}
    observations = {}
    for relation in relations:
        if relation.fqn not in found:
            continue
        columns, refused = found[relation.fqn]
        where = physical_object({"kind": "table", "store": relation.store, "topic": relation.topic}, types)
        if columns is None:
            detail = refused or f"{where} does not exist"
            refused = None
        else:
            detail = f"{where} exists with columns " + ", ".join(f"{name} {type_}" for name, type_ in columns)
        observations[f"relation.{relation.fqn}"] = Observation(
            address=f"relation.{relation.fqn}", healthy=True, detail=detail, columns=columns, refused=refused)
    return observations


def observe_drivers(project, running: Mapping[str, str]) -> dict[str, Observation]:
    """One observation per running query an import adopts (query address -> its run folder, relative to the
    project's root or absolute): the live driver of the folder, its own or the shared application that lists it
    (its engine's `running_driver`: known by its identity), the version and checkpoint it runs, and the
    declaration it was started from (executors.DECLARED). A folder without a live driver of that query: not
    seen (DSF-E868); a driver whose declaration is not recorded: `refused` (DSF-E869)."""
    from dsflow.core.engines import engine
    from dsflow.engine.executors import DECLARED
    from dsflow.engine.workspace import apps_beside

    found = {}
    for address, folder in sorted(running.items()):
        run_dir = (Path(project.root) / folder).resolve()
        driver = engine().running_driver(run_dir, apps_beside(run_dir))
        name = Address.parse(address).name
        if driver is None or driver["name"] != name:
            whose = " (neither a driver of its own nor a live shared application runs it)" if driver is None \
                else f" (it runs {driver['name']})"
            found[address] = Observation(address=address, healthy=False,
                                         detail=f"no driver of {name} runs in {run_dir}{whose}")
            continue
        declared = _json(run_dir / DECLARED)
        refused = None
        if declared is None or declared.get("address") != address or declared.get("data_hash") != driver["version"]:
            refused = f"{run_dir} does not record the declaration version {driver['version'][:12]} was started " \
                      "from (a driver started before dsflow recorded it)"
        outputs = {k: driver[k] for k in ("pid", "version", "checkpoint", "topics", "app", "app_dir", "app_query")
                   if k in driver} | {"run_dir": str(run_dir)}
        found[address] = Observation(
            address=address, healthy=True, refused=refused, running={**(declared or {}), "outputs": outputs},
            detail=f"{_runner(driver)} runs version {driver['version'][:12]} on checkpoint {driver['checkpoint']}")
    return found


def _runner(driver: Mapping[str, Any]) -> str:
    """What runs an imported query, in words: its driver, or the shared application (and host) it is a member of."""
    if driver.get("app_dir"):
        return f"the shared application {driver['app']}, host pid {driver['pid']},"
    return f"driver pid {driver['pid']}"


def _json(path: Path) -> dict | None:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def query_status(deployed: DeployedResource) -> dict:
    """The driver's last written status, or {} if none."""
    run_dir = deployed.outputs.get("run_dir")
    if not run_dir:
        return {}
    try:
        return json.loads((Path(run_dir) / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _observe_query(deployed: DeployedResource) -> Observation:
    # executors import the Spark translation (sqlglot): plan may not need it
    from dsflow.engine.executors import query_identity

    if deployed.outputs.get("paused"):
        return Observation(address=deployed.address, healthy=True, detail="paused")  # dsflow pause: not drift
    running = process.is_running(deployed.outputs.get("pid"), query_identity(deployed.outputs))
    status = query_status(deployed)
    checkpoint = deployed.outputs.get("checkpoint")
    if checkpoint and status.get("batch_id") is not None and not Path(checkpoint).is_dir():
        return Observation(address=deployed.address, healthy=False,
                           detail="checkpoint is gone; the query restarts from its starting position")
    stopped = deployed.outputs.get("app_dir") and status.get("state") == "stopped"  # its host runs the others
    if running and status.get("state") != "failed" and not stopped:
        return Observation(address=deployed.address, healthy=True, detail="running")
    if stopped:
        detail = "query stopped in its shared application (the application runs on)"
    elif status.get("state") == "failed":
        detail = f"query failed: {status.get('error', 'unknown error')}"
    else:
        detail = "query process is not running"
    return Observation(address=deployed.address, healthy=False, detail=detail)


def _observe_datagen(deployed: DeployedResource) -> Observation:
    from dsflow.engine.executors import datagen_identity

    count = deployed.data.get("count")
    running = process.is_running(deployed.outputs.get("pid"), datagen_identity(deployed.outputs.get("run_dir")))
    healthy = running or count is not None
    return Observation(address=deployed.address, healthy=healthy,
                       detail="running" if running else "generator process is not running")


def replay_estimate(project, address: str, since: str | None, deployed: DeployedResource | None) -> Estimate | None:
    """Records a replay of the query at `address` from `since` ('earliest' or epoch ms; None: the earliest) re-reads
    (from the sources' current positions, asked of each source's store) and the time at the measured rate; None
    when a source's store cannot count (a CDC source takes a new snapshot)."""
    from dsflow.adapters.objects import held_records

    query = next((q for q in project.queries if f"query.{q.fqn}" == address), None)
    if query is None:
        return None
    by_log: dict[str, int] = {}
    for source in query.sources:
        relation = project.relation(source.relation)
        count = held_records(project, {"store": relation.store, "topic": relation.topic}, {}, since)
        if count is None:
            return None
        by_log[relation.topic] = by_log.get(relation.topic, 0) + count
    total = sum(by_log.values())
    timing = catch_up(total, measured_costs(query_status(deployed))) if deployed else None
    read_from = (deployed.outputs.get("read_from") if deployed else None) or {}
    gone, again = {}, None
    if since in (None, "earliest") and deployed is not None:
        from dsflow.adapters.objects import positions

        logs = sorted(set(read_from) | set(deployed.outputs.get("topics") or []))
        now = positions(project, logs) if logs else None  # one request per store for both measures
        gone, again = gone_records(read_from, now), read_again(deployed, now)
    return Estimate(records=total, sources=by_log, gone=gone, read_again=again, **_timing(total, timing))


def measured_costs(status: dict) -> list:
    """(records, ms) of the query's measured batches: the status's `batch_costs`, or its last batch alone (a driver
    that wrote no costs)."""
    if status.get("batch_costs"):
        return status["batch_costs"]
    last = (status.get("num_input_rows"), status.get("last_batch_duration_ms"))
    return [last] if all(isinstance(v, (int, float)) for v in last) else []


def _timing(records: int, timing) -> dict:
    if timing is None or timing.seconds <= 0:
        return {}
    return {"seconds": timing.seconds, "rate_per_second": records / timing.seconds if records else None,
            "seconds_upper_bound": timing.upper_bound, "measured_batches": timing.batches,
            "largest_batch": timing.largest}


def read_again(deployed: DeployedResource, now: Mapping[str, Mapping[str, tuple[int, int]]] | None) -> int | None:
    """Of what a replay from the earliest offsets re-reads, the records the deployed version read already (its
    checkpoint's last committed offsets, down to each partition's first offset held `now`): what they produced
    reaches the sink's readers again. None when a source's offsets cannot be said (a store without offsets)."""
    from dsflow.core.engines import engine

    topics = list(deployed.outputs.get("topics") or [])
    checkpoint = Path(deployed.outputs.get("checkpoint") or "")
    committed = (engine().committed_offsets(checkpoint) if topics and checkpoint.is_dir() else None) or []
    if not topics or now is None:
        return None
    total = 0
    for topic, offsets in zip(topics, committed, strict=False):
        for partition, (first, _) in now.get(topic, {}).items():
            done = offsets.get(partition)
            total += max(0, int(done) - first) if isinstance(done, int) else 0
    return total


def gone_records(read_from: Mapping[str, Mapping[str, int]],
                 now: Mapping[str, Mapping[str, tuple[int, int]]] | None) -> dict[str, int]:
    """By source log: records the deployed version read, from the first offsets it started at (`read_from`,
    recorded by engine/executors.py), that the log no longer holds: its first offsets `now` are past them (deleted
    by retention, or on request). {} when the stores cannot say their offsets."""
    if not read_from or now is None:
        return {}
    gone = {}
    for log, starts in read_from.items():
        held = now.get(log, {})
        lost = sum(max(0, held[partition][0] - int(first)) for partition, first in starts.items()
                   if partition in held)
        if lost:
            gone[log] = lost
    return gone


def skipped_records(project, deployed: DeployedResource) -> int | None:
    """Records a deployed query's sources hold now past the offsets of its checkpoint's last committed batch (all
    they hold when nothing was committed): what a reset of its checkpoint to their end offsets skips; None when a
    source's store cannot say its offsets."""
    from dsflow.adapters.objects import positions
    from dsflow.core.engines import engine

    topics = list(deployed.outputs.get("topics") or [])
    now = positions(project, topics) if topics else None
    if now is None:
        return None
    checkpoint = Path(deployed.outputs.get("checkpoint") or "")
    committed = (engine().committed_offsets(checkpoint) if checkpoint.is_dir() else None) or []
    done = dict(zip(topics, committed, strict=False))
    total = 0
    for topic in topics:
        for partition, (first, end) in now[topic].items():
            read = done.get(topic, {}).get(partition, first)
            total += max(0, end - max(first, int(read) if isinstance(read, int) else first))
    return total


def record_count(project, deployed: DeployedResource) -> int | None:
    """Records a deployed relation's object (topic, stream, table) holds now, for a plan that would delete or
    empty it; None when it cannot be counted (a store that cannot count or cannot be reached)."""
    from dsflow.adapters.objects import held_records

    return held_records(project, deployed.outputs, deployed.data)


def foreign_logs(project, carried: Mapping[str, DeployedResource]) -> dict[str, str]:
    """Which of each deployed query's source logs (topics, streams) is now another log than the one its offsets were
    read from (deleted and created again, or gone), in words, by query address; a query whose logs are all the same
    (or that recorded no ids) is left out. One request per store for every query's logs."""
    from dsflow.adapters.objects import identities
    from dsflow.core.safety import changed_logs
    from dsflow.errors import DsflowError

    recorded = {key: deployed.outputs.get("logs") or {} for key, deployed in carried.items()}
    names = {name for logs in recorded.values() for name in logs}
    if not names:
        return {}
    try:
        current = identities(project, names)
    except DsflowError:
        return {}  # the broker cannot be asked now; apply checks again before it carries anything
    found = {}
    for key, logs in recorded.items():
        if logs and (changed := changed_logs(logs, current)):
            found[key] = f"source {', '.join(changed)} was deleted and created again since its offsets were read"
    return found


def schema_refusals(project, evolving: tuple[str, ...]) -> dict[str, str]:
    """Why the live registry would reject the new schema of each query sink whose columns change in place, by
    relation address (DSF-E841's message; left out when it accepts it). When the subject already has the relation's
    level, the registry's own check (/compatibility) decides; else (apply sets the level first) the rule is checked
    against the subject's versions as the registry holds them, so versions registered outside dsflow count too."""
    refusals = {}
    for address in evolving:
        relation = project.relation(Address.parse(address).name)
        if relation is not None and relation.defined_by_query and (why := _refusal(project, relation, address)):
            refusals[address] = why
    return refusals


def _refusal(project, relation, address: str) -> str | None:
    from dsflow.formats import registry
    from dsflow.core.engines import engine
    from dsflow.core.evolution import DEFAULT_RULE, incompatibility
    from dsflow.core.formats import columns_from_avro

    settings = engine().sink_format(project, relation)
    config, subject = settings["registry"], settings["value_subject"]
    rule = relation.schema_compatibility or DEFAULT_RULE
    columns = [(c.name, c.type) for c in relation.columns]
    if relation.value_format == "avro":  # the types as the registry's versions read back
        columns = columns_from_avro(settings["value_schema"])
    if registry.compatibility(config, subject) == rule:
        accepted = registry.accepts(config, subject, settings["value_schema"], settings["value_format"])
        why = None if accepted else "the registry's compatibility check refuses it"
    else:
        why = incompatibility(registry.subject_history(config, subject, relation.value_format), columns, rule,
                              relation.value_format)
    return None if why is None else f"{address}: registry subject '{subject}' would reject the new schema under " \
                                    f"{rule}: {why}"


def check_still_observed(plan, project) -> None:
    """DSF-E827, before apply changes anything: a fact a change of the plan relies on is no longer what the refresh
    saw when the plan was made (plan.observations). Looked at again, one request per store: the log a new relation
    names (a plan that creates a topic must not take over one made since, nor adopt one deleted since), the log
    a stream grows in place, the columns of a table an import adopts (altered or dropped since), and the driver of a
    query an import adopts (stopped, or running another version since). Record counts,
    estimates and drift move all the time and decide nothing apply does."""
    from dsflow.core.plan import Action
    from dsflow.errors import DsflowError

    seen = plan.observations
    relied = [c for c in plan.actionable if c.address in seen.log_sizes and c.after is not None
              and (c.action is Action.CREATE or (c.action is Action.UPDATE and c.address in seen.growable))]
    tables = [c.address for c in plan.actionable if c.imported is not None
              and (o := seen.resources.get(c.address)) is not None and o.columns is not None]
    drivers = {c.address: c.imported for c in plan.actionable if c.imported is not None
               and (o := seen.resources.get(c.address)) is not None and o.running is not None}
    if not seen.refreshed or not (relied or tables or drivers):
        return
    stale = (_changed_logs(project, relied, seen.log_sizes) if relied else []) + \
        _changed_tables(project, tables, seen.resources) + _changed_drivers(project, drivers, seen.resources)
    if stale:
        raise DsflowError("DSF-E827", "the live systems changed since the plan was made; nothing was applied: "
                          + "; ".join(stale), hint="run 'dsflow plan' again: a new plan is made from what they "
                                                   "show now")


def _changed_logs(project, relied: list, observed: Mapping[str, int | None]) -> list[str]:
    """Each relied-on log whose size (or existence) differs now from `observed`, in words; a log whose store cannot
    be asked now is left out (apply meets that store anyway)."""
    from dsflow.adapters.objects import log_sizes
    from dsflow.core.physical import physical_object

    relations = [r for c in relied if (r := project.relation(Address.parse(c.address).name)) is not None]
    now = log_sizes(project, relations)
    types = {s.name: s.type for s in project.stores}
    found = []
    for change in relied:
        fqn = Address.parse(change.address).name
        if fqn not in now or now[fqn] == observed[change.address]:
            continue
        then, current = (_size_words(change.after, size, types) for size in (observed[change.address], now[fqn]))
        found.append(f"{change.address} ({change.action.value}): {physical_object(change.after, types)} was "
                     f"{then} when the plan was made, and is {current} now")
    return found


def _changed_tables(project, addresses: list[str], observed: Mapping[str, Observation]) -> list[str]:
    """Each imported table whose columns (or existence) differ now from what the plan was made against, in words; a
    table whose store cannot be asked now is left out (apply meets that store anyway)."""
    if not addresses:
        return []
    now = observe_tables(project, tuple(addresses))
    found = []
    for address in addresses:
        current = now.get(address)
        if current is None or current.detail.startswith("cannot look at") or \
                (current.columns, current.refused) == (observed[address].columns, observed[address].refused):
            continue
        found.append(f"{address} (import): {observed[address].detail} when the plan was made, and {current.detail} "
                     "now")
    return found


def _changed_drivers(project, drivers: Mapping[str, str], observed: Mapping[str, Observation]) -> list[str]:
    """Each imported query whose driver is no longer the one (or runs no longer the version) the plan was made
    against, in words."""
    now = observe_drivers(project, drivers) if drivers else {}
    found = []
    for address in sorted(drivers):
        then, current = observed[address].running or {}, now[address].running or {}
        if current.get("outputs") != then.get("outputs"):
            found.append(f"{address} (import): {observed[address].detail} when the plan was made, and "
                         f"{now[address].detail} now")
    return found


def _size_words(data: dict, partitions: int | None, types: Mapping[str, str]) -> str:
    from dsflow.core.physical import log_size

    return "absent" if partitions is None else f"there with {log_size({**data, 'partitions': partitions}, types)}"
