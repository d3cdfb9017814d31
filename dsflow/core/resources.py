"""A project as a flat set of resources, each with dependencies and two fingerprints.

The data hash covers what, when changed, forces a replacement (a topic's partitions, a query's
SQL); the metadata hash covers what can change in place (a trigger interval, a description).
Secret values never enter a resource: they are replaced by their keyed marker (core/secrets.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from dsflow.core.address import Address, Kind
from dsflow.core.model import BUILTIN_ROLES, ORGANIZATION, Function, Nested, Project, Relation, Store, View
from dsflow.core.secrets import LegacyRedactor, Redactor
from dsflow.core.state import State
from dsflow.core.settings import SettingClass, fields_of


@dataclass(frozen=True)
class Resource:
    """One managed object: its address, what it depends on, and its attributes."""

    address: Address
    depends_on: tuple[Address, ...]
    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)
    keep_deployed: tuple[str, ...] = ()
    """Data fields that keep their deployed value once deployed (a topic size inferred from a source)."""

    @cached_property
    def data_hash(self) -> str:
        """Computed once: a plan reads it several times per resource (the data is not changed after creation)."""
        return fingerprint(self.data)

    @cached_property
    def metadata_hash(self) -> str:
        return fingerprint(self.metadata)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
"""What `json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)` builds on every call, built once: a
plan fingerprints every resource twice."""


def fingerprint(value: Any) -> str:
    text = _ENCODER.encode(value)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def project_resources(project: Project, redactor: Redactor = Redactor()) -> list[Resource]:
    """Every resource the project declares, in declaration order. Secret values become `redactor`'s markers; the
    default (no key) gives every secret the same bare marker: enough for addresses and dependencies, not for a plan."""
    resources: list[Resource] = [_store(s, redactor) for s in project.stores]
    resources += [Resource(Address(Kind.DATABASE, d.name), (), {"name": d.name},
                           {"description": d.description, **_owner(d)}) for d in project.databases]
    resources += [Resource(Address(Kind.SCHEMA, s.fqn), (Address(Kind.DATABASE, s.database),), {"name": s.fqn},
                           _owner(s)) for s in project.schemas]
    resources += [_relation(r) for r in project.relations]
    resources += [_function(f) for f in project.functions]
    resources += [_view(project, v) for v in project.views]
    store_configs: dict[tuple[str, ...], str] = {}  # many queries use the same stores: hashed once per set
    resources += [_query(project, q, store_configs, redactor) for q in project.queries]
    resources += [
        Resource(Address(Kind.DATAGEN, g.name), (Address(Kind.RELATION, g.relation),),
                 {"relation": g.relation, "generator": g.generator, "seed": g.seed, "count": g.count},
                 {"rate": g.rate})
        for g in project.datagens
    ]
    resources += [Resource(Address(Kind.ROLE, r.name), _roles(r.inherits),
                           {"name": r.name, "inherits": list(r.inherits)}) for r in project.roles]
    resources += [Resource(Address(Kind.BINDING, b.user), _roles(b.roles), {"user": b.user, "roles": list(b.roles)},
                           {"login_password": redactor.mark(b.login_password)} if b.login_password else {})
                  for b in project.bindings]
    resources += [
        Resource(Address(Kind.GRANT, g.key),
                 _roles((g.role,)) + (() if g.on == ORGANIZATION else (Address.parse(g.on),)),
                 {"role": g.role, "privilege": g.privilege, "on": g.on})
        for g in project.grants
    ]
    return resources


ACCESS_METADATA = ("owner",)
"""Metadata fields that only the access model reads: a change to them alone touches nothing deployed."""


def _owner(obj: Any) -> dict[str, str]:
    """{'owner': role} when the object declares its owner; {} otherwise (plans of projects without owners keep
    their shape)."""
    return {"owner": obj.owner} if obj.owner else {}


def _roles(names: tuple[str, ...]) -> tuple[Address, ...]:
    """The role resources among `names` (the built-in roles are no resources: every organization has them)."""
    return tuple(Address(Kind.ROLE, n) for n in names if n not in BUILTIN_ROLES)


def access_only(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether two metadata dicts differ in ACCESS_METADATA fields only (and do differ): an ownership change."""
    keys = (set(before) | set(after)) - set(ACCESS_METADATA)
    return before != after and all(before.get(k) == after.get(k) for k in keys)


