"""The loader's one I/O step: columns of declared streams that list none, from the schema registry.

    CREATE STREAM orders WITH ('value.format' = 'avro');     -- columns from subject orders-value

Runs after parsing and before resolution (statements are resolved with the columns filled in). Every
other stage of loading stays free of network calls; a project with no such statement makes none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dsflow.core.formats import REGISTRY_FORMATS
from dsflow.core.model import SchemaRegistry, Store
from dsflow.errors import Diagnostic, DsflowError
from dsflow.sql.statements import RawColumn, RawStatement


def default_subject(topic_prefix: str, statement: RawStatement) -> str:
    """'value.subject', else <topic>-value (the topic as the relation will have it, prefix included)."""
    subject = statement.prop("value.subject")
    if subject is not None:
        return subject.value
    topic = statement.prop("topic")
    return f"{topic_prefix}{topic.value if topic else statement.name[-1]}-value"


def fill_columns_from_registry(statements: list[tuple[str, RawStatement]], stores: dict[str, Store],
                               registries: dict[str, SchemaRegistry], default_store: str | None, topic_prefix: str,
                               report: Callable[[Diagnostic], None]) -> list[tuple[str, RawStatement]]:
    """The statements, with the registry's columns in each declared avro/protobuf relation that lists none."""
    out = []
    for path, st in statements:
        fmt = st.prop("value.format")
        if st.is_query or st.kind not in ("stream", "changelog") or st.columns or fmt is None \
                or fmt.value not in REGISTRY_FORMATS:
            out.append((path, st))
            continue
        store = stores.get(named.value if (named := st.prop("store")) else default_store or "")
        registry = registries.get(store.schema_registry or "") if store is not None else None
        if registry is None:  # resolution reports the missing registry (DSF-E122)
            out.append((path, st))
            continue
        subject = default_subject(topic_prefix, st)
        try:
            from dsflow.formats.registry import subject_columns

            columns = subject_columns(registry, subject, fmt.value)
        except DsflowError as err:
            report(Diagnostic("DSF-E123", f"cannot take the columns of '{'.'.join(st.name)}' from the schema "
                              f"registry '{registry.name}': {err.message}", st.location,
                              hint=f"register subject '{subject}' (or set 'value.subject'), check the registry's "
                                   "url and credentials, or list the columns in the statement"))
            out.append((path, replace(st, extra={**st.extra, "registry_failed": True})))
            continue
        out.append((path, replace(st, columns=tuple(RawColumn(n, t, st.location) for n, t in columns))))
    return out
