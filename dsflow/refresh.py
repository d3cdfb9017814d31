"""Refresh: look at the real systems to find drift before planning (dead queries, missing topics)."""

from __future__ import annotations

import json
from pathlib import Path

from dsflow.adapters import process
from dsflow.core.address import Address, Kind
from dsflow.core.plan import Estimate, Observation
from dsflow.core.state import DeployedResource, State


def refresh(state: State, project=None) -> dict[str, Observation]:
    """One observation per deployed query, datagen and relation (store settings from the project if known)."""
    observations: dict[str, Observation] = {}
    topics_by_bootstrap: dict[str, dict[str, int] | str] = {}
    for key, deployed in state.resources.items():
        kind = Address.parse(key).kind
        if kind is Kind.QUERY:
            observations[key] = _observe_query(deployed)
        elif kind is Kind.DATAGEN:
            observations[key] = _observe_datagen(deployed)
        elif kind is Kind.RELATION and deployed.data.get("kind") == "materialized_view" and deployed.data.get("store"):
            from dsflow.adapters.postgres.views import observe_view

            observations[key] = observe_view(project, deployed)
        elif kind is Kind.GRANT and deployed.outputs.get("postgresql"):
            from dsflow.adapters.postgres.grants import observe_grant

            observations[key] = observe_grant(project, deployed)
        elif kind is Kind.RELATION and deployed.outputs.get("kinesis_stream"):
            from dsflow.adapters.kinesis.executor import observe as observe_stream

            observations[key] = observe_stream(project, deployed)
        elif kind is Kind.RELATION and deployed.outputs.get("slot"):
            from dsflow.adapters.postgres.executor import observe

            observations[key] = observe(project, deployed)
        elif kind is Kind.RELATION:
            observation = _observe_topic(deployed, topics_by_bootstrap, _store_properties(project, deployed),
                                         _store_bootstrap(project, deployed))
            if observation is not None:
                observations[key] = observation
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
    from dsflow.executors import query_marker  # executors import the Spark translation (sqlglot): plan may not need it

    running = process.is_running(deployed.outputs.get("pid"), query_marker(deployed.outputs))
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
    from dsflow.executors import datagen_marker

    count = deployed.data.get("count")
    running = process.is_running(deployed.outputs.get("pid"), datagen_marker(deployed.outputs.get("run_dir")))
    healthy = running or count is not None
    return Observation(address=deployed.address, healthy=healthy,
                       detail="running" if running else "generator process is not running")


def _store_properties(project, deployed: DeployedResource) -> dict[str, str] | None:
    store = project.store(deployed.outputs.get("store", "")) if project is not None else None
    return dict(store.properties) if store is not None else None


def _store_bootstrap(project, deployed: DeployedResource) -> str | None:
    """The store's bootstrap address: a topic whose address came from env_var() records none in the state."""
    store = project.store(deployed.outputs.get("store", "")) if project is not None else None
    recorded_topic = deployed.outputs.get("topic") and "created_by_dsflow" in deployed.outputs
    return store.bootstrap_servers if recorded_topic and store is not None and store.type == "kafka" else None


def _unreachable(err, store: str, extra: dict[str, str], bootstrap: str) -> str:
    """Why a store's topics could not be listed: a secured store's failed TLS or SASL says so (DSF-E255)."""
    from dsflow.adapters.kafka.security import store_error

    named = store_error(err, store, extra) if store else err
    return f"{named.code}: {named.message}" if named.code == "DSF-E255" else f"broker {bootstrap} is unreachable"


def _observe_topic(deployed: DeployedResource, cache: dict[str, dict[str, int] | str],
                   extra: dict[str, str] | None = None, fallback: str | None = None) -> Observation | None:
    from dsflow.adapters.kafka.admin import partition_counts
    from dsflow.core.secrets import scrub
    from dsflow.errors import DsflowError

    bootstrap = deployed.outputs.get("bootstrap") or fallback
    if not bootstrap:
        return None
    if bootstrap not in cache:
        try:
            cache[bootstrap] = partition_counts(bootstrap, extra)
        except DsflowError as err:  # kept as why: the same for every topic of the broker
            cache[bootstrap] = _unreachable(err, deployed.outputs.get("store", ""), extra or {}, bootstrap)
    topics = cache[bootstrap]
    if not isinstance(topics, dict):
        return Observation(address=deployed.address, healthy=False, detail=scrub(str(topics)))
    topic = deployed.outputs.get("topic")
    if topic not in topics:
        return Observation(address=deployed.address, healthy=False, detail="topic is missing")
    expected = deployed.data.get("partitions")
    if expected and topics[topic] != expected:
        return Observation(address=deployed.address, healthy=False,
                           detail=f"topic has {topics[topic]} partitions, the project declares {expected}")
    return Observation(address=deployed.address, healthy=True, detail="topic exists")


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