def _store(store: Store, redactor: Redactor) -> Resource:
    properties = {k: (redactor.mark(v) if k in store.sensitive else v) for k, v in store.properties.items()}
    bootstrap = store.bootstrap_servers
    bootstrap = redactor.mark(bootstrap) if "bootstrap_servers" in store.sensitive else bootstrap
    return Resource(
        Address(Kind.STORE, store.name), (),
        {"type": store.type, "bootstrap_servers": bootstrap},
        {"properties": properties, "description": store.description,
         **({"schema_registry": store.schema_registry} if store.schema_registry else {}), **_owner(store)},
    )


def _relation(relation: Relation) -> Resource:
    database, schema, _ = relation.fqn.split(".")
    deps = [Address(Kind.STORE, relation.store)] if relation.store else []
    deps.append(Address(Kind.SCHEMA, f"{database}.{schema}"))
    data = {
        "kind": relation.kind,
        "columns": [[c.name, c.type] for c in relation.columns],
        "primary_key": list(relation.primary_key),
        "store": relation.store,
        "topic": relation.topic,
        "value_format": relation.value_format,
        "partitions": relation.partitions,
        "replicas": relation.replicas,
        "topic_configs": relation.topic_configs,
    }
    if relation.table_options:
        data["table_options"] = relation.table_options
    if relation.value_subject:
        data["value_subject"] = relation.value_subject
    metadata: dict[str, Any] = {"timestamp": relation.timestamp, "key_format": relation.key_format}
    if relation.topic_gaps is not None:
        metadata["topic_gaps"] = relation.topic_gaps
    if relation.prevent_destroy:
        metadata["prevent_destroy"] = True
    if relation.schema_compatibility:
        metadata["schema_compatibility"] = relation.schema_compatibility
    if relation.contract:  # only when set: a project without contracts plans as before
        metadata["contract"] = "enforced"
    if relation.version is not None:
        metadata["version"] = relation.version
    if relation.deploy is not None:
        metadata["deploy"] = relation.deploy
    if relation.deploy_retention_ms is not None:
        metadata["deploy_retention_ms"] = relation.deploy_retention_ms
    metadata.update(_owner(relation))
    return Resource(Address(Kind.RELATION, relation.fqn), tuple(deps), data, metadata, relation.inferred_size)


def _function(function: Function) -> Resource:
    """A user-defined function: nothing is deployed for it (each query's driver registers it); its signature and
    code are metadata, so a change updates it in place and restarts the queries that call it."""
    return Resource(Address(Kind.FUNCTION, function.name), (), {"language": "python"},
                    {**function.identity, "path": function.path})


def _view(project: Project, view: View) -> Resource:
    """A view (CREATE VIEW): nothing is deployed for it; its SQL is inlined into the queries that read it (their
    data holds it), so a change to it is recorded in place and replaces them."""
    views = {v.fqn for v in project.views}
    deps = tuple(Address(Kind.VIEW if s in views else Kind.RELATION, s) for s in view.sources)
    return Resource(Address(Kind.VIEW, view.fqn), deps, {"kind": "view"}, {"select": view.select_sql})


