"""How big a relation's log is (a topic's partitions and replicas, a stream's shards): its store kind's rule.

A declared stream says it (defaults: 1). A stream made by a query infers it from its sources. The store kind's
rules (core/stores.py, the `rules` facet) say how: `log_size` returns (partitions, replicas), `sizing_keys` are
the WITH properties that size its logs and `config_prefix` the prefix of its log configs; a sizing property of
another kind is an error (DSF-E110). A kind without `log_size` takes 'topic.partitions' and 'topic.replicas'
as declared.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from dsflow.core import stores as registry
from dsflow.core.model import Relation, Store
from dsflow.errors import Diagnostic
from dsflow.load.rules import rule
from dsflow.sql.statements import RawStatement

Report = Callable[[Diagnostic], None]


def topic_size(st: RawStatement, fqn: str, store: Store, sources: list[Relation], stores: dict[str, Store],
               report: Report) -> tuple[int, int]:
    """(partitions or shards, replicas) of the relation `st` declares or creates in `store`."""
    size = rule(store.type, "log_size")
    if size is not None:
        return size(st, fqn, store, sources, stores, report)
    return size_property(st, "topic.partitions", 1, report), size_property(st, "topic.replicas", 1, report)


def check_log_format(st: RawStatement, fqn: str, store: Store, value_format: str, report: Report) -> bool:
    """Whether the formats `st` declares fit the store's logs (the kind's `check_formats` rule; none: they do)."""
    check = rule(store.type, "check_formats")
    return check is None or check(st, fqn, store, value_format, report)


def partitions_key(store: Store) -> str:
    """The WITH property that sets the number of partitions (shards) of a log in `store`."""
    return rule(store.type, "partitions_key") or "topic.partitions"


def foreign_keys(st: RawStatement, store: Store) -> list[str]:
    """The sizing properties `st` declares that size the logs of another store kind, not the store's."""
    keys, prefixes = _foreign_sizing(store.type)
    return [p.key for p in st.properties if p.key in keys or any(p.key.startswith(x) for x in prefixes)]


@cache
def _foreign_sizing(store_type: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """(sizing keys, config prefixes) of the log store kinds other than `store_type`: once per type, not per
    statement (the registry does not change while a process runs)."""
    own = rule(store_type, "sizing_keys") or ()
    own_prefix = rule(store_type, "config_prefix")
    keys: set[str] = set()
    prefixes: set[str] = set()
    for type_ in registry.kinds_that(registry.Capability.LOGS):
        keys |= set(rule(type_, "sizing_keys") or ()) - set(own)
        prefix = rule(type_, "config_prefix")
        if prefix and prefix != own_prefix:
            prefixes.add(prefix)
    return frozenset(keys), tuple(sorted(prefixes))


def report_foreign(st: RawStatement, store: Store, why: str, report: Report) -> None:
    """DSF-E110 for each sizing property of another store kind."""
    for key in foreign_keys(st, store):
        report(Diagnostic("DSF-E110", f"'{key}' does not apply to the {store.type} store '{store.name}'",
                          st.prop_location(key), hint=f"remove it: {why}"))


def size_property(st: RawStatement, key: str, default: int, report: Report) -> int:
    """A positive integer sizing property (DSF-E032 otherwise), `default` when not declared."""
    prop = st.prop(key)
    if prop is None:
        return default
    if not prop.value.isdigit() or int(prop.value) < 1:
        report(Diagnostic("DSF-E032", f"'{key}' must be a positive integer, got '{prop.value}'", prop.location,
                          hint=f"e.g. '{key}' = 1"))
        return default
    return int(prop.value)
