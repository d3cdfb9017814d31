"""How big a relation's topic is: Kafka partitions and replicas, or Kinesis shards.

A declared stream says it (defaults: 1). A stream made by a query infers it from its sources:

- into a Kafka store: 'topic.partitions' and 'topic.replicas' come from the left-most source when that
  source is a Kafka topic; when it is a Kinesis stream both are required (DSF-E111);
- into a Kinesis store: 'topic.shards' comes from the left-most Kinesis source; with none it is
  required (DSF-E112).

'topic.shards' on a Kafka store, or partitions, replicas and Kafka topic configs on a Kinesis store,
are errors (DSF-E110).
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core.model import Relation, Store
from dsflow.errors import Diagnostic
from dsflow.load.statements import RawStatement

Report = Callable[[Diagnostic], None]
KAFKA_ONLY = ("topic.partitions", "topic.replicas")
KINESIS_ONLY = ("topic.shards",)


def topic_size(st: RawStatement, fqn: str, store: Store, sources: list[Relation], stores: dict[str, Store],
               report: Report) -> tuple[int, int]:
    """(partitions or shards, replicas) of the relation `st` declares or creates in `store`."""
    if store.type == "kinesis":
        _foreign(st, store, [p.key for p in st.properties if p.key in KAFKA_ONLY or p.key.startswith("kafka.topic.")],
                 "'topic.shards' sizes a Kinesis stream; partitions, replicas and topic configs are Kafka's", report)
        return _shards(st, fqn, sources, stores, report), 1
    _foreign(st, store, [p.key for p in st.properties if p.key in KINESIS_ONLY],
             "a Kafka topic is sized by 'topic.partitions' and 'topic.replicas'", report)
    first = sources[0] if sources else None
    first_store = stores.get(first.store) if first is not None else None
    if first is not None and first_store is not None and first_store.type == "kinesis":
        missing = [k for k in KAFKA_ONLY if st.prop(k) is None]
        if missing:
            report(Diagnostic("DSF-E111", f"'{fqn}' goes to the Kafka store '{store.name}' from the Kinesis stream "
                              f"'{first.fqn}', so {' and '.join(repr(k) for k in missing)} cannot be inferred",
                              st.location, hint="add 'topic.partitions' = N, 'topic.replicas' = N to its WITH clause "
                                                "(they are inferred only from a Kafka source)"))
        return (_int(st, "topic.partitions", 1, report), _int(st, "topic.replicas", 1, report))
    inherit = first if first is not None and first_store is not None and first_store.type == "kafka" else None
    return (_int(st, "topic.partitions", inherit.partitions if inherit else 1, report),
            _int(st, "topic.replicas", inherit.replicas if inherit else 1, report))


def kinesis_format_ok(st: RawStatement, fqn: str, store: Store, value_format: str, report: Report) -> bool:
    """Every value format fits a Kinesis stream; a declared binary 'key.format' does not (partition keys are
    text): DSF-E114."""
    prop = st.prop("key.format")
    key_format = str(prop.value).lower() if prop is not None else None
    if store.type != "kinesis" or key_format in (None, "json", "string"):
        return True
    report(Diagnostic("DSF-E114", f"key.format '{key_format}' is not available on the Kinesis stream '{fqn}': "
                      "partition keys are text", prop.location or st.location,
                      hint="remove 'key.format' (or use 'string'): a Kinesis partition key is a Unicode string"))
    return False


def _shards(st: RawStatement, fqn: str, sources: list[Relation], stores: dict[str, Store], report: Report) -> int:
    if st.prop("topic.shards") is not None or not sources:
        return _int(st, "topic.shards", 1, report)
    kinesis = next((r for r in sources if getattr(stores.get(r.store), "type", "") == "kinesis"), None)
    if kinesis is None:
        report(Diagnostic("DSF-E112", f"'{fqn}' goes to a Kinesis stream but reads no Kinesis stream, so "
                          "'topic.shards' cannot be inferred", st.location,
                          hint="add 'topic.shards' = N to its WITH clause"))
        return 1
    return kinesis.partitions


def _foreign(st: RawStatement, store: Store, keys: list[str], why: str, report: Report) -> None:
    for key in keys:
        report(Diagnostic("DSF-E110", f"'{key}' does not apply to the {store.type} store '{store.name}'",
                          st.prop(key).location, hint=f"remove it: {why}"))


def _int(st: RawStatement, key: str, default: int, report: Report) -> int:
    prop = st.prop(key)
    if prop is None:
        return default
    if not prop.value.isdigit() or int(prop.value) < 1:
        report(Diagnostic("DSF-E032", f"'{key}' must be a positive integer, got '{prop.value}'", prop.location,
                          hint=f"e.g. '{key}' = 1"))
        return default
    return int(prop.value)