def _query(project: Project, query, store_configs: dict[tuple[str, ...], str], redactor: Redactor) -> Resource:
    deps = [Address(Kind.RELATION, s.relation) for s in query.sources]
    deps.append(Address(Kind.RELATION, query.sink))
    deps += [Address(Kind.FUNCTION, name) for name in query.functions]
    deps += [Address(Kind.VIEW, fqn) for fqn in query.views]
    data = {
        "statement": query.statement,
        "sink": query.sink,
        "sources": [[s.relation, s.alias, s.starting_position] + ([s.timestamp] if s.timestamp else [])
                    for s in query.sources],
        "select": query.select_sql,
        "output_columns": [[c.name, c.type] for c in query.output_columns],
        "stateful": query.stateful,
        **_stateful_data(query),
    }
    if query.views:  # the views its SELECT reads (inlined into it): a change to one replaces it
        data["views"] = {v.fqn: v.select_sql for v in project.views if v.fqn in query.views}
    if any(s.lookup for s in query.sources):
        data["lookup"] = [s.alias for s in query.sources if s.lookup]
    metadata = {
        "trigger_interval": query.trigger_interval,
        "start_position": query.start_position,
        "spark_conf": query.spark_conf,
        "spark_master": project.runtime.spark_master,
        "runtime_spark_conf": project.runtime.spark_conf,
        "store_config": _store_config(project, tuple(_stores_used(project, query)), store_configs, redactor),
    }
    if query.dlq_topic:
        metadata["dlq_topic"] = query.dlq_topic
    if query.expectations:  # metadata: a rule added, changed or dropped restarts the query on its checkpoint
        metadata["expectations"] = [[e.name, e.condition, e.action] for e in query.expectations]
    if query.functions:  # metadata: a called function's code or signature changed restarts it on its checkpoint
        called = {f.name: f for f in project.functions}
        metadata["functions"] = {name: fingerprint(called[name].identity) for name in query.functions}
    if query.deserialization_errors:
        metadata["deserialization_errors"] = query.deserialization_errors
    if (query.isolation or project.runtime.isolation) == "shared":
        metadata["isolation"] = "shared"  # only when shared: a project in the default mode plans as before
    metadata.update(_owner(query))
    settings = _relation_settings(project, [s.relation for s in query.sources] + [query.sink])
    if settings:
        metadata["relation_settings"] = settings
    used = [_known_store(project, name) for name in _stores_used(project, query)]
    registries = [_registry(project.schema_registry(store.schema_registry), redactor)
                  for store in used if store.schema_registry]
    if registries:
        metadata["schema_registry"] = fingerprint(registries)
    return Resource(Address(Kind.QUERY, query.fqn), tuple(dict.fromkeys(deps)), data, metadata)


def _store_config(project: Project, names: tuple[str, ...], known: dict[tuple[str, ...], str],
                  redactor: Redactor) -> str:
    """The fingerprint of the settings of the stores a query uses, computed once per set of stores."""
    if names not in known:
        known[names] = fingerprint([_store(_known_store(project, name), redactor).metadata["properties"]
                                    for name in names])
    return known[names]


def _registry(registry, redactor: Redactor) -> dict[str, str]:
    """A schema registry's settings as a query's metadata sees them: secrets redacted."""
    if registry is None:
        return {}
    values = {"url": registry.url, "username": registry.username, "password": registry.password}
    return {k: (redactor.mark(v) if k in registry.sensitive else v) for k, v in values.items()}


def has_secrets(project: Project) -> bool:
    """True if any value of the project came from env_var(): its resources need the state's redaction key."""
    return any(s.sensitive for s in project.stores) or any(r.sensitive for r in project.schema_registries) \
        or any(b.login_password for b in project.bindings)


def with_current_markers(project: Project, state: State, resources: list[Resource]) -> State:
    """`state` with the entries recorded under the legacy unkeyed markers (same secret values, nothing else
    changed) carrying `resources`' keyed markers and hashes instead, so an upgrade plans no change; an entry
    whose secret changed since keeps its old marker and the plan shows the change."""
    differ = [r for r in resources if (d := state.resources.get(str(r.address))) is not None
              and (d.data_hash, d.metadata_hash) != (r.data_hash, r.metadata_hash)]
    if not differ or not has_secrets(project):
        return state
    legacy = {str(r.address): r for r in project_resources(project, LegacyRedactor())}
    updated = dict(state.resources)
    for resource in differ:
        key = str(resource.address)
        deployed, old = state.resources[key], legacy.get(key)
        if old is None or (deployed.data_hash, deployed.metadata_hash) != (old.data_hash, old.metadata_hash):
            continue
        updated[key] = deployed.model_copy(update={
            "data": resource.data, "metadata": resource.metadata,
            "data_hash": resource.data_hash, "metadata_hash": resource.metadata_hash})
    return state.model_copy(update={"resources": updated})


