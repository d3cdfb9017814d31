"""Checks of names: empty relation names, and the physical names a store accepts (DSF-E205..E208).

A name the broker or the warehouse would refuse (or, worse, accept in a form nobody meant: a unicode Kafka topic,
a 303-character one) is a validation error at the place it is written, not a failure in the middle of an apply.

- Kafka topic (Apache Kafka's `Topic.validate`): ASCII letters, digits, `.`, `_` and `-`; 1 to 249 characters;
  not `.` or `..`.
- Kinesis stream (the `StreamName` of the Kinesis API): letters, digits, `_`, `.` and `-`; 1 to 128 characters.
- Table identifiers: a Snowflake name dsflow writes unquoted (`[A-Za-z_][A-Za-z0-9_$]*`, at most 255), a Unity
  Catalog name (no space, `.`, `/` or control character, at most 255), a Delta path without control characters,
  an Iceberg namespace or table name (no `.`, `/` or control character, at most 255).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from dsflow.errors import Diagnostic, Location

Report = Callable[[Diagnostic], None]

KAFKA_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
KINESIS_STREAM = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
SNOWFLAKE_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,254}")
CATALOG_NAME = re.compile(r"[^\s./\x00-\x1f\x7f]{1,255}")
ICEBERG_NAME = re.compile(r"[^./\x00-\x1f\x7f]{1,255}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_name_parts(parts: tuple[str, ...], fqn: str, where: Location | None, report: Report) -> bool:
    """DSF-E205: a relation name with an empty part (`CREATE STREAM ""`, `analytics."".x`), a control character,
    or a `.` inside a quoted part (`"a.b"`: the name would read as more parts than it has)."""
    if all(part.strip() and "." not in part and not _CONTROL.search(part) for part in parts):
        return True
    report(Diagnostic("DSF-E205", f"the relation name {'.'.join(parts)!r} has an empty part, a '.' inside a part or "
                      "a control character",
                      where, hint="name it with letters, digits and '_' (quote it only if it needs other characters)"))
    return False


def check_physical_name(store_type: str, name: str, fqn: str, where: Location | None, report: Report) -> bool:
    """DSF-E206 (Kafka topic) or DSF-E207 (Kinesis stream): the name the relation's object gets on its store."""
    if store_type == "kafka":
        return check_topic(name, f"the topic of '{fqn}'", where, report)
    if store_type == "kinesis" and not KINESIS_STREAM.fullmatch(name):
        report(Diagnostic("DSF-E207", f"the Kinesis stream name {name!r} of '{fqn}' is not valid: "
                          f"{_why(name, 128, 'letters, digits, _, . and -')}", where,
                          hint="set 'topic' to 1-128 letters, digits, '_', '.' or '-' (the environment's "
                               "topic_prefix counts too)"))
        return False
    return True


def check_topic(name: str, what: str, where: Location | None, report: Report) -> bool:
    """DSF-E206: a Kafka topic name the broker would refuse (or one nobody meant)."""
    if KAFKA_TOPIC.fullmatch(name) and name not in (".", ".."):
        return True
    why = "'.' and '..' are not topic names" if name in (".", "..") else \
        _why(name, 249, "ASCII letters, digits, ., _ and -")
    report(Diagnostic("DSF-E206", f"{what}, {name!r}, is not a valid Kafka topic name: {why}", where,
                      hint="set 'topic' to 1-249 ASCII letters, digits, '.', '_' or '-' (the environment's "
                           "topic_prefix counts too)"))
    return False


def check_table_identifier(kind: str, name: str, fqn: str, where: Location | None, report: Report) -> bool:
    """DSF-E208: a table identifier the warehouse would refuse: `kind` is snowflake, databricks, iceberg or delta."""
    if kind == "snowflake":
        ok, rule = bool(SNOWFLAKE_IDENTIFIER.fullmatch(name)), "a letter or '_', then letters, digits, '_' or '$' " \
                                                                 "(at most 255)"
    elif kind == "databricks":
        ok, rule = bool(CATALOG_NAME.fullmatch(name)), "1-255 characters, no space, '.', '/' or control character"
    elif kind == "iceberg":
        ok, rule = bool(ICEBERG_NAME.fullmatch(name)), "1-255 characters, no '.', '/' or control character"
    else:
        ok, rule = bool(name.strip()) and not _CONTROL.search(name), "a path without control characters"
    if not ok:
        report(Diagnostic("DSF-E208", f"the {kind} name {name!r} of table '{fqn}' is not valid", where,
                          hint=f"use {rule}"))
    return ok


def _why(name: str, limit: int, allowed: str) -> str:
    if not name:
        return "it is empty"
    if len(name) > limit:
        return f"it is {len(name)} characters long (at most {limit})"
    bad = sorted({c for c in name if not re.fullmatch(r"[a-zA-Z0-9._-]", c)})
    return f"{', '.join(repr(c) for c in bad[:5])} {'is' if len(bad) == 1 else 'are'} not allowed (only {allowed})"


def check_physical_names(relations, queries, stores: dict, report: Report) -> None:
    """Every relation's object name on its store (DSF-E206..E208) and every query's 'dlq.topic' (DSF-E206)."""
    for relation in relations:
        store = stores.get(relation.store)
        kind = getattr(store, "type", None)
        if relation.kind in ("stream", "changelog") and kind in ("kafka", "kinesis"):
            check_physical_name(kind, relation.topic, relation.fqn, relation.location, report)
        elif relation.kind == "table":
            _check_table(kind, relation, report)
    for query in queries:
        if query.dlq_topic is not None:
            check_topic(query.dlq_topic, f"the 'dlq.topic' of '{query.fqn}'", query.location, report)


def _check_table(store_type: str | None, relation, report: Report) -> None:
    options = relation.table_options or {}
    if store_type == "snowflake":
        for key in ("snowflake.db.name", "snowflake.schema.name", "snowflake.table.name"):
            check_table_identifier("snowflake", options.get(key, ""), relation.fqn, relation.location, report)
        return
    if store_type == "iceberg":
        for key in ("iceberg.namespace.name", "iceberg.table.name"):
            check_table_identifier("iceberg", options.get(key, ""), relation.fqn, relation.location, report)
        return
    check_table_identifier("delta", options.get("delta.path", ""), relation.fqn, relation.location, report)
    if store_type == "databricks":
        for key in ("databricks.schema.name", "databricks.table.name"):
            check_table_identifier("databricks", options.get(key, ""), relation.fqn, relation.location, report)
        if options.get("databricks.catalog.name"):
            check_table_identifier("databricks", options["databricks.catalog.name"], relation.fqn, relation.location,
                                   report)
