"""Every setting a project declares, classified once: what a change to it does to the plan and to what runs.

One table (SETTINGS) says, for each setting of each kind of object, which resource field it lands in and its
class. The planner asks it which relation settings a running query applies (RESTARTS), and names changed
settings in a restarted query's reason from it; tests/unit/test_settings.py edits every setting of a small project and
checks the plan does what its class says; docs/plan.md shows the table as `markdown_table()` renders it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from dsflow.core import stores


class SettingClass(str, Enum):
    """What a change to a setting does."""

    IDENTITY = "identity"
    SCHEMA = "schema"
    SIZING = "sizing"
    RESTARTS = "restarts"
    QUERY = "query"
    OVERRIDE = "override"
    IN_PLACE = "in_place"
    NOT_DEPLOYED = "not_deployed"


CLASS_EFFECTS = {
    SettingClass.IDENTITY: "names the object: the object is replaced (a relation renamed onto the same topic or "
                           "table is a move); what reads it replays",
    SettingClass.SCHEMA: "what the records are: the relation is replaced (columns added at its end: in place)",
    SettingClass.SIZING: "how the topic or stream is sized: more partitions are added in place to a stream where "
                         "the broker can (CreatePartitions), otherwise the relation is replaced; partitions cannot be "
                         "lowered (DSF-E825); a size inferred from a source is fixed when the topic is created",
    SettingClass.RESTARTS: "what running queries read or write with: updated in place, and every deployed query "
                           "that uses it restarts on its checkpoint (a generator's rate: the generator restarts)",
    SettingClass.QUERY: "the query's definition: its category (keep checkpoint, carry offsets, replay) is decided "
                        "by core/categories.py",
    SettingClass.OVERRIDE: "overrides the category of the query's next change ('start.position')",
    SettingClass.IN_PLACE: "metadata only: the object is updated in place, nothing running changes",
    SettingClass.NOT_DEPLOYED: "kept in no deployed resource: a change plans nothing",
}


@dataclass(frozen=True)
class Setting:
    """One setting: where it is written, its name there, the resource fields it lands in, and its class."""

    kind: str
    name: str
    fields: tuple[str, ...]
    cls: SettingClass
    note: str = ""


_I, _SC, _SZ, _R = SettingClass.IDENTITY, SettingClass.SCHEMA, SettingClass.SIZING, SettingClass.RESTARTS
_Q, _O, _P, _N = SettingClass.QUERY, SettingClass.OVERRIDE, SettingClass.IN_PLACE, SettingClass.NOT_DEPLOYED
_SQL = ("statement", "sink", "sources", "select", "output_columns", "stateful", "output_mode", "key_columns",
        "window", "join_within", "deletes", "temporal_join", "changelog_join", "join_chain", "top_n", "over",
        "regular_joins", "nested", "stacked", "views", "lookup")
_TABLE = ("topic", "table_options")



def _store_settings() -> dict[str, list[Setting]]:
    """Object kind -> the settings the store kinds' rules (core/stores.py) add to it: the WITH properties that
    place a table, a view or a change stream (identity), and the configs of a log ('<config_prefix>*')."""
    found: dict[str, list[Setting]] = {}
    seen: set[int] = set()
    for kind in stores.REGISTRY.values():
        rules = kind.facet("rules")
        if rules is None or id(rules) in seen:
            continue
        seen.add(id(rules))
        for obj, name in getattr(rules, "setting_names", ()):
            found.setdefault(obj, []).append(Setting(obj, name, _TABLE, _I))
        if prefix := getattr(rules, "config_prefix", None):
            found.setdefault("relation configs", []).append(Setting("relation", f"{prefix}*", ("topic_configs",), _SZ))
            found.setdefault("table configs", []).append(Setting("table", f"{prefix}*", (), _N,
                                                                 "accepted, not used by a table"))
            found.setdefault("materialized_view configs", []).append(
                Setting("materialized_view", f"{prefix}*", (), _N, "accepted, not used by a view"))
    return found


_STORES = _store_settings()

SETTINGS: tuple[Setting, ...] = (
    Setting("store", "name", ("name",), _I),
    Setting("store", "type", ("type",), _I),
    Setting("store", "bootstrap_servers", ("bootstrap_servers",), _I, "another cluster"),
    Setting("store", "properties.*", ("properties",), _R, "client settings and credentials of every store type"),
    Setting("store", "schema_registry", ("schema_registry",), _R),
    Setting("store", "description", ("description",), _P),
    Setting("store", "owner", ("owner",), _P, "read by the access model only (docs/access.md)"),
    Setting("schema_registry", "name", (), _P, "the stores that name it are updated"),
    Setting("schema_registry", "url", (), _R),
    Setting("schema_registry", "username", (), _R),
    Setting("schema_registry", "password", (), _R),
    Setting("schema_registry", "description", (), _N),
    Setting("database", "name", ("name",), _I),
    Setting("database", "schemas", ("name",), _I, "a schema is its own resource"),
    Setting("database", "description", ("description",), _P),
    Setting("database", "owner", ("owner",), _P),
    Setting("schema", "name", ("name",), _I, "a schema written as {name: ..., owner: ...}"),
    Setting("schema", "owner", ("owner",), _P),
    Setting("role", "name", ("name",), _I),
    Setting("role", "inherits", ("inherits",), _I),
    Setting("role", "grants", ("role",), _I, "a grant is its own resource"),
    Setting("grant", "privilege", ("privilege",), _I),
    Setting("grant", "on", ("on",), _I),
    Setting("user", "name", ("user",), _I),
    Setting("user", "roles", ("roles",), _P, "the binding is updated in place"),
    Setting("user", "login_password", ("login_password",), _P, "the login's password is set again (a store with "
            "logins)"),
    Setting("datagen", "name", (), _I),
    Setting("datagen", "relation", ("relation",), _I),
    Setting("datagen", "generator", ("generator",), _I),
    Setting("datagen", "count", ("count",), _I),
    Setting("datagen", "seed", ("seed",), _I),
    Setting("datagen", "rate", ("rate",), _R),
    Setting("relation", "CREATE STREAM or CHANGELOG", ("kind",), _SC),
    Setting("relation", "columns", ("columns",), _SC),
    Setting("relation", "PRIMARY KEY", ("primary_key",), _SC),
    Setting("relation", "store", ("store",), _I),
    Setting("relation", "topic", ("topic",), _I),
    Setting("relation", "value.format", ("value_format",), _SC),
    Setting("relation", "value.subject", ("value_subject",), _SC),
    Setting("relation", "key.format", ("key_format",), _R),
    Setting("relation", "timestamp", ("timestamp",), _R),
    Setting("relation", "topic.gaps", ("topic_gaps",), _R),
    Setting("relation", "topic.partitions", ("partitions",), _SZ),
    Setting("relation", "topic.shards", ("partitions",), _SZ),
    Setting("relation", "topic.replicas", ("replicas",), _SZ),
    *_STORES.get("relation configs", ()),
    Setting("relation", "lifecycle.prevent_destroy", ("prevent_destroy",), _P),
    Setting("relation", "value.schema.compatibility", ("schema_compatibility",), _P, "decides later plans"),
    Setting("relation", "owner", ("owner",), _P),
    Setting("relation", "deploy", ("deploy",), _P, "decides how later replays of its query are carried out"),
    Setting("relation", "deploy.retention", ("deploy_retention_ms",), _P, "how long a blue/green deployment keeps "
            "the old version"),
    Setting("cdc", "store", ("store",), _I),
    Setting("cdc", "value.format", ("value_format",), _SC, "json only"),
    Setting("cdc", "timestamp", ("timestamp",), _R),
    Setting("cdc", "owner", ("owner",), _P),
    *_STORES.get("cdc", ()),
    Setting("table", "store", ("store",), _I),
    *_STORES.get("table", ()),
    Setting("table", "lifecycle.prevent_destroy", ("prevent_destroy",), _P),
    Setting("table", "value.schema.compatibility", ("schema_compatibility",), _P, "decides later plans"),
    Setting("table", "owner", ("owner",), _P),
    *_STORES.get("table configs", ()),
    Setting("materialized_view", "store", ("store",), _I),
    *_STORES.get("materialized_view", ()),
    Setting("materialized_view", "lifecycle.prevent_destroy", ("prevent_destroy",), _P),
    Setting("materialized_view", "value.schema.compatibility", ("schema_compatibility",), _P, "decides later plans"),
    Setting("materialized_view", "owner", ("owner",), _P),
    *_STORES.get("materialized_view configs", ()),
    Setting("query", "AS SELECT ...", _SQL, _Q, "the SQL, PARTITION BY included"),
    Setting("query", "starting.position", ("sources",), _Q),
    Setting("query", "watermark.delay", ("watermark_delay",), _Q),
    Setting("query", "delivery.guarantee", ("delivery_guarantee",), _Q),
    Setting("query", "trigger", ("trigger",), _Q, "to or from 'realtime': a new checkpoint, offsets carried"),
    Setting("query", "trigger.interval", ("trigger_interval",), _R, "in real-time mode, its checkpoint interval"),
    Setting("query", "dlq.topic", ("dlq_topic",), _R),
    Setting("query", "CONSTRAINT ... EXPECT", ("expectations",), _R, "a rule added, changed or dropped: the same "
            "checkpoint"),
    Setting("query", "source.deserialization.error.handling", ("deserialization_errors",), _R),
    Setting("query", "runtime.isolation", ("isolation",), _R, "its own driver or a shared application"),
    Setting("query", "owner", ("owner",), _P, "CREATE ... AS SELECT: owns the relation and its query"),
    Setting("query", "start.position", ("start_position",), _O),
    Setting("source", "starting.position", ("sources",), _Q, "FROM relation WITH (...)"),
    Setting("function", "AS 'module:function'", ("target", "path", "source_hash"), _R, "the module file's code "
            "included: every query calling the function restarts on its checkpoint"),
    Setting("function", "parameters", ("parameters",), _R, "their names; a type changes the calls' SQL (the query's "
            "own change)"),
    Setting("function", "RETURNS", ("returns",), _SC, "the type of the columns its calls compute: the relations "
            "written with them"),
    Setting("function", "LANGUAGE", ("language",), _I, "PYTHON only"),
    Setting("view", "CREATE VIEW", ("kind",), _I, "a view is recorded only: nothing is deployed for it"),
    Setting("view", "AS SELECT ...", ("select",), _Q, "inlined into the queries that read it: each changes as the same "
            "edit of its own SQL would"),
    Setting("source", "timestamp", ("sources",), _Q, "FROM relation WITH (...)"),
    Setting("runtime", "spark_master", ("spark_master",), _R),
    Setting("runtime", "spark_conf", ("runtime_spark_conf",), _R),
    Setting("runtime", "trigger_interval", ("trigger_interval",), _R, "unless the query sets 'trigger.interval'"),
    Setting("runtime", "trigger", ("trigger",), _Q, "the queries real-time mode can run, unless one sets 'trigger'"),
    Setting("runtime", "delivery_guarantee", ("delivery_guarantee",), _Q, "unless the query sets "
            "'delivery.guarantee'; where its sink can have it"),
    Setting("runtime", "checkpoint_root", (), _N, "a deployed query keeps its checkpoint; new ones start there"),
    Setting("runtime", "isolation", ("isolation",), _R, "moves queries between their own driver and a shared "
            "application, on their checkpoints; unless the query sets 'runtime.isolation'"),
    Setting("runtime", "queries_per_app", (), _N, "where queries started later are placed"),
    Setting("runtime", "batches_at_once", (), _N, "a shared application's host reads it again when a query is "
            "started there; 0 takes effect when the host starts"),
    Setting("runtime", "standby", (), _N, "the runtime supervisor's warm standby driver, read again after an apply"),
    Setting("runtime", "async_checkpoint", (), _N, "stateless queries into a broker; takes effect when a query starts"),
)
"""Every setting of every kind; tests/unit/test_settings.py fails for a setting the loader accepts that is not here."""

QUERY_SETTINGS_OF = {"relation_settings": "relation", "store_config": "store", "schema_registry": "schema_registry",
                     "functions": "function"}
"""Query metadata fields that mirror settings of the relations, stores and registries the query uses."""


def setting(kind: str, name: str) -> Setting:
    """The setting `name` of `kind` (a name may match a pattern such as 'properties.*'); KeyError if unclassified."""
    for entry in SETTINGS:
        if entry.kind == kind and (entry.name == name or
                                   entry.name.endswith("*") and name.startswith(entry.name[:-1])):
            return entry
    raise KeyError(f"setting '{name}' of a {kind} is not classified in dsflow/core/settings.py")


def fields_of(kind: str, cls: SettingClass) -> tuple[str, ...]:
    """The resource fields of `kind`'s settings of class `cls`, in table order."""
    found = [f for entry in SETTINGS if entry.kind == kind and entry.cls is cls for f in entry.fields]
    return tuple(dict.fromkeys(found))