def _stateful_data(query) -> dict[str, Any]:
    """What windows, joins, aggregations and guarantees add to a query's data; absent when they are not used."""
    data: dict[str, Any] = {}
    if query.output_mode != "append":
        data["output_mode"] = query.output_mode
    if query.key_columns:
        data["key_columns"] = list(query.key_columns)
    if query.window is not None:
        # processing_time only when set: a project without processing time plans as before
        data["window"] = query.window.model_dump(exclude=set() if query.window.processing_time else {"processing_time"})
    if query.join_within:
        data["join_within"] = query.join_within
    if query.regular_joins:
        data["regular_joins"] = [j.stream for j in query.regular_joins]
    if query.window is not None or query.join_within:
        data["watermark_delay"] = query.watermark_delay
    if query.deletes != "none":
        data["deletes"] = query.deletes
    if query.trigger != "micro-batch":  # data: another kind of checkpoint (core/categories.py)
        data["trigger"] = query.trigger
    if query.temporal_join is not None:
        data["temporal_join"] = query.temporal_join.model_dump(mode="json")  # lists, as read back from state
        data["watermark_delay"] = query.watermark_delay
    if query.join_chain:
        data["join_chain"] = [j.model_dump(mode="json") for j in query.join_chain]
        if query.changelog_join is None:  # joins of streams; a chain of changelogs has no event time
            data["watermark_delay"] = query.watermark_delay
    if query.changelog_join is not None:
        # lists, as read back from state; `streams` only when set (a deployed join of changelogs keeps its data)
        data["changelog_join"] = query.changelog_join.model_dump(mode="json", exclude=set() if
                                                                 query.changelog_join.streams else {"streams"})
    if query.top_n is not None:
        data["top_n"] = query.top_n.model_dump(mode="json")
    if query.over is not None:  # sql/over.py: its rows wait for the watermark
        data["over"] = query.over.model_dump(mode="json")
        data["watermark_delay"] = query.watermark_delay
    if query.delivery_guarantee != "at-least-once":
        data["delivery_guarantee"] = query.delivery_guarantee
    if query.nested:  # subqueries (sql/nested.py): their SQL is not in the query's own
        data["nested"] = [_nested_data(n) for n in query.nested]
        data["watermark_delay"] = query.watermark_delay
    if query.stacked is not None:  # a subquery (sql/stacked.py): its SQL is not in the query's own
        data["stacked"] = query.stacked.model_dump(mode="json", exclude={"sources"})
    return data


def _nested_data(nested: Nested) -> dict:
    """A subquery's fingerprinted fields; a subquery in it and a stream's bound only when it has them (a query over
    subqueries fingerprinted before they existed keeps its hash)."""
    data = nested.model_dump(mode="json", exclude={"sources", "nested", "stream_bound"})
    if nested.nested:
        data["nested"] = [_nested_data(n) for n in nested.nested]
    if nested.stream_bound is not None:
        data["stream_bound"] = list(nested.stream_bound)
    return data


RUNTIME_RELATION_SETTINGS = fields_of("relation", SettingClass.RESTARTS)
"""Relation settings a running query applies while it reads or writes (key codec, event-time column, what a read
does with empty offsets; core/settings.py): a change to one restarts every query that reads or writes the relation."""


def _relation_settings(project: Project, names: list[str]) -> dict[str, dict[str, str]]:
    """The RUNTIME_RELATION_SETTINGS that are set, per relation the query reads or writes ({} if none)."""
    found = {}
    for name in dict.fromkeys(names):
        relation = project.relation(name)
        values = {k: v for k in RUNTIME_RELATION_SETTINGS if (v := getattr(relation, k, None)) is not None}
        if values:
            found[name] = values
    return found


def _stores_used(project: Project, query) -> list[str]:
    names = []
    for fqn in [s.relation for s in query.sources] + [query.sink]:
        relation = project.relation(fqn)
        assert relation is not None  # a loaded project's queries name its relations
        names.append(relation.store)
    return sorted(n for n in set(names) if n)


def _known_store(project: Project, name: str) -> Store:
    """A store the project's relations name: it has it."""
    store = project.store(name)
    assert store is not None, name
    return store
