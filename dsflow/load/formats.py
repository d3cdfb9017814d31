"""Checks of a relation's value and key formats against its store and columns (pure; see core/formats.py)."""

from __future__ import annotations

from collections.abc import Callable

from dsflow.core.formats import (
    KEY_FORMATS, PRIMITIVE_FORMATS, REGISTRY_FORMATS, VALUE_FORMATS, carry_problem, primitive_fits,
)
from dsflow.core.model import Column, Store
from dsflow.errors import Diagnostic, Location

FORMAT_PROPS = {"value.subject"}


def check_formats(fqn: str, value_format: str, key_format: str | None, columns: tuple[Column, ...], store: Store,
                  where: Callable[[str], Location | None], report: Callable[[Diagnostic], None]) -> bool:
    """True if the formats fit; otherwise every problem is reported (DSF-E032, E122, E124, E774, E777)."""
    if value_format not in VALUE_FORMATS:
        report(Diagnostic("DSF-E032", f"unsupported value.format '{value_format}'", where("value.format"),
                          hint=f"supported: {', '.join(VALUE_FORMATS)}"))
        return False
    ok = True
    if key_format is not None and key_format not in KEY_FORMATS:
        report(Diagnostic("DSF-E032", f"unsupported key.format '{key_format}'", where("key.format"),
                          hint=f"supported: {', '.join(KEY_FORMATS)}"))
        ok = False
    elif key_format in REGISTRY_FORMATS and store.schema_registry is None:
        report(_no_registry(fqn, "key.format", key_format, store, where))
        ok = False
    if value_format in REGISTRY_FORMATS:
        ok = _check_registry_format(fqn, value_format, columns, store, where, report) and ok
    elif value_format in PRIMITIVE_FORMATS:
        if len(columns) != 1 or not primitive_fits(value_format, columns[0].type):
            shape = ", ".join(f"{c.name} {c.type}" for c in columns)
            report(Diagnostic("DSF-E124", f"value.format '{value_format}' carries one column of a matching type; "
                              f"'{fqn}' has ({shape})", where("value.format"),
                              hint="declare one column, e.g. (v BIGINT) for 'long', or use 'json' or 'avro'"))
            ok = False
    return ok


def _check_registry_format(fqn: str, value_format: str, columns: tuple[Column, ...], store: Store,
                           where: Callable[[str], Location | None], report: Callable[[Diagnostic], None]) -> bool:
    ok = True
    if store.schema_registry is None:
        report(_no_registry(fqn, "value.format", value_format, store, where))
        ok = False
    for column in columns:
        problem = carry_problem(value_format, column.type)
        if problem is not None:
            code, why = problem
            report(Diagnostic(code, f"column '{column.name}' of '{fqn}' is {column.type}, which value.format "
                              f"'{value_format}' cannot carry: {why}", where("value.format"), hint=_HINTS[code]))
            ok = False
    return ok


_HINTS = {
    "DSF-E124": "avro and protobuf: BIGINT, INT, DOUBLE, FLOAT, BOOLEAN, VARCHAR, BINARY, DECIMAL, DATE or TIMESTAMP "
                "columns, and STRUCT, ARRAY and MAP of them",
    "DSF-E774": "avro and protobuf maps have string keys: declare MAP<VARCHAR, ...>, or use 'json'",
    "DSF-E777": "wrap the inner ARRAY or MAP in a STRUCT, e.g. ARRAY<STRUCT<v ARRAY<INT>>>, or use 'avro' or 'json'",
}


def _no_registry(fqn: str, prop: str, fmt: str, store: Store, where: Callable[[str], Location | None]) -> Diagnostic:
    return Diagnostic("DSF-E122", f"'{fqn}' uses {prop} '{fmt}', but its store '{store.name}' has no schema registry",
                      where(prop), hint=f"add 'schema_registry: NAME' to store '{store.name}' and declare the "
                                        "registry under schema_registries:")


def value_subject(value_format: str, topic: str, explicit: str | None) -> str | None:
    """The registry subject of an avro/protobuf relation: 'value.subject' or <topic>-value (TopicNameStrategy)."""
    if value_format not in REGISTRY_FORMATS:
        return None
    return explicit or f"{topic}-value"