def markdown_table() -> str:
    """The tables of docs/plan.md: what each class of setting does, and every setting with its class."""
    lines = ["| class | a change to such a setting |", "|---|---|"]
    lines += [f"| {cls.value} | {effect} |" for cls, effect in CLASS_EFFECTS.items()]
    lines += ["", "| object | setting | class | note |", "|---|---|---|---|"]
    lines += [f"| {s.kind} | `{s.name}` | {s.cls.value} | {s.note} |" for s in SETTINGS]
    return "\n".join(lines) + "\n"


def changed_settings(kind: str, before: dict, after: dict, cls: SettingClass = SettingClass.RESTARTS) -> list[str]:
    """The settings of class `cls` that differ between two field dicts of a `kind` resource, named as written
    ('key.format'; a key of a setting such as 'properties.*': 'properties.sasl.username')."""
    names = []
    for entry in (s for s in SETTINGS if s.kind == kind and s.cls is cls):
        for field in entry.fields:
            old, new = before.get(field), after.get(field)
            if old == new:
                continue
            if entry.name.endswith("*") and isinstance(old or new, dict):
                old, new = old or {}, new or {}
                names += [entry.name[:-1] + k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
            else:
                names.append(entry.name)
    return list(dict.fromkeys(names))


def restarting_stores(desired: Mapping[str, dict], deployed: Mapping[str, dict]) -> dict[str, list[str]]:
    """Store name -> its changed settings of class restarts, from the desired and deployed metadata by address."""
    found = {}
    for address, metadata in desired.items():
        if address.startswith("store.") and address in deployed:
            if names := changed_settings("store", deployed[address], metadata):
                found[address[len("store."):]] = names
    return found


def named_query_settings(fields: list[str], before: dict, after: dict, stores: Mapping[str, list[str]]) -> list[str]:
    """A query's changed metadata fields; those that mirror the relations and stores it uses (QUERY_SETTINGS_OF)
    named as written: "'timestamp' of relation db.schema.events", "'properties.sasl.password' of store k"."""
    named: list[str] = []
    for name in fields:
        if name == "relation_settings":
            old, new = before.get(name) or {}, after.get(name) or {}
            named += [f"'{changed}' of relation {relation}" for relation in sorted(set(old) | set(new))
                      for changed in changed_settings("relation", old.get(relation, {}), new.get(relation, {}))]
        elif name == "store_config" and stores:
            named += [f"'{changed}' of store {store}" for store, names in sorted(stores.items()) for changed in names]
        elif name == "schema_registry":
            named.append("the settings of its schema registry")
        elif name == "expectations":
            named += changed_expectations(before.get(name) or [], after.get(name) or [])
        elif name == "functions":
            named += changed_functions(before.get(name) or {}, after.get(name) or {})
        else:
            named.append(name)
    return named or fields


def changed_functions(before: dict, after: dict) -> list[str]:
    """How a restarted query's reason names the functions it calls that changed, from two query metadata dicts of
    {name: identity hash}: ["function count_char's code or signature"] (the reason adds "changed")."""
    words = [f"function {n}'s code or signature" for n in sorted(after) if n in before and before[n] != after[n]]
    return words or ["the functions it calls"]


def changed_expectations(before: list, after: list) -> list[str]:
    """How a restarted query's reason names its expectation changes, from two query metadata lists of [name,
    condition, action]: ["expectations (added 'positive', dropped 'small')"]."""
    old, new = {e[0]: e for e in before}, {e[0]: e for e in after}
    words = [f"added '{n}'" for n in new if n not in old]
    words += [f"changed '{n}'" for n in new if n in old and old[n] != new[n]]
    words += [f"dropped '{n}'" for n in old if n not in new]
    return [f"expectations ({', '.join(words)})" if words else "expectations"]
