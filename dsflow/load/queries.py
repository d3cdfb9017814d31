"""Resolving SQL statements into relations and continuous queries, with their checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dsflow.core import stores as registry
from dsflow.core.evolution import RULES
from dsflow.core.model import Column, Function, Query, Relation, Source, Store
from dsflow.core.nested import parse_type
from dsflow.errors import Diagnostic
from dsflow.load.formats import FORMAT_PROPS, check_formats, value_subject
from dsflow.load.names import check_name_parts
from dsflow.load.cleartext import clear_text_secret
from dsflow.load.contracts import CONTRACT, VERSION, check_insert_contract, check_query_contract, check_versions, \
    with_contract
from dsflow.load.cache import read_relations
from dsflow.sql.statements import Analysed, RawStatement
from dsflow.core.suggest import did_you_mean, relation_hint
from dsflow.load.rules import rule
from dsflow.load.tables import TABLE_PROPS, check_not_read, table_relation
from dsflow.load.delivery import delivery_guarantee
from dsflow.load.realtime import checked_trigger, interval_ms
from dsflow.load.views import VIEW_PROPS, check_views_not_read, view_relation
from dsflow.core.bluegreen import DEPLOY_VALUES, RETENTION

RELATION_PROPS = {"store", "topic", "value.format", "key.format", "timestamp", "topic.partitions", "topic.replicas",
                  "topic.shards", "topic.gaps"} | FORMAT_PROPS
OWNER = "owner"
"""Any relation or CREATE ... AS SELECT may declare it: the role owning the relation and its query."""
QUERY_PROPS = {"trigger", "trigger.interval", "starting.position", "start.position", "watermark.delay",
               "delivery.guarantee", "dlq.topic", "runtime.isolation", "source.deserialization.error.handling", OWNER}
TOPIC_CONFIG_PREFIX: str = next(p for t in registry.kinds_that(registry.Capability.LOGS)
                                if (p := rule(t, "config_prefix")))
"""Any relation may declare '<prefix><config>': a config of its log (the prefix is a log store kind's rule)."""
PREVENT_DESTROY = "lifecycle.prevent_destroy"
"""Any relation may declare it: no plan may delete or replace its object (Relation.prevent_destroy)."""
SCHEMA_COMPATIBILITY = "value.schema.compatibility"
DEPLOY = "deploy"
"""Any relation may declare it: 'blue_green' carries out a replay of the query writing it beside the deployed
version (core/bluegreen.py; a stream or changelog in a broker's store)."""
"""Any relation may declare it: the rule its columns evolve by (Relation.schema_compatibility, core/evolution.py)."""
VALUE_FORMATS = {"json"}


@dataclass
class Namespace:
    """What names resolve against while statements are resolved."""

    default_db: str
    default_schema: str
    default_store: str | None
    schemas: set[str]
    stores: dict[str, Store]
    secrets: set[str]
    trigger_interval: str
    topic_prefix: str = ""
    project: str = ""
    environment: str = ""
    relations: dict[str, Relation] = field(default_factory=dict)
    default_view_store: str | None = None
    cache: Any = None  # a load.cache.SelectCache: resolved SELECTs reused between runs, or None
    workers: Any = None  # load.workers.Workers: the processes that parsed some of the files resolve their SELECTs
    functions: dict[str, Function] = field(default_factory=dict)
    """The CREATE FUNCTIONs by lower-case name (load/functions.py): SELECTs may call them."""
    views: dict[str, Any] = field(default_factory=dict)
    """The CREATE VIEWs by fqn (sql/views.py): their SELECTs are inlined into the statements that read them."""
    trigger: str = "micro-batch"
    """runtime.trigger: a query's trigger unless it sets 'trigger'."""
    isolation: str = "query"
    """runtime.isolation: where a query runs unless it sets 'runtime.isolation'."""
    delivery_guarantee: str = "at-least-once"
    """runtime.delivery_guarantee: a query's guarantee unless it sets 'delivery.guarantee'."""

    def qualify_name(self, parts: tuple[str, ...] | list[str]) -> str:
        return qualified_name(parts, self.default_db, self.default_schema)


def qualified_name(parts: tuple[str, ...] | list[str], default_db: str, default_schema: str) -> str:
    """db.schema.name of a relation name of one, two or three parts."""
    parts = tuple(parts)
    if len(parts) == 1:
        return f"{default_db}.{default_schema}.{parts[0]}"
    if len(parts) == 2:
        return f"{default_db}.{parts[0]}.{parts[1]}"
    return ".".join(parts[-3:])


Report = Callable[[Diagnostic], None]


def resolve_statements(statements: list[tuple[str, RawStatement]], ns: Namespace, report: Report) -> list[Query]:
    """Declared relations first, then CREATE ... AS SELECT in dependency order, then INSERT INTO."""
    statements = _with_views(statements, ns, report)
    for path, st in statements:
        if not st.is_query and st.extra.get("expectations"):
            from dsflow.load.expectations import declared_without_query

            declared_without_query(st.extra["expectations"], report)
        if not st.is_query and st.kind in ("stream", "changelog"):
            _declare(ns, _declared_relation(path, st, ns, report), st, report)
        elif not st.is_query and st.kind == "table":
            _declare(ns, _declared_table(st, ns, report), st, report)
    pending = [(p, s) for p, s in statements if s.is_query and s.kind != "insert"]
    queries = _resolve_ctas_in_order(pending, ns, report)
    counts: dict[str, int] = {}
    _prefetch([s for _, s in statements if s.kind == "insert"], ns)
    for path, st in statements:
        if st.kind == "insert":
            query = _insert(path, st, ns, report, counts)
            if query is not None:
                queries.append(query)
    check_versions(list(ns.relations.values()), report)  # DSF-E895
    return queries


def _with_views(statements: list[tuple[str, RawStatement]], ns: Namespace,
               report: Report) -> list[tuple[str, RawStatement]]:
    """The statements, each reading the SELECTs of the views it reads (sql/views.py); the views kept in `ns`."""
    if not any(st.kind == "view" for _, st in statements):
        return statements
    from dsflow.sql.views import declared_views, with_views

    relations = {ns.qualify_name(st.name) for _, st in statements if st.kind in RELATION_STATEMENTS}
    ns.views = declared_views(statements, relations | set(ns.relations), ns.qualify_name, report)
    return [(path, with_views(st, ns.views, ns.qualify_name)) for path, st in statements]


RELATION_STATEMENTS = ("stream", "changelog", "table", "materialized view")


def _declare(ns: Namespace, relation: Relation | None, st: RawStatement, report: Report) -> None:
    if relation is None:
        return
    if relation.fqn in ns.relations:
        first = ns.relations[relation.fqn].location
        report(Diagnostic("DSF-E020", f"relation '{relation.fqn}' is defined twice", st.location,
                          hint=f"first defined at {first}"))
        return
    relation = with_contract(_with_compatibility(_with_lifecycle(relation, st, report), st, report), st, report)
    relation = _with_deploy(relation, st, report)
    ns.relations[relation.fqn] = relation.model_copy(update={"owner": _prop(st, OWNER)}) if st.prop(OWNER) else relation


def _with_lifecycle(relation: Relation, st: RawStatement, report: Report) -> Relation:
    value = _prop(st, PREVENT_DESTROY)
    if value is None:
        return relation
    if value.lower() not in ("true", "false"):
        report(Diagnostic("DSF-E032", f"'{PREVENT_DESTROY}' must be 'true' or 'false', got '{value}'",
                          st.prop_location(PREVENT_DESTROY), hint=f"'{PREVENT_DESTROY}' = 'true'"))
        return relation
    return relation.model_copy(update={"prevent_destroy": value.lower() == "true"})


def _with_deploy(relation: Relation, st: RawStatement, report: Report) -> Relation:
    relation = _with_retention(relation, st, report)
    value = _prop(st, DEPLOY)
    if value is None:
        return relation
    if value.lower() not in DEPLOY_VALUES:
        report(Diagnostic("DSF-E032", f"'{DEPLOY}' must be one of {', '.join(DEPLOY_VALUES)}, got '{value}'",
                          st.prop_location(DEPLOY), hint=f"'{DEPLOY}' = 'blue_green'"))
        return relation
    return relation.model_copy(update={"deploy": value.lower()})


def _with_retention(relation: Relation, st: RawStatement, report: Report) -> Relation:
    value = _prop(st, RETENTION)
    if value is None:
        return relation
    if not interval_ms(value):
        report(Diagnostic("DSF-E032", f"'{RETENTION}' must be a positive duration, got '{value}'",
                          st.prop_location(RETENTION), hint=f"'{RETENTION}' = '24 hours'"))
        return relation
    return relation.model_copy(update={"deploy_retention_ms": interval_ms(value)})


def _with_compatibility(relation: Relation, st: RawStatement, report: Report) -> Relation:
    value = _prop(st, SCHEMA_COMPATIBILITY)
    if value is None:
        return relation
    if value.upper() not in RULES:
        report(Diagnostic("DSF-E840", f"'{SCHEMA_COMPATIBILITY}' must be one of {', '.join(RULES)}, got '{value}'",
                          st.prop_location(SCHEMA_COMPATIBILITY), hint=f"'{SCHEMA_COMPATIBILITY}' = 'BACKWARD'"))
        return relation
    return relation.model_copy(update={"schema_compatibility": value.upper()})


def _declared_table(st: RawStatement, ns: Namespace, report: Report) -> Relation | None:
    """CREATE TABLE name (cols) WITH ('store' = ...): a lake table others append to, which queries read as a stream
    of its appended rows (adapters/tables/reading.py); apply creates it unless it exists."""
    fqn = _checked_name(st, ns, report)
    if fqn is None:
        return None
    _check_props(st, TABLE_PROPS, report)
    _check_duplicate_columns([c.name for c in st.columns], st, report)
    return table_relation(fqn, tuple(Column(name=c.name, type=c.type) for c in st.columns), st.primary_key,
                          {p.key: p.value for p in st.properties}, ns.stores, ns.default_store, st.location,
                          st.prop_location, report)


def _declared_relation(path: str, st: RawStatement, ns: Namespace, report: Report) -> Relation | None:
    fqn = _checked_name(st, ns, report)
    if fqn is None:
        return None
    store = ns.stores.get(_prop(st, "store") or ns.default_store or "")
    if store is not None and registry.can(store, registry.Capability.CHANGE_STREAM):
        return _cdc_relation(st, fqn, ns, report, store)
    _check_props(st, RELATION_PROPS, report)
    columns = tuple(Column(name=c.name, type=c.type) for c in st.columns)
    if not columns and st.extra.get("registry_failed"):
        return None  # the registry step reported why (DSF-E123, load/registry.py)
    if not columns:
        report(Diagnostic("DSF-E032", f"{st.kind} '{fqn}' declares no columns", st.location,
                          hint="list the columns: CREATE STREAM name (col TYPE, ...) WITH (...)"))
        return None
    _check_duplicate_columns([c.name for c in st.columns], st, report)
    if st.prop("value.format") is None:
        report(Diagnostic("DSF-E030", f"{st.kind} '{fqn}' is missing the required property 'value.format'",
                          st.location, hint="add 'value.format' = 'json' to its WITH clause"))
    names = {c.name.lower() for c in columns}
    _check_primary_key(st, fqn, names, report)
    return _relation(st, fqn, columns, ns, report, inherit=None)


def _cdc_relation(st: RawStatement, fqn: str, ns: Namespace, report: Report, store: Store) -> Relation | None:
    """A stream of a store that gives its tables' changes: the change events of its tables (sql/cdc.py)."""
    rules = registry.facet(store.type, "rules")
    assert rules is not None  # a store kind with Capability.CHANGE_STREAM has its rules
    columns = tuple(Column(name=c.name, type=c.type) for c in st.columns)
    _check_duplicate_columns([c.name for c in st.columns], st, report)
    return rules.change_stream_relation(fqn, st.kind, columns, {p.key: p.value for p in st.properties}, store.name,
                                        rules.object_name(ns.project, ns.environment, fqn), st.location,
                                        st.prop_location, report)


def _checked_name(st: RawStatement, ns: Namespace, report: Report) -> str | None:
    fqn = ns.qualify_name(st.name)
    if not check_name_parts(st.name, fqn, st.location, report):  # DSF-E205 (load/names.py)
        return None
    schema = fqn.rsplit(".", 1)[0]
    if schema not in ns.schemas:
        report(Diagnostic("DSF-E022", f"unknown database or schema '{schema}' for '{fqn}'", st.location,
                          hint=did_you_mean(schema, ns.schemas), subject=f"schema.{schema}"))
        return None
    return fqn


def _check_primary_key(st: RawStatement, fqn: str, names: set[str], report: Report) -> None:
    if st.kind == "changelog" and not st.primary_key:
        report(Diagnostic("DSF-E033", f"changelog '{fqn}' has no PRIMARY KEY", st.location,
                          hint="add PRIMARY KEY (col, ...) to its column list"))
    if st.kind == "stream" and st.primary_key:
        report(Diagnostic("DSF-E033", f"stream '{fqn}' cannot have a PRIMARY KEY", st.location,
                          hint="declare it as CREATE CHANGELOG"))
    for key in st.primary_key:
        if key.lower() not in names:
            report(Diagnostic("DSF-E041", f"primary key column '{key}' is not a column of '{fqn}'", st.location,
                              hint=did_you_mean(key, names)))


def _check_duplicate_columns(names: list[str], st: RawStatement, report: Report) -> None:
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            report(Diagnostic("DSF-E044", f"column '{name}' appears twice", st.location, hint="rename one of them"))
        seen.add(name.lower())


def _check_props(st: RawStatement, allowed: set[str], report: Report) -> None:
    for prop in st.properties:
        if prop.key in allowed or prop.key in (PREVENT_DESTROY, SCHEMA_COMPATIBILITY, OWNER, CONTRACT, VERSION,
                                               DEPLOY, RETENTION) or prop.key.startswith(TOPIC_CONFIG_PREFIX):
            if why := clear_text_secret(prop.key, prop.value, ()):
                report(Diagnostic("DSF-E060", f"property '{prop.key}' looks like a secret written in SQL: {why}",
                                  prop.location, hint="secrets belong in store YAML as {{ env_var('NAME') }}"))
            continue
        report(Diagnostic("DSF-E031", f"unknown property '{prop.key}'", prop.location,
                          hint=did_you_mean(prop.key, allowed)))


def _relation(st: RawStatement, fqn: str, columns: tuple[Column, ...], ns: Namespace, report: Report,
              inherit: Relation | None, primary_key: tuple[str, ...] | None = None,
              sources: list[Relation] | None = None) -> Relation | None:
    store_name = _prop(st, "store") or (inherit.store if inherit and inherit.kind != "table" else None) \
        or ns.default_store  # a stream read from a lake table goes to the default store, not the lake
    if inherit is not None and registry.can(ns.stores.get(store_name or ""), registry.Capability.CHANGE_STREAM):
        if st.prop("store") is not None:
            kind = ns.stores[store_name or ""].type  # the store `can` was asked about
            report(Diagnostic("DSF-E087", f"'{fqn}' cannot be written to the {kind} store '{store_name}'",
                              st.prop_location("store"), hint=f"a {kind} store is a CDC source: write the "
                              f"stream to a {_log_titles(ns)} store ('store' = '...')"))
            return None
        store_name = ns.default_store  # a stream made from a CDC stream goes to the default (log) store
    if store_name is None or store_name not in ns.stores:
        loc = st.prop_location("store") or st.location
        report(Diagnostic("DSF-E021", f"unknown store '{store_name}' for '{fqn}'", loc,
                          hint=did_you_mean(store_name or "", ns.stores), subject=f"store.{store_name}"))
        return None
    value_format = _prop(st, "value.format") or (inherit.value_format if inherit else "json")
    key_format = _prop(st, "key.format") or (inherit.key_format if inherit else None)
    from dsflow.load.sizing import check_log_format

    if not check_log_format(st, fqn, ns.stores[store_name], value_format, report):
        return None
    if not check_formats(fqn, value_format, key_format, columns, ns.stores[store_name],
                         lambda key: st.prop_location(key) or st.location, report):
        return None
    from dsflow.load.sizing import topic_size

    partitions, replicas = topic_size(st, fqn, ns.stores[store_name], sources or ([inherit] if inherit else []),
                                      ns.stores, report)
    inferred = _inferred_size(st, ns.stores[store_name])
    timestamp = _prop(st, "timestamp")
    if timestamp and timestamp.lower() not in {c.name.lower() for c in columns}:
        report(Diagnostic("DSF-E042", f"timestamp column '{timestamp}' is not a column of '{fqn}'",
                          st.prop_location("timestamp"), hint=did_you_mean(timestamp, [c.name for c in columns])))
    configs = {p.key[len(TOPIC_CONFIG_PREFIX):]: p.value for p in st.properties
               if p.key.startswith(TOPIC_CONFIG_PREFIX)}
    gaps = _prop(st, "topic.gaps")
    if gaps is not None and gaps.lower() not in ("fail", "count"):
        report(Diagnostic("DSF-E032", f"'topic.gaps' must be 'fail' or 'count', got '{gaps}'",
                          st.prop_location("topic.gaps"), hint="'topic.gaps' = 'count' for a topic written in "
                          "transactions or compacted; 'fail' (the default for streams) otherwise"))
        gaps = None
    if gaps is None and st.kind == "stream" and (_prop(st, "delivery.guarantee") or "").strip().lower() == \
            "exactly-once":
        gaps = "count"  # its query writes in transactions: a marker offset per transaction
    key = primary_key if primary_key is not None else st.primary_key
    _check_scalar_key(st, fqn, columns, key, report)
    topic = ns.topic_prefix + (_prop(st, "topic") or fqn.rsplit(".", 1)[-1])
    return Relation(fqn=fqn, kind="changelog" if st.kind == "changelog" else "stream", columns=columns,
                    primary_key=key, store=store_name,
                    topic=topic, value_format=value_format, key_format=key_format, timestamp=timestamp,
                    value_subject=value_subject(value_format, topic, _prop(st, "value.subject")),
                    partitions=partitions, replicas=replicas, topic_configs=configs, location=st.location,
                    topic_gaps=gaps.lower() if gaps else None, inferred_size=inferred)


def _check_scalar_key(st: RawStatement, fqn: str, columns: tuple[Column, ...], key: tuple[str, ...],
                      report: Report) -> None:
    """A changelog's key columns are scalars: a STRUCT, ARRAY or MAP key is refused (DSF-E164)."""
    types = {c.name.lower(): c.type for c in columns}
    for name in key:
        try:
            nested = parse_type(types[name.lower()]).nested
        except (KeyError, ValueError):  # an unknown column is DSF-E041's
            continue
        if nested:
            report(Diagnostic("DSF-E164", f"primary key column '{name}' of '{fqn}' is {types[name.lower()]}: a key "
                              "column must be a scalar type", st.location,
                              hint=f"key by scalars taken from it: select a field (`{name}->field AS {name}_field`) or "
                              f"an element (`{name}[1]`) as a column, and name that in PRIMARY KEY or GROUP BY"))


def _log_titles(ns: Namespace) -> str:
    """The kind of log store a stream goes to, for a hint: the default store's, else every log kind's."""
    default = registry.kind(getattr(ns.stores.get(ns.default_store or ""), "type", ""))
    if default is not None and default.can(registry.Capability.LOGS):
        return default.title
    return registry.listing([registry.REGISTRY[t].title for t in registry.kinds_that(registry.Capability.LOGS)])


def _inferred_size(st: RawStatement, store) -> tuple[str, ...]:
    """Which of its sizes a relation does not declare in its WITH clause: a query's relation takes them from its
    source, a declared one the default 1; either takes its topic's own when the topic exists (core/plan.py)."""
    from dsflow.load.sizing import partitions_key

    declared = {"partitions": partitions_key(store), "replicas": "topic.replicas"}
    return tuple(name for name, key in declared.items() if st.prop(key) is None)


def _prop(st: RawStatement, key: str) -> str | None:
    prop = st.prop(key)
    return prop.value if prop else None


def _resolve_ctas_in_order(pending: list[tuple[str, RawStatement]], ns: Namespace, report: Report) -> list[Query]:
    queries: list[Query] = []
    defined_by_pending = {ns.qualify_name(s.name) for _, s in pending}
    while pending:
        ready = [(p, s) for p, s in pending if all(t in ns.relations for t in _source_names(s, ns))]
        if not ready:
            stuck = {ns.qualify_name(s.name): _source_names(s, ns) for _, s in pending}
            for path, st in pending:
                _report_unresolvable(path, st, ns, defined_by_pending, stuck, report)
            break
        _prefetch([s for _, s in ready], ns)
        for path, st in ready:
            query = _ctas(path, st, ns, report)
            if query is not None:
                queries.append(query)
        done = {id(st) for _, st in ready}  # by identity: `item not in ready` compared statements, O(n^2)
        pending = [item for item in pending if id(item[1]) not in done]
    return queries


def _source_names(st: RawStatement, ns: Namespace) -> list[str]:
    return [ns.qualify_name(parts) for parts in st.source_parts]


def _report_unresolvable(path: str, st: RawStatement, ns: Namespace, pending: set[str],
                         stuck: dict[str, list[str]], report: Report) -> None:
    """Why a CREATE ... AS SELECT cannot be resolved: a relation it reads is unknown, or depends on it (DSF-E050).
    A relation read that waits on another error (a statement that reads an unknown name) is unknown, as the
    consequence of that error (load/consequences.py)."""
    from dsflow.core.graph import reaches
    from dsflow.sql.select import source_tables
    from dsflow.sql.parse import DIALECT, node_location

    for table in source_tables(st.select):
        name = ns.qualify_name([p.name for p in table.parts])
        if name in ns.relations:
            continue
        loc = node_location(path, table, st.location)
        if name in pending and reaches(stuck, name, ns.qualify_name(st.name)):
            report(Diagnostic("DSF-E050", f"dependency cycle: '{ns.qualify_name(st.name)}' reads '{name}', "
                              "which depends on it", loc, hint="a query cannot read its own output, even indirectly"))
        else:
            report(Diagnostic("DSF-E040", f"unknown relation '{table.sql(dialect=DIALECT)}'", loc,
                              hint=relation_hint(name.rsplit('.', 1)[-1], ns.relations), subject=f"relation.{name}"))


def _ctas(path: str, st: RawStatement, ns: Namespace, report: Report) -> Query | None:
    fqn = _checked_name(st, ns, report)
    if fqn is None:
        return None
    mv = st.kind == "materialized view"
    _check_props(st, (VIEW_PROPS if mv else TABLE_PROPS if st.kind == "table" else RELATION_PROPS) | QUERY_PROPS,
                 report)
    analysed = _analyse_select(path, st, ns, report)
    if analysed is None or not _shape_fits(st, fqn, analysed, report):
        return None
    first = ns.relations[analysed.sources[0].relation]
    table_store = ns.stores.get(_prop(st, "store") or ns.default_store or "")
    if st.kind == "table" and analysed.aggregated and not analysed.group_keys:
        from dsflow.sql.aggregates import global_aggregate_into_table

        report(global_aggregate_into_table(fqn, st.location))
        return None
    if st.kind == "table" and analysed.aggregated and first.kind == "changelog" \
            and not registry.can(table_store, registry.Capability.MERGE):
        what, where = _merging_sinks()
        report(Diagnostic("DSF-E157", f"'{fqn}' aggregates the changelog '{first.fqn}', whose groups are updated and "
                          f"deleted: only {what} deletes them", st.location,
                          hint=f"write the table into {where}, or aggregate into a CHANGELOG or a MATERIALIZED VIEW"))
        return None
    primary_key = _cdc_changelog_key(st, fqn, first, analysed, report)
    if primary_key is None:
        return None
    if _enforces_contract(st):  # DSF-E891..E894: reported; the relation still gets the query's columns
        check_query_contract(st, path, fqn, analysed.columns, primary_key, report)
    if mv:
        relation = view_relation(fqn, analysed.columns, primary_key or (), {p.key: p.value for p in st.properties},
                                 ns.stores, st.location, st.prop_location,
                                 report, default_store=ns.default_view_store)
    elif st.kind == "table":
        relation = table_relation(fqn, analysed.columns, primary_key or (), {p.key: p.value for p in st.properties},
                                  ns.stores, ns.default_store, st.location,
                                  st.prop_location, report)
    else:
        relation = _relation(st, fqn, analysed.columns, ns, report, inherit=first, primary_key=primary_key,
                             sources=[ns.relations[s.relation] for s in analysed.sources])
    if relation is None:
        return None
    relation = relation.model_copy(update={"defined_by_query": fqn})
    _declare(ns, relation, st, report)
    statement = {"stream": "csas", "changelog": "ctas", "table": "table"}.get(st.kind, "mv")
    return _query(st, fqn, statement, relation, analysed, ns, report)


def _enforces_contract(st: RawStatement) -> bool:
    prop = st.prop(CONTRACT)
    return prop is not None and prop.value.strip().lower() == "enforced"


def _shape_fits(st: RawStatement, fqn: str, analysed: Analysed, report: Report) -> bool:
    """An aggregation makes a changelog (or a view); a join makes a stream (or a view)."""
    if st.kind == "stream" and analysed.aggregated:
        report(Diagnostic("DSF-E046", f"'{fqn}' aggregates, so its result is a changelog keyed by the GROUP BY "
                          "columns, not a stream", st.location,
                          hint="use CREATE CHANGELOG ... AS SELECT (or CREATE MATERIALIZED VIEW)"))
        return False
    if analysed.changelog_join is not None and not analysed.changelog_join.streams:  # streams: aggregated or ranked
        from dsflow.sql.changelog_join import check_sink

        return check_sink(st.kind if st.kind != "stream" else "a stream", fqn, st.location, report)
    if analysed.top_n is not None:  # sql/topn.py: a changelog keyed by the partition columns (and the rank)
        from dsflow.sql.topn import top_n_sink

        problem = top_n_sink(st.kind, fqn, analysed.top_n, analysed.top_n.key, st.location)
        if problem is not None:
            report(problem)
        return problem is None
    if st.kind == "changelog" and (analysed.join_within or analysed.temporal or analysed.regular) \
            and not analysed.aggregated:
        report(Diagnostic("DSF-E046", f"'{fqn}' joins two streams, so its result is a stream, not a changelog",
                          st.location, hint="use CREATE STREAM ... AS SELECT (or CREATE MATERIALIZED VIEW)"))
        return False
    return True


def _cdc_changelog_key(st: RawStatement, fqn: str, source: Relation, analysed: Analysed,
                       report: Report) -> tuple[str, ...] | None:
    """The primary key of the CTAS's relation; a changelog made from a change stream names it (sql/cdc.py)."""
    from dsflow.sql.cdc import check_cdc_changelog, is_cdc

    if st.kind != "changelog" or analysed.aggregated or not is_cdc(source):
        return _ctas_primary_key(st, fqn, source, analysed, report)
    if not check_cdc_changelog(fqn, source, st.primary_key, analysed.select_sql, st.location, report):
        return None
    names = {c.name.lower(): c.name for c in analysed.columns}
    return tuple(names[k.lower()] for k in st.primary_key)


def _ctas_primary_key(st: RawStatement, fqn: str, source: Relation, analysed: Analysed,
                      report: Report) -> tuple[str, ...] | None:
    if st.kind == "stream":
        return ()
    if analysed.aggregated:
        return analysed.group_keys
    if analysed.top_n is not None:  # sql/topn.py
        return analysed.top_n.key
    if analysed.changelog_join is not None:  # sql/changelog_join.py
        from dsflow.sql.changelog_join import result_key

        return result_key(analysed.changelog_join, analysed.chain)
    if st.kind in ("materialized view", "table") and (source.kind != "changelog" or analysed.join_within):
        return ()
    names = {c.name.lower() for c in analysed.columns}
    if source.primary_key and all(k.lower() in names for k in source.primary_key):
        return source.primary_key
    if st.kind == "table":
        return ()  # a table without its source's key columns is appended to
    report(Diagnostic("DSF-E033", f"{'changelog' if st.kind == 'changelog' else 'materialized view'} '{fqn}' "
                      "needs its source's primary key columns in the SELECT",
                      st.location, hint="select the key columns, or create a stream instead"))
    return ()


def _insert(path: str, st: RawStatement, ns: Namespace, report: Report, counts: dict[str, int]) -> Query | None:
    target = ns.qualify_name(st.name)
    if target not in ns.relations:
        report(Diagnostic("DSF-E040", f"INSERT INTO unknown relation '{'.'.join(st.name)}'", st.location,
                          hint=relation_hint(st.name[-1], ns.relations), subject=f"relation.{target}"))
        return None
    sink = ns.relations[target]
    if not _insertable(target, sink, st, ns, report):
        return None
    analysed = _analyse_select(path, st, ns, report)
    if analysed is None:
        return None
    if analysed.changelog_join is not None and not analysed.changelog_join.streams:  # streams: sql/keyed_join.py
        from dsflow.sql.changelog_join import check_sink

        check_sink("INSERT INTO", target, st.location, report)
        return None
    if analysed.top_n is not None:  # sql/topn.py
        from dsflow.sql.topn import top_n_sink

        problem = top_n_sink(sink.kind, target, analysed.top_n, sink.primary_key, st.location)
        if problem is not None:
            report(problem)
            return None
    analysed = _named_by_position(analysed, sink)
    columns = analysed.columns
    if [c.name.lower() for c in columns] != [c.name.lower() for c in sink.columns]:
        report(Diagnostic("DSF-E043", f"INSERT INTO '{target}' selects ({', '.join(c.name for c in columns)}) "
                          f"but the relation has ({', '.join(c.name for c in sink.columns)})", st.location,
                          hint="select the target's columns, in order, with the same names (use AS)"))
        return None
    if sink.contract:
        check_insert_contract(st, path, sink, columns, report)  # DSF-E893
    elif _stores(st, path, target, columns, sink, report):  # DSF-E411
        analysed = _stored_as_declared(analysed, sink)
    else:
        return None
    keys = {k.lower() for k in analysed.group_keys}
    if analysed.aggregated and (sink.kind == "stream" or keys != {k.lower() for k in sink.primary_key}):
        report(Diagnostic("DSF-E046", f"INSERT INTO '{target}' aggregates by ({', '.join(analysed.group_keys)}), "
                          "so its target must be a changelog with exactly that primary key", st.location,
                          hint="GROUP BY the target's primary key columns"))
        return None
    counts[target] = counts.get(target, 0) + 1
    return _query(st, f"{target}_insert_{counts[target]}", "insert", sink, analysed, ns, report)


def _named_by_position(analysed: Analysed, sink: Relation) -> Analysed:
    """An INSERT's column takes the name of the target's column at its place, as SQL's INSERT maps columns by
    position, when it has no name (`DATE_FORMAT(t, 'HH:mm')`, Nexmark q10) or a name the target has not (`B.dateTime`
    into `bid_dateTime`, Nexmark q20); one named as another column of the target (a swap) keeps its name, which
    DSF-E043 then refuses."""
    from dataclasses import replace

    from sqlglot import exp

    from dsflow.sql.parse import DIALECT, parse_one_select
    from dsflow.sql.select import UNNAMED

    columns, names = analysed.columns, {c.name.lower() for c in sink.columns}
    if len(columns) != len(sink.columns):
        return analysed
    renamed = [index for index, (column, target) in enumerate(zip(columns, sink.columns, strict=True))
               if column.name.lower() != target.name.lower()
               and (column.name.startswith(UNNAMED) or column.name.lower() not in names)]
    if not renamed:
        return analysed
    select = parse_one_select(analysed.select_sql)
    for index in renamed:
        projection = select.selects[index]
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        projection.replace(exp.alias_(inner.copy(), sink.columns[index].name, quoted=True))
    named = tuple(c.model_copy(update={"name": sink.columns[i].name}) if i in renamed else c
                  for i, c in enumerate(columns))
    moved = {columns[i].name: sink.columns[i].name for i in renamed}  # a GROUP BY column keys by its new name
    return replace(analysed, columns=named, select_sql=select.sql(dialect=DIALECT),
                   group_keys=tuple(moved.get(k, k) for k in analysed.group_keys))


def _stored_as_declared(analysed: Analysed, sink: Relation) -> Analysed:
    """An INSERT's column of another type than the target's declared one that Spark's store assignment casts (a
    number into another number type: Nexmark q17's AVG, a DOUBLE, into a BIGINT; a number, BOOLEAN, DATE or
    TIMESTAMP into a VARCHAR; sql/storeassign.cast_on_store) is cast to the declared type, so that readers get what
    the relation declares (a VARCHAR column holds the string "7", not the number 7)."""
    from dataclasses import replace

    from sqlglot import exp

    from dsflow.sql.parse import DIALECT, parse_one_select
    from dsflow.sql.storeassign import cast_on_store

    wanted = [(index, target.type) for index, (column, target) in enumerate(zip(analysed.columns, sink.columns,
                                                                                  strict=True))
              if _normal(column.type) != _normal(target.type) and cast_on_store(column.type, target.type)]
    if not wanted:
        return analysed
    select = parse_one_select(analysed.select_sql)
    for index, sql_type in wanted:
        projection = select.selects[index]
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        cast_to = exp.Cast(this=inner.copy(), to=exp.DataType.build(sql_type, dialect=DIALECT))
        projection.replace(exp.alias_(cast_to, sink.columns[index].name, quoted=True))
    columns = tuple(c.model_copy(update={"type": sink.columns[i].type}) if any(i == w for w, _ in wanted) else c
                    for i, c in enumerate(analysed.columns))
    return replace(analysed, columns=columns, select_sql=select.sql(dialect=DIALECT))


def _stores(st: RawStatement, path: str, target: str, columns, sink: Relation, report: Report) -> bool:
    """Whether Spark's ANSI store assignment writes each column into the target's declared type (sql/storeassign.py);
    DSF-E411 at each column it does not."""
    from dsflow.load.contracts import output_location
    from dsflow.sql.storeassign import check_stored

    problems = check_stored(target, [(c.name, c.type, t.type, output_location(st, path, c.name))
                                     for c, t in zip(columns, sink.columns, strict=True)])
    for problem in problems:
        report(problem)
    return not problems


def _normal(sql_type: str) -> str:
    return " ".join(sql_type.upper().replace("INTEGER", "INT").split())


def _insertable(target: str, sink: Relation, st: RawStatement, ns: Namespace, report: Report) -> bool:
    """INSERT INTO writes to a stream or changelog of a topic: not a view, a table or a CDC stream."""
    store = ns.stores.get(sink.store)
    what = {"materialized_view": "a materialized view", "table": "a table"}.get(sink.kind)
    if what is None and store is not None and registry.can(store, registry.Capability.CHANGE_STREAM):
        what = f"a CDC stream (its events come from {registry.REGISTRY[store.type].title})"
    if what is None:
        return True
    report(Diagnostic("DSF-E145", f"INSERT INTO '{target}': it is {what}, which only its own query writes",
                      st.location, hint="write a stream or changelog with INSERT INTO, or change the query "
                      "that defines the view or table"))
    return False


def _query(st: RawStatement, fqn: str, statement: str, sink: Relation, analysed: Analysed, ns: Namespace,
           report: Report) -> Query:
    position = _prop(st, "starting.position") or "earliest"
    if position not in ("earliest", "latest"):
        report(Diagnostic("DSF-E032", f"'starting.position' must be 'earliest' or 'latest', got '{position}'",
                          st.prop_location("starting.position"), hint="'starting.position' = 'earliest'"))
        position = "earliest"
    sources = tuple(s.model_copy(update={"starting_position": s.position or position}) for s in analysed.sources)
    check_not_read(sources, ns.relations, ns.stores, st.location, report)
    check_views_not_read(sources, ns.relations, st.location, report)
    _check_event_time(st, sources, analysed, ns, report)
    _check_whole_read(st, sources, ns, report)
    query = Query(fqn=fqn, statement=statement, sink=sink.fqn, sources=sources, select_sql=analysed.select_sql,
                 output_columns=analysed.columns, trigger_interval=_trigger_interval(st, ns, report),
                 start_position=_start_position(st, report), stateful=analysed.stateful,
                 output_mode=analysed.output_mode,
                 key_columns=_partition_by(st, sink, analysed, report) or analysed.group_keys or
                 (sink.primary_key if analysed.changelog_join or analysed.top_n else ()),
                 window=analysed.window,
                 join_within=analysed.join_within, watermark_delay=_watermark_delay(st, report),
                 delivery_guarantee=delivery_guarantee(st, sink, report,
                                                       getattr(ns.stores.get(sink.store), "type", None),
                                                       ns.delivery_guarantee),
                 dlq_topic=ns.topic_prefix + dlq if (dlq := _prop(st, "dlq.topic")) else None,
                 expectations=_expectations(st, analysed, sources, ns, report),
                 deserialization_errors=_deserialization_errors(st, report),
                 deletes=_deletes(sources, sink, analysed, ns), temporal_join=analysed.temporal,
                 changelog_join=analysed.changelog_join, join_chain=analysed.chain, top_n=analysed.top_n,
                 over=analysed.over, regular_joins=analysed.regular,
                 isolation=_isolation(st, report), owner=_prop(st, OWNER),
                 functions=_called(analysed, ns), views=st.extra.get("views", ()), nested=analysed.nested,
                 stacked=analysed.stacked,
                 location=st.location)
    if query.regular_joins:  # DSF-W001: its state grows without bound
        from dsflow.sql.join_chain import unbounded_state

        report(unbounded_state(query.regular_joins, {s.alias: s.relation for s in sources}))
    return checked_trigger(query, st, ns, report)


def _expectations(st: RawStatement, analysed: Analysed, sources: tuple[Source, ...], ns: Namespace,
                  report: Report) -> tuple:
    """The query's CONSTRAINT ... EXPECT rules, checked against its result columns (load/expectations.py)."""
    raw = st.extra.get("expectations") or ()
    if not raw:
        return ()
    from dsflow.load.expectations import resolve_expectations

    stores = [ns.stores.get(ns.relations[s.relation].store or "") for s in sources]
    keeper = next((s for s in stores if registry.can(s, registry.Capability.DEAD_LETTERS)), None)
    return resolve_expectations(raw, analysed.columns, bool(keeper and rule(keeper.type, "row_dead_letters")), report)


def _deserialization_errors(st: RawStatement, report: Report) -> str | None:
    """'source.deserialization.error.handling': TERMINATE, IGNORE or IGNORE_AND_LOG (DSF-E032); None if not set."""
    from dsflow.core.model import DESERIALIZATION_ERRORS

    prop = st.prop("source.deserialization.error.handling")
    if prop is None:
        return None
    value = prop.value.strip().upper()
    if value not in DESERIALIZATION_ERRORS:
        report(Diagnostic("DSF-E032", f"'source.deserialization.error.handling' must be TERMINATE, IGNORE or "
                          f"IGNORE_AND_LOG, got '{prop.value}'", prop.location,
                          hint="'source.deserialization.error.handling' = 'IGNORE_AND_LOG' sends them to the "
                               "dead-letter topic"))
        return None
    return value


def _partition_by(st: RawStatement, sink: Relation, analysed: Analysed, report: Report) -> tuple[str, ...]:
    """`... PARTITION BY col[, col]`: the output columns making a stream sink's record key (DSF-E134)."""
    found = st.extra.get("partition_by") or ()
    if not found:
        return ()
    if sink.kind != "stream":
        kind = sink.kind.replace("_", " ")
        report(Diagnostic("DSF-E134", f"PARTITION BY applies to a stream sink, not to the {kind} '{sink.fqn}'",
                          found[0][1], hint="a changelog, view or table is keyed by its primary key; "
                          "remove PARTITION BY"))
        return ()
    names = {c.name.lower(): c.name for c in analysed.columns}
    keys = []
    for name, location in found:
        if name.lower() not in names:
            report(Diagnostic("DSF-E134", f"PARTITION BY column '{name}' is not a column of the query's result",
                              location, hint=did_you_mean(name, list(names.values()))))
            continue
        keys.append(names[name.lower()])
    return tuple(dict.fromkeys(keys))


def _deletes(sources: tuple[Source, ...], sink: Relation, analysed: Analysed, ns: Namespace) -> str:
    """How a changelog read row by row passes deletes on: to changelogs and views as deletes, else dropped."""
    from dsflow.sql.cdc import is_cdc

    if analysed.top_n is not None:  # a ranking handles its source's deletes itself (adapters/spark/topn.py)
        return "none"
    if len(sources) == 1 and not analysed.aggregated and sink.kind == "changelog" \
            and is_cdc(ns.relations[sources[0].relation]):
        return "emit"  # a change stream made a changelog: an op 'd' is a delete of its key
    if len(sources) != 1 or analysed.aggregated or ns.relations[sources[0].relation].kind != "changelog":
        return "none"
    if sink.kind == "table" and sink.primary_key and registry.can(ns.stores.get(sink.store or ""),
                                                                   registry.Capability.MERGE):
        return "emit"  # a merging table deletes the key (MERGE ... WHEN MATCHED THEN DELETE)
    return "emit" if sink.kind in ("changelog", "materialized_view") else "drop"


def _merging_sinks() -> tuple[str, str]:
    """(what a table sink that deletes a changelog's keys is, where to write one), for DSF-E157: the words of
    the rules of the store kinds with Capability.MERGE."""
    merging = registry.kinds_that(registry.Capability.MERGE)
    named = [n for n in dict.fromkeys(rule(t, "merging_sinks") for t in merging) if n]
    if not named:
        return "a merging table sink", f"a {registry.listing(merging)} store"
    return " or ".join(n[0] for n in named), " or ".join(n[1] for n in named)


EVENT_TIME_TYPES = {"BIGINT", "INT", "TIMESTAMP", "TIMESTAMPTZ"}


def _check_event_time(st: RawStatement, sources: tuple[Source, ...], analysed: Analysed, ns: Namespace,
                      report: Report) -> None:
    """Windows and joins need event time: a 'timestamp' column must be BIGINT (epoch ms) or TIMESTAMP."""
    if analysed.window is None and analysed.join_within is None and analysed.temporal is None and not analysed.nested:
        return
    for source in sources:
        relation = ns.relations[source.relation]
        timestamp = source.timestamp or relation.timestamp
        column = relation.column(timestamp) if timestamp else None
        if column is not None and column.type.upper().split("(")[0] not in EVENT_TIME_TYPES:  # TIMESTAMP(3)
            report(Diagnostic("DSF-E042", f"timestamp column '{column.name}' of '{relation.fqn}' is {column.type}; "
                              "event time needs BIGINT (epoch ms) or TIMESTAMP", st.location,
                              hint="name another column in 'timestamp', or convert it in an upstream query"))


def _check_whole_read(st: RawStatement, sources: tuple[Source, ...], ns: Namespace, report: Report) -> None:
    """A processing-time join reads its changelog whole at every micro-batch: from a store that can (DSF-E262)."""
    for source in sources:
        relation = ns.relations[source.relation]
        store = ns.stores.get(relation.store or "")
        if source.lookup and not registry.can(store, registry.Capability.WHOLE_READ):
            kinds = " or ".join(registry.kinds_that(registry.Capability.WHOLE_READ))
            report(Diagnostic("DSF-E262", f"'{relation.fqn}' is joined FOR SYSTEM_TIME AS OF a processing time, which "
                              "reads it whole at every micro-batch: its store cannot be read so", st.location,
                              hint=f"join a changelog of a {kinds} store by processing time, or join this one by "
                                   "event time (FOR SYSTEM_TIME AS OF a column of the stream)"))


def _watermark_delay(st: RawStatement, report: Report) -> str:
    prop = st.prop("watermark.delay")
    if prop is None:
        return "5 seconds"
    from dsflow.sql.select import normalized_duration

    duration = normalized_duration(prop.value)
    if duration is None:
        report(Diagnostic("DSF-E032", f"'watermark.delay' must be a duration like '10 seconds', got '{prop.value}'",
                          prop.location, hint="'watermark.delay' = '30 seconds'"))
        return "5 seconds"
    return duration


INTERVAL = re.compile(r"^\d+(\.\d+)?\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?)$", re.I)


def _trigger_interval(st: RawStatement, ns: Namespace, report: Report) -> str:
    prop = st.prop("trigger.interval")
    if prop is None:
        return ns.trigger_interval
    if not INTERVAL.match(prop.value.strip()):
        report(Diagnostic("DSF-E032", f"'trigger.interval' must be a duration like '1 second' or '500 ms', "
                          f"got '{prop.value}'", prop.location, hint="'trigger.interval' = '5 seconds'"))
        return ns.trigger_interval
    return prop.value.strip()


def _isolation(st: RawStatement, report: Report) -> str | None:
    """'runtime.isolation': 'shared' or 'query' (DSF-E280); None when the query does not set it."""
    prop = st.prop("runtime.isolation")
    if prop is None:
        return None
    value = prop.value.strip().lower()
    if value not in ("shared", "query"):
        report(Diagnostic("DSF-E280", f"'runtime.isolation' must be 'shared' or 'query', got '{prop.value}'",
                          prop.location, hint="'runtime.isolation' = 'query' runs the query in its own Spark driver"))
        return None
    return value


def _start_position(st: RawStatement, report: Report) -> str:
    prop = st.prop("start.position")
    if prop is None:
        return "auto"
    value = prop.value.strip().lower()
    if value in ("auto", "checkpoint", "carry", "earliest") or value.isdigit():
        return value
    report(Diagnostic("DSF-E032", f"'start.position' must be auto, checkpoint, carry, earliest or an epoch-ms "
                      f"timestamp, got '{prop.value}'", prop.location, hint="'start.position' = 'carry'"))
    return "auto"


def analyse_select(path: str, st: RawStatement, relations: dict[str, Relation], qualify_name,
                   report: Report) -> Analysed | None:
    """sql/select.py's analyse_select, imported on first use: it brings sqlglot, which a load whose SELECTs
    all come from the cache does not need (~0.3 s of a cold process). A load analyses each statement once and
    reads its tree no more, so the tree is resolved in place (copy=False)."""
    from dsflow.sql.select import analyse_select as analyse

    return analyse(path, st, relations, qualify_name, report, copy=False)


def _analyse_calling(path: str, st: RawStatement, ns: Namespace, report: Report) -> Analysed | None:
    """analyse_select with the project's functions known (sql/functions.py `declared_functions`)."""
    if not ns.functions:
        return analyse_select(path, st, ns.relations, ns.qualify_name, report)
    from dsflow.load.functions import signatures
    from dsflow.sql.functions import declared_functions

    with declared_functions(signatures(ns.functions.values())):
        return analyse_select(path, st, ns.relations, ns.qualify_name, report)


def _called(analysed: Analysed, ns: Namespace) -> tuple[str, ...]:
    if not ns.functions:
        return ()
    from dsflow.load.functions import called_functions

    inner = [n.select_sql for n in analysed.nested] + ([analysed.stacked.select_sql] if analysed.stacked else [])
    return called_functions(" ".join([analysed.select_sql, *inner]), ns.functions)


def _analyse_select(path: str, st: RawStatement, ns: Namespace, report: Report) -> Analysed | None:
    """analyse_select, or its stored result if the statement and what it reads are unchanged (load/cache.py), or
    the result of the worker that parsed it (load/workers.py)."""
    key, cached = _cached(st, ns)
    if cached is not None:
        return cached
    done = ns.workers.resolved(st) if ns.workers is not None and not ns.functions else None
    if done is None:  # workers know no functions: with functions, each SELECT is resolved here
        reported: list[Diagnostic] = []
        analysed = _analyse_calling(path, st, ns, reported.append)
    else:
        analysed, reported = done
    for diagnostic in reported:
        report(diagnostic)
    # a regular join's result holds its place (RegularJoin.location), which the cache's key (the statement's text)
    # does not fix: not stored
    if key is not None and analysed is not None and not reported and not analysed.regular:
        ns.cache.put(key, analysed)
    return analysed


def _cached(st: RawStatement, ns: Namespace) -> tuple[str | None, Analysed | None]:
    """The statement's key in the load cache (None if it is not cached: no cache, or a secret in its text) and the
    stored result, if any."""
    cacheable = ns.cache is not None and not any(secret and secret in st.text for secret in ns.secrets)
    read = read_relations(st.source_parts, ns.relations, ns.qualify_name) if cacheable else None  # no secret on disk
    if read is None:
        return None, None
    text = st.text if not ns.functions else st.text + "\0" + repr(sorted(
        (f.name, f.identity["parameters"], f.returns) for f in ns.functions.values()))  # a signature changes types
    key = ns.cache.key(text, read)
    return key, ns.cache.get(key, Analysed)


def _prefetch(statements: list[RawStatement], ns: Namespace) -> None:
    """Ask the workers to resolve those of these SELECTs that are not in the load cache and whose relations are
    all known, while this process resolves its own."""
    if ns.workers is None or ns.functions:
        return
    items = []
    for st in statements:
        names = _source_names(st, ns)
        if all(n in ns.relations for n in names) and _cached(st, ns)[1] is None:
            items.append((st, [ns.relations[n] for n in names]))
    ns.workers.request(items)
