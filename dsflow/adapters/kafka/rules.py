"""The load rules of a Kafka store (the `rules` facet, core/stores.py): its settings (bootstrap servers, TLS and
SASL: adapters/kafka/settings_rules.py), the names its topics may take (DSF-E206) and how a topic is sized
(partitions and replicas, DSF-E110, DSF-E111).

A topic name follows Apache Kafka's `Topic.validate`: ASCII letters, digits, `.`, `_` and `-`; 1 to 249
characters; not `.` or `..`. A stream made by a query takes 'topic.partitions' and 'topic.replicas' from its
left-most source when that is a Kafka topic; from a log of another kind both are required (DSF-E111).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dsflow.adapters.kafka.acls import PRINCIPALS, acl_diagnostics, principals
from dsflow.adapters.kafka.settings import COMMON, refused
from dsflow.adapters.kafka.settings_rules import security_diagnostics
from dsflow.core import stores
from dsflow.errors import Diagnostic, Location
from dsflow.load.names import why_invalid
from dsflow.core.suggest import did_you_mean
from dsflow.load.sizing import report_foreign, size_property

Report = Callable[[Diagnostic], None]
TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
SIZING = ("topic.partitions", "topic.replicas")


def _guess(key: str, why: str) -> str | None:
    """A known setting close to an unknown name (a typo), as a hint."""
    if not why.startswith("No such configuration property"):
        return None
    guess = did_you_mean(key, COMMON)
    return guess if guess and guess.startswith("did you mean") else None


class KafkaRules:
    """The `rules` facet of a Kafka store."""

    partitions_key = "topic.partitions"
    sizing_keys = SIZING
    config_prefix = "kafka.topic."
    realtime_logs = True
    """Spark's own Kafka connector (spark-sql-kafka-0-10) serves real-time mode (adapters/kafka/connector.py)."""

    def realtime_refusals(self, properties: dict[str, str]) -> list[str]:
        """What in the store's settings Spark's Kafka connector cannot do as librdkafka does (javaclient.py)."""
        from dsflow.adapters.kafka.javaclient import refusals

        return refusals(properties)
    row_dead_letters = True
    """A query's DEAD LETTER expectations send rows to its dead-letter topic (adapters/spark/expectations.py)."""
    """A relation's 'kafka.topic.<config>' properties are configs of its topic."""
    transactional_streams = True
    """A stream sink may be 'exactly-once': each write task's records in a Kafka transaction with the batch id
    (adapters/kafka/transactions.py; a broker that does not isolate transactions, tansu, is DSF-E870 at start)."""

    def store_diagnostics(self, name: str, store_type: str, bootstrap: str, properties: dict[str, str],
                          location: Location | None, where: Callable[[str], Location | None]) -> list[Diagnostic]:
        """bootstrap_servers is required (DSF-E011); librdkafka takes every setting (DSF-E256); TLS and SASL
        settings (DSF-E251..E254); the ACL settings of grants pushed down (DSF-E730)."""
        out = []
        if not bootstrap:
            out.append(Diagnostic("DSF-E011", f"missing required key 'bootstrap_servers' of kafka store '{name}'",
                                  location, hint="add bootstrap_servers: host:port"))
        out += [Diagnostic("DSF-E256", f"{key} of the kafka store '{name}': librdkafka refuses it: {why}", where(key),
                           hint=_guess(key, why) or "properties of a kafka store are librdkafka settings: see "
                                                    "librdkafka's CONFIGURATION.md for the names and values it takes")
                for key, why in refused(properties)]
        return out + security_diagnostics(name, properties, where) + acl_diagnostics(name, properties, where)

    def roles_named(self, properties: dict[str, str]) -> dict[str, str]:
        """The roles `acl.principals.<role>` maps to Kafka principals (an unknown one: DSF-E302)."""
        return {role: f"{PRINCIPALS}{role}" for role in principals(properties)}

    def check_log_name(self, name: str, fqn: str, where: Location | None, report: Report) -> bool:
        return self.check_dead_letter_topic(name, f"the topic of '{fqn}'", where, report)

    def check_dead_letter_topic(self, name: str, what: str, where: Location | None, report: Report) -> bool:
        """DSF-E206: a topic name the broker would refuse (or one nobody meant)."""
        if TOPIC.fullmatch(name) and name not in (".", ".."):
            return True
        why = "'.' and '..' are not topic names" if name in (".", "..") else \
            why_invalid(name, 249, "ASCII letters, digits, ., _ and -")
        report(Diagnostic("DSF-E206", f"{what}, {name!r}, is not a valid Kafka topic name: {why}", where,
                          hint="set 'topic' to 1-249 ASCII letters, digits, '.', '_' or '-' (the environment's "
                               "topic_prefix counts too)"))
        return False

    def log_size(self, st: Any, fqn: str, store: Any, sources: list[Any], stores_: dict[str, Any],
                 report: Report) -> tuple[int, int]:
        """(partitions, replicas): declared, else the left-most source's when it is a topic of this kind."""
        report_foreign(st, store, "a Kafka topic is sized by 'topic.partitions' and 'topic.replicas'", report)
        first = sources[0] if sources else None
        first_store = stores_.get(first.store) if first is not None else None
        other = stores.kind(first_store.type) if first_store is not None and first_store.type != store.type else None
        if other is not None and other.can(stores.Capability.LOGS):
            assert first is not None  # `other` is its store's kind
            missing = [k for k in SIZING if st.prop(k) is None]
            if missing:
                report(Diagnostic("DSF-E111", f"'{fqn}' goes to the Kafka store '{store.name}' from the {other.title} "
                                  f"{other.log_noun} '{first.fqn}', so {' and '.join(repr(k) for k in missing)} "
                                  "cannot be inferred", st.location,
                                  hint="add 'topic.partitions' = N, 'topic.replicas' = N to its WITH clause "
                                       "(they are inferred only from a Kafka source)"))
            return size_property(st, "topic.partitions", 1, report), size_property(st, "topic.replicas", 1, report)
        inherit = first if first_store is not None and first_store.type == store.type else None
        return (size_property(st, "topic.partitions", inherit.partitions if inherit else 1, report),
                size_property(st, "topic.replicas", inherit.replicas if inherit else 1, report))


RULES = KafkaRules()
