"""Values (and keys) of a source's records by format, and which records are dead letters.

Reading (inside a read task of a log's data source: a topic, a stream), per chunk of consumed messages (anything with
the accessors `value()` and `key()`):

    json        values stay text for the JVM's from_json; when a dead-letter topic is set, the chunk is
                parsed by pyarrow to find the records that do not decode, and when the columns' types allow
                it (JSON_STRUCT_TYPES) that parse is kept as `__value` and from_json has nothing left to do
                (json_values.py; `value_layout` says which)
    avro        Confluent wire format: magic byte 0, 4-byte schema id, Avro binary. The writer schema is
                fetched by id once per process (cached) and records are decoded with fastavro into an Arrow
                struct column `__value` with the relation's columns (avro.py)
    protobuf    Confluent wire format with message indexes (protobuf.py)
                (avro and protobuf: STRUCT, ARRAY and MAP columns are shaped to their declared types,
                core/nested.py; a value that does not fit is a dead letter)
    primitives  string (UTF-8), long/int (big-endian), double (IEEE 754), bytes: one column in `__value`

Keys (key.format): long/int/double keys are read as their decimal text (primitives.py); avro and protobuf keys
are decoded (schema by id, cached per process) into the text keys travel as in a query (keys.py); other keys
are UTF-8. A key that does not decode makes the record a dead letter, like a bad value.

A record that does not decode (bad JSON, not the wire format, an unknown schema id, a value that does not
fit its column) is returned as (index, error): the store's reader sends it to its dead-letter log (a store that
can: Capability.DEAD_LETTERS, core/stores.py). Nothing is dropped.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from dsflow.core.formats import PRIMITIVE_FORMATS, REGISTRY_FORMATS
from dsflow.core.nested import conform_row, nested_columns
from dsflow.errors import DsflowError
from dsflow.formats.arrow import Bad, value_struct
from dsflow.formats.avro import avro_record
from dsflow.formats.json_values import json_problems, parse_chunk
from dsflow.formats.keys import key_texts as registry_key_texts
from dsflow.formats.primitives import UNPACK, key_problems
from dsflow.formats.protobuf import decode
from dsflow.formats.registry import registry_settings

TEXT, STRUCT, BOTH = "text", "struct", "both"
"""How a source's values reach Spark (`value_layout`): as text in `value` for from_json, decoded into `__value`,
or both columns, each record in one of them (a JSON source whose values the reader parses)."""

JSON_STRUCT_TYPES = frozenset({"BIGINT", "INT", "INTEGER", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT", "BOOLEAN",
                               "VARCHAR", "STRING", "TEXT"})
"""Column types pyarrow's JSON reader converts like Spark's from_json, each value or none at all (json_values.py
finds the exceptions); a JSON source with any other column (TIMESTAMP, DATE, DECIMAL, BINARY, CHAR, VARCHAR(n),
nested types) keeps its values as text for from_json."""


@dataclass(frozen=True)
class Decoding:
    """How a source's values are decoded, and where records that do not decode go."""

    value_format: str = "json"
    columns: tuple[tuple[str, str], ...] = ()
    registry: dict[str, str] = field(default_factory=dict, repr=False)  # may hold credentials
    dlq_topic: str | None = None
    query: str = ""
    key_format: str | None = None
    """long, int or double: keys are binary numbers, read as their decimal text and written back as binary;
    avro or protobuf: Confluent wire-format keys, read as text (keys.py)."""
    on_error: str | None = None
    """'source.deserialization.error.handling' (option `deserialization.errors`): TERMINATE, IGNORE or
    IGNORE_AND_LOG; None: dead letters where there is a dead-letter target, else TERMINATE (`policy`)."""
    skip_log: str | None = None
    """IGNORE: the file each task appends the count of records it skipped to (option `skip.log`, JSON lines)."""

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> Decoding:
        columns = tuple(tuple(c) for c in json.loads(opts.get("value.columns") or "[]"))
        return cls(value_format=opts.get("value.format", "json").lower(), columns=columns,
                   registry=registry_settings(opts), dlq_topic=opts.get("dlq.topic") or None,
                   query=opts.get("dlq.query", ""), key_format=(opts.get("key.format") or "").lower() or None,
                   on_error=(opts.get("deserialization.errors") or "").upper() or None,
                   skip_log=opts.get("skip.log") or None)

    @property
    def policy(self) -> str:
        """What happens to a record that does not decode: TERMINATE, IGNORE or IGNORE_AND_LOG (a dead letter)."""
        return self.on_error or ("IGNORE_AND_LOG" if self.dlq_topic else "TERMINATE")

    @property
    def numeric_key(self) -> bool:
        return self.key_format in UNPACK

    @property
    def registry_key(self) -> bool:
        return self.key_format in REGISTRY_FORMATS

    @property
    def decodes_keys(self) -> bool:
        """True if keys are checked or decoded here (binary numbers, avro, protobuf)."""
        return self.numeric_key or self.registry_key

    @property
    def decoded(self) -> bool:
        """True if values are decoded here into `__value` (every format but json)."""
        return self.value_format != "json"

    @property
    def layout(self) -> str:
        """How the values of a source whose reader parses JSON reach Spark (`value_layout`)."""
        return value_layout(self.value_format, self.columns, self.dlq_topic)


