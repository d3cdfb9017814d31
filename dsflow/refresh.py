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
    topics_by_bootstrap: dict[str, dict[str, int] | None] = {}
    for key, deployed in state.resources.items():
        kind = Address.parse(key).kind
        if kind is Kind.QUERY:
            observations[key] = _observe_query(deployed)
        elif kind is Kind.DATAGEN:
            observations[key] = _observe_datagen(deployed)
        elif kind is Kind.RELATION and deployed.data.get("kind") == "materialized_view" and deployed.data.get("store"):
            from dsflow.adapters.postgres.views import observe_view

            observations[key] = observe_view(project, deployed)
        elif kind is Kind.RELATION and deployed.outputs.get("kinesis_stream"):
            from dsflow.adapters.kinesis.executor import observe as observe_stream

            observations[key] = observe_stream(project, deployed)
        elif kind is Kind.RELATION and deployed.outputs.get("slot"):
            from dsflow.adapters.postgres.executor import observe

            observations[key] = observe(project, deployed)
        elif kind is Kind.RELATION:
            observation = _observe_topic(deployed, topics_by_bootstrap, _store_properties(project, deployed))
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
    from dsflow.executors import DRIVER_MODULE  # executors import the Spark translation (sqlglot): plan may not need it

    running = process.is_running(deployed.outputs.get("pid"), DRIVER_MODULE)
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
    from dsflow.executors import DATAGEN_MODULE

    count = deployed.data.get("count")
    running = process.is_running(deployed.outputs.get("pid"), DATAGEN_MODULE)
    healthy = running or count is not None
    return Observation(address=deployed.address, healthy=healthy,
                       detail="running" if running else "generator process is not running")


def _store_properties(project, deployed: DeployedResource) -> dict[str, str] | None:
    store = project.store(deployed.outputs.get("store", "")) if project is not None else None
    return dict(store.properties) if store is not None else None


def _observe_topic(deployed: DeployedResource, cache: dict[str, dict[str, int] | None],
                   extra: dict[str, str] | None = None) -> Observation | None:
    from dsflow.adapters.kafka.admin import partition_counts
    from dsflow.errors import DsflowError

    bootstrap = deployed.outputs.get("bootstrap")
    if not bootstrap:
        return None
    if bootstrap not in cache:
        try:
            cache[bootstrap] = partition_counts(bootstrap, extra)
        except DsflowError:
            cache[bootstrap] = None
    topics = cache[bootstrap]
    if topics is None:
        return Observation(address=deployed.address, healthy=False, detail=f"broker {bootstrap} is unreachable")
    topic = deployed.outputs.get("topic")
    if topic not in topics:
        return Observation(address=deployed.address, healthy=False, detail="topic is missing")
    expected = deployed.data.get("partitions")
    if expected and topics[topic] != expected:
        return Observation(address=deployed.address, healthy=False,
                           detail=f"topic has {topics[topic]} partitions, the project declares {expected}")
    return Observation(address=deployed.address, healthy=True, detail="topic exists")


def replay_estimate(project, change, deployed: DeployedResource | None) -> Estimate | None:
    """Records a replay re-reads (from the sources' current offsets) and the time at the measured rate."""
    from dsflow.adapters.kafka import client
    from dsflow.errors import DsflowError

    query = next((q for q in project.queries if f"query.{q.fqn}" == change.address), None)
    if query is None:
        return None
    total = 0
    for source in query.sources:
        relation = project.relation(source.relation)
        store = project.store(relation.store)
        if store is None or store.type in ("postgresql", "kinesis"):  # CDC: a new snapshot; Kinesis: no counts
            return None
        try:
            total += _records_from(client, store, relation.topic, change.override)
        except DsflowError:
            return None
    rate = (query_status(deployed).get("processed_rows_per_second") if deployed else None) or None
    return Estimate(records=total, rate_per_second=rate, seconds=(total / rate) if rate else None)


def _records_from(client, store, topic: str, override: str | None) -> int:
    return _held_records(client, client.client_config(store.bootstrap_servers, store.properties), topic, override)


def _held_records(client, config: dict, topic: str, override: str | None = None) -> int:
    """Records of `topic` from the first held (or those at the timestamp `override`) to the true end offsets."""
    from confluent_kafka import TopicPartition

    with client.consumer(config) as consumer:
        parts = client.topic_partitions(consumer, topic)
        ends = client.end_offsets(consumer, topic, parts)
        if override and override.isdigit():
            found = consumer.offsets_for_times([TopicPartition(topic, p, int(override)) for p in parts],
                                               timeout=client.REQUEST_TIMEOUT)
            starts = {tp.partition: (tp.offset if tp.offset >= 0 else ends[tp.partition]) for tp in found}
        else:
            starts = client.start_offsets(consumer, topic, parts)
    return sum(max(0, ends[p] - starts.get(p, 0)) for p in parts)


def record_count(project, deployed: DeployedResource) -> int | None:
    """Records a deployed relation's topic holds now (end offsets minus the first held), for a plan that would
    delete or empty it; None when it cannot be counted (not a Kafka topic, broker unreachable, topic gone)."""
    from dsflow.adapters.kafka import client
    from dsflow.errors import DsflowError

    bootstrap, topic = deployed.outputs.get("bootstrap"), deployed.outputs.get("topic")
    if not bootstrap or not topic:
        return None
    try:
        client.assert_reachable(bootstrap)
        return _held_records(client, client.client_config(bootstrap, _store_properties(project, deployed)), topic)
    except DsflowError:
        return None


def foreign_log(project, deployed: DeployedResource) -> str | None:
    """Which of a deployed query's source topics is now another log than the one its offsets were read from
    (deleted and created again, or gone), in words; None when all are the same (or no ids were recorded)."""
    from dsflow.adapters.kafka.admin import current_topic_ids
    from dsflow.core.safety import changed_logs
    from dsflow.errors import DsflowError

    recorded = deployed.outputs.get("logs") or {}
    if not recorded:
        return None
    try:
        current = current_topic_ids(project, list(recorded))
    except DsflowError:
        return None  # the broker cannot be asked now; apply checks again before it carries anything
    changed = changed_logs(recorded, current)
    return f"source topic {', '.join(changed)} was deleted and created again since its offsets were read" \
        if changed else None
