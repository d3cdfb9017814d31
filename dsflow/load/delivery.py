"""`'delivery.guarantee'` of a query: at-least-once (the default) or exactly-once where it is real.

    stream sink          exactly-once accepted where its store's writes are transactions recording the batch id
                         (its rules' `transactional_streams`); elsewhere DSF-E047, which says why and what to do
    changelog sink       exactly-once accepted: its records are idempotent upserts by key
    view or table sink   exactly-once accepted: each batch id is recorded in the transaction writing it
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core import stores
from dsflow.core.model import Relation
from dsflow.errors import Diagnostic
from dsflow.sql.statements import RawStatement

GUARANTEES = ("at-least-once", "exactly-once")


def why_not_on_a_stream(store_type: str | None) -> str:
    """DSF-E047's hint: why a stream sink in a store of `store_type` (its kind's title) is at-least-once."""
    kind = stores.kind(store_type or "")
    into = kind.title if kind is not None else "its log"
    return (f"a stream sink appends to {into} and is at-least-once: its writes cannot be committed atomically with "
            "the query's checkpoint (no transactions recording the batch id), so a query "
            "killed after writing a micro-batch but before committing it writes the batch again on restart. A "
            "changelog is effectively exactly-once: its records are idempotent upserts by key, so a rewritten batch "
            "leaves the same final state; materialized views and tables record each batch id in the transaction "
            "that writes it and skip a replayed batch. Remove the property, or write a changelog with a PRIMARY KEY "
            "(CREATE CHANGELOG ... AS SELECT with the key columns) or a materialized view.")


def transactional(store_type: str | None) -> bool:
    """The store kind's stream sinks may be exactly-once (its rules' `transactional_streams`)."""
    kind = stores.kind(store_type or "")
    return bool(getattr(kind.facet("rules"), "transactional_streams", False)) if kind is not None else False


def delivery_guarantee(st: RawStatement, sink: Relation, report: Callable[[Diagnostic], None],
                       store_type: str | None = None, default: str = "at-least-once") -> str:
    """The query's guarantee; a bad value is DSF-E032, exactly-once on a stream of a store without transactional
    stream sinks DSF-E047 (at-least-once kept). Without the property, `default` (runtime.delivery_guarantee) where
    the sink can have it, else at-least-once."""
    prop = st.prop("delivery.guarantee")
    if prop is None:
        return default if sink.kind != "stream" or transactional(store_type) else "at-least-once"
    value = prop.value.strip().lower()
    if value not in GUARANTEES:
        report(Diagnostic("DSF-E032", f"'delivery.guarantee' must be 'at-least-once' or 'exactly-once', got "
                          f"'{prop.value}'", prop.location, hint="'delivery.guarantee' = 'at-least-once'"))
        return "at-least-once"
    if value == "exactly-once" and sink.kind == "stream" and not transactional(store_type):
        report(Diagnostic("DSF-E047", f"'exactly-once' is not available for the stream '{sink.fqn}'", prop.location,
                          hint=why_not_on_a_stream(store_type)))
        return "at-least-once"
    return value