def value_layout(value_format: str, columns: Any, dlq_topic: str | None, parses_json: bool = True) -> str:
    """STRUCT for the formats decoded in the reader; BOTH for a JSON source with a dead-letter target whose
    columns are all JSON_STRUCT_TYPES, when its reader keeps the parse it makes anyway (`parses_json`,
    json_values.py); else TEXT.

    The one predicate for the data source's schema and the query's source view (adapters/spark/frames.py asks
    the source's store facet, which calls this), so the two always agree."""
    if value_format != "json":
        return STRUCT
    names = {str(name).lower() for name, _ in columns}
    if (parses_json and dlq_topic and columns and len(names) == len(columns)
            and all(str(sql_type).strip().upper() in JSON_STRUCT_TYPES for _, sql_type in columns)):
        return BOTH
    return TEXT


def set_aside(bad: Bad, decoding: Decoding, undecodable: Callable[[int, str], Exception]) -> Bad:
    """The records of `bad` (index, error) that go to the dead-letter target under the decoding's policy: all of them
    (IGNORE_AND_LOG); none, their count appended to the skip log (IGNORE); or the first one's error, raised
    (TERMINATE: `undecodable(index, error)` names the record)."""
    if not bad:
        return bad
    policy = decoding.policy
    if policy == "TERMINATE":
        raise undecodable(*bad[0])
    if policy == "IGNORE":
        if decoding.skip_log:
            import time

            with open(decoding.skip_log, "a", encoding="utf-8") as log:
                log.write(json.dumps({"skipped": len(bad), "at": time.time()}) + "\n")
        return []
    return bad


def skipped_count(path: str) -> int:
    """Records the reads of a query skipped under IGNORE (the lines of its skip log), 0 if none."""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return 0
    return sum(json.loads(line)["skipped"] for line in lines if line)


def decode_chunk(messages: list, decoding: Decoding) -> tuple[list[int], Any, Bad]:
    """(indexes of the records kept, their `__value` struct array or None for json text, the records that failed)."""
    keep, array, _, bad = decode_records(messages, decoding)
    return keep, array, bad


def decode_records(messages: list, decoding: Decoding) -> tuple[list[int], Any, list | None, Bad]:
    """decode_chunk, and the text keys of the records kept when keys are avro/protobuf (else None)."""
    texts, bad_keys = None, []
    key_format = cast(str, decoding.key_format)  # used only when it is a numeric or a registry format
    if decoding.numeric_key:
        bad_keys = key_problems(messages, key_format)
    elif decoding.registry_key:
        texts, bad_keys = registry_key_texts([m.key() for m in messages], key_format, decoding.registry)
    if bad_keys or texts is not None:
        failed = {i for i, _ in bad_keys}
        good = [i for i in range(len(messages)) if i not in failed]
        keep, array, _, bad = decode_records([messages[i] for i in good], replace(decoding, key_format=None))
        kept = [good[i] for i in keep]
        return (kept, array, None if texts is None else [texts[i] for i in kept],
                sorted(bad_keys + [(good[i], e) for i, e in bad]))
    keep, array, bad = _decode_values(messages, decoding)
    return keep, array, None, bad


