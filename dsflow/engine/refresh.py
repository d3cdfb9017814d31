"""Refresh: look at the real systems to find drift before planning (dead queries, missing topics)."""

from __future__ import annotations

import json
from pathlib import Path

from dsflow.adapters import process
from dsflow.core.address import Address, Kind
from dsflow.core.plan import Estimate, Observation
from dsflow.core.state import DeployedResource, State


def refresh(state: State, project=None) -> dict[str, Observation]:
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


def observe_new_logs(state: State, project) -> dict[str, Observation]:
    """One observation per stream or changelog not yet deployed whose store kind can look at its log: whether the
    log exists already (the plan adopts it as it is, with its own size) and its partitions or shards."""
    from dsflow.adapters.objects import log_sizes
    from dsflow.core.physical import log_size, physical_object

    new = [r for r in project.relations if r.kind in ("stream", "changelog")
           and f"relation.{r.fqn}" not in state.resources and project.store(r.store) is not None]
    if not new:
        return {}
    sizes = log_sizes(project, new)
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
    return observations


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

    running = process.is_running(deployed.outputs.get("pid"), query_identity(deployed.outputs))
    status = query_status(deployed)
    checkpoint = deployed.outputs.get("checkpoint")
    if checkpoint and status.get("batch_id") is not None and not Path(checkpoint).is_dir():
        return Observation(address=deployed.address, healthy=False,
                           detail="checkpoint is gone; the query restarts from its starting position")
    if running and status.get("state") != "failed":
        return Observation(address=deployed.address, healthy=True, detail="running")
    if status.get("state") == "failed":
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


def replay_estimate(project, change, deployed: DeployedResource | None) -> Estimate | None:
    """Records a replay re-reads (from the sources' current positions, asked of each source's store) and the time
    at the measured rate; None when a source's store cannot count (a CDC source takes a new snapshot)."""
    from dsflow.adapters.objects import held_records

    query = next((q for q in project.queries if f"query.{q.fqn}" == change.address), None)
    if query is None:
        return None
    total = 0
    for source in query.sources:
        relation = project.relation(source.relation)
        count = held_records(project, {"store": relation.store, "topic": relation.topic}, {}, change.override)
        if count is None:
            return None
        total += count
    rate = (query_status(deployed).get("processed_rows_per_second") if deployed else None) or None
    return Estimate(records=total, rate_per_second=rate, seconds=(total / rate) if rate else None)


def record_count(project, deployed: DeployedResource) -> int | None:
    """Records a deployed relation's object (topic, stream, table) holds now, for a plan that would delete or
    empty it; None when it cannot be counted (a store that cannot count or cannot be reached)."""
    from dsflow.adapters.objects import held_records

    return held_records(project, deployed.outputs, deployed.data)


def foreign_log(project, deployed: DeployedResource) -> str | None:
    """Which of a deployed query's source logs (topics, streams) is now another log than the one its offsets were
    read from (deleted and created again, or gone), in words; None when all are the same (or no ids were recorded)."""
    from dsflow.adapters.objects import identities
    from dsflow.core.safety import changed_logs
    from dsflow.errors import DsflowError

    recorded = deployed.outputs.get("logs") or {}
    if not recorded:
        return None
    try:
        current = identities(project, recorded)
    except DsflowError:
        return None  # the broker cannot be asked now; apply checks again before it carries anything
    changed = changed_logs(recorded, current)
    return f"source {', '.join(changed)} was deleted and created again since its offsets were read" \
        if changed else None


def check_schema_evolution(project, plan) -> None:
    """Before a plan evolves a query sink's registry subject in place: DSF-E841 if the live registry would reject
    the new schema under the relation's rule. When the subject already has that level, the registry's own check
    (/compatibility) decides; else (apply sets the level first) the rule is checked against the subject's
    versions as the registry holds them, so versions registered outside dsflow count too."""
    from dsflow.core.plan import Action

    for change in plan.changes:
        if change.action is not Action.UPDATE or not change.before or not change.after \
                or change.before.get("columns") == change.after.get("columns") \
                or not change.after.get("value_subject"):
            continue
        relation = project.relation(Address.parse(change.address).name)
        if relation is not None and relation.defined_by_query:
            _check_subject(project, relation, change.address)


def _check_subject(project, relation, address: str) -> None:
    from dsflow.formats import registry
    from dsflow.adapters.spark.translate import sink_format
    from dsflow.core.evolution import DEFAULT_RULE, incompatibility
    from dsflow.core.formats import columns_from_avro
    from dsflow.errors import DsflowError

    settings = sink_format(project, relation)
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
    if why is not None:
        raise DsflowError("DSF-E841", f"{address}: registry subject '{subject}' would reject the new schema under "
                          f"{rule}: {why}", location=relation.location,
                          hint="undo the column change, or set the relation's 'value.schema.compatibility' to a rule "
                               "that allows it")