def _decode_values(messages: list, decoding: Decoding) -> tuple[list[int], Any, Bad]:
    values = [m.value() for m in messages]
    if not decoding.decoded:
        if decoding.layout == BOTH:
            return parse_chunk(values, decoding.columns)
        bad = json_problems(values, decoding.columns) if decoding.dlq_topic else []
        failed = {i for i, _ in bad}
        return [i for i in range(len(values)) if i not in failed], None, bad
    if decoding.value_format == "avro":
        rows, bad = _avro_rows(values, decoding)
    elif decoding.value_format == "protobuf":
        rows, bad = _protobuf_rows(values, decoding)
    elif decoding.value_format in PRIMITIVE_FORMATS:
        rows, bad = _primitive_rows(values, decoding)
    else:
        raise DsflowError("DSF-E771", f"value.format '{decoding.value_format}' cannot be read yet")
    keep, array, mismatched = _to_struct(rows, decoding.columns)
    return keep, array, sorted(bad + mismatched)


def _to_struct(rows: list[tuple[int, Any]], columns: tuple[tuple[str, str], ...]) -> tuple[list[int], Any, Bad]:
    """The rows as one struct array; a batch that does not convert is converted row by row to find the culprits."""
    import pyarrow as pa

    kind = value_struct(columns)
    try:
        return [i for i, _ in rows], pa.array([r for _, r in rows], type=kind), []
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    keep, good, bad = [], [], []
    for i, row in rows:
        try:
            pa.array([row], type=kind)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as err:
            bad.append((i, f"schema mismatch: {err}"))
            continue
        keep.append(i)
        good.append(row)
    return keep, pa.array(good, type=kind), bad


def _avro_rows(values: list, decoding: Decoding) -> tuple[list[tuple[int, Any]], Bad]:
    rows: list[tuple[int, Any]] = []
    bad: Bad = []
    names = [n for n, _ in decoding.columns]
    shape = _shaper(decoding.columns)
    for i, value in enumerate(values):
        if value is None:  # a tombstone: no value
            rows.append((i, None))
            continue
        record, error = avro_record(value, decoding.registry)
        if error is None:
            lowered = {k.lower(): v for k, v in record.items()}
            row, error = shape({n: record[n] if n in record else lowered.get(n.lower()) for n in names})
        if error is None:
            rows.append((i, row))
        else:
            bad.append((i, error))
    return rows, bad


def _protobuf_rows(values: list, decoding: Decoding) -> tuple[list[tuple[int, Any]], Bad]:
    rows: list[tuple[int, Any]] = []
    bad: Bad = []
    names = [n for n, _ in decoding.columns]
    shape = _shaper(decoding.columns)
    for i, value in enumerate(values):
        if value is None:
            rows.append((i, None))
            continue
        row, error = decode(value, decoding.registry, names)
        if error is None:
            row, error = shape(cast(dict, row))  # decode gives a row or an error
        if error is None:
            rows.append((i, row))
        else:
            bad.append((i, error))
    return rows, bad


def _shaper(columns: tuple[tuple[str, str], ...]) -> Callable[[dict], tuple[dict | None, str | None]]:
    """(row, None) with its STRUCT, ARRAY and MAP columns shaped to their types (core/nested.py), or (None, why
    a value does not fit)."""
    nested = nested_columns(columns)

    def shaped(row: dict) -> tuple[dict | None, str | None]:
        try:
            return conform_row(row, nested), None
        except ValueError as err:
            return None, f"schema mismatch: {err}"

    return shaped


def _primitive_rows(values: list, decoding: Decoding) -> tuple[list[tuple[int, Any]], Bad]:
    name = decoding.columns[0][0]
    fmt = decoding.value_format
    rows: list[tuple[int, Any]] = []
    bad: Bad = []
    for i, value in enumerate(values):
        if value is None:  # a tombstone
            rows.append((i, None))
        elif fmt == "bytes":
            rows.append((i, {name: value}))
        elif fmt == "string":
            try:
                rows.append((i, {name: value.decode("utf-8")}))
            except UnicodeDecodeError as err:
                bad.append((i, f"not UTF-8: {err}"))
        elif len(value) != UNPACK[fmt][0]:
            bad.append((i, f"a {fmt} value has {UNPACK[fmt][0]} bytes, this one has {len(value)}"))
        else:
            rows.append((i, {name: struct.unpack(UNPACK[fmt][1], value)[0]}))
    return rows, bad
