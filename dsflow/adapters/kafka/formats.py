"""Values in and out of Kafka records by format, and the dead-letter topic for records that do not decode.

Reading (inside a read task of the Kafka data source), per chunk of consumed messages:

    json        values stay text for the JVM's from_json; when a dead-letter topic is set, the chunk is
                parsed by pyarrow to find the records that do not decode, and when the columns' types allow
                it (JSON_STRUCT_TYPES) that parse is kept as `__value` and from_json has nothing left to do
                (json_values.py; `value_layout` says which)
    avro        Confluent wire format: magic byte 0, 4-byte schema id, Avro binary. The writer schema is
                fetched by id once per process (cached) and records are decoded with fastavro into an Arrow
                struct column `__value` with the relation's columns
    primitives  string (UTF-8), long/int (big-endian), double (IEEE 754), bytes: one column in `__value`

Keys (key.format): long/int/double keys are read as their decimal text; avro and protobuf keys are decoded
(schema by id, cached per process) into the text keys travel as in a query (keys.py); other keys are UTF-8.
A key that does not decode makes the record a dead letter, like a bad value.

A record that does not decode (bad JSON, not the wire format, an unknown schema id, a value that does not
fit its column) goes to the dead-letter topic with its key and value as they were, and headers naming the
error and the source topic, partition and offset. Nothing is dropped: a record is in the result or in the
dead-letter topic (at-least-once: a retried task sends its dead letters again).

Writing: `value_serializer` turns the sink's `value` structs into bytes (avro through confluent-kafka's
AvroSerializer, which registers the schema under the subject; primitives by struct.pack); `key_encoder`
turns text keys into binary numbers or Confluent avro/protobuf keys (registered under <topic>-key).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dsflow.core.formats import PRIMITIVE_FORMATS, REGISTRY_FORMATS, base_type
from dsflow.errors import DsflowError

NUMERIC_KEYS = ("long", "int", "double")
"""Key formats whose keys are binary numbers (the others are read and written as text)."""

VALUE_COLUMN = "__value"
"""The struct column holding decoded columns (formats other than json; json in the layout "both")."""

TEXT, STRUCT, BOTH = "text", "struct", "both"
"""How a source's values reach Spark (`value_layout`): as text in `value` for from_json, decoded into `__value`,
or both columns, each record in one of them (a JSON source whose values the reader parses)."""

JSON_STRUCT_TYPES = frozenset({"BIGINT", "INT", "INTEGER", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT", "BOOLEAN",
                               "VARCHAR", "STRING", "TEXT"})
"""Column types pyarrow's JSON reader converts like Spark's from_json, each value or none at all (json_values.py
finds the exceptions); a JSON source with any other column (TIMESTAMP, DATE, DECIMAL, BINARY, CHAR, VARCHAR(n),
nested types) keeps its values as text for from_json."""

HEADER_ERROR, HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET, HEADER_QUERY = (
    "dsflow.error", "dsflow.source.topic", "dsflow.source.partition", "dsflow.source.offset", "dsflow.query")


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

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> Decoding:
        from dsflow.adapters.kafka.registry import registry_settings

        columns = tuple(tuple(c) for c in json.loads(opts.get("value.columns") or "[]"))
        return cls(value_format=opts.get("value.format", "json").lower(), columns=columns,
                   registry=registry_settings(opts), dlq_topic=opts.get("dlq.topic") or None,
                   query=opts.get("dlq.query", ""), key_format=(opts.get("key.format") or "").lower() or None)

    @property
    def numeric_key(self) -> bool:
        return self.key_format in _UNPACK

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
        """How a Kafka source's values reach Spark (`value_layout`)."""
        return value_layout(self.value_format, self.columns, self.dlq_topic)


def value_layout(value_format: str, columns: Any, dlq_topic: str | None, store: str = "kafka") -> str:
    """STRUCT for the formats decoded in the reader; BOTH for a Kafka JSON source with a dead-letter topic whose
    columns are all JSON_STRUCT_TYPES (the reader parses its values anyway, json_values.py); else TEXT.

    The one predicate for the data source's schema (datasource.py) and the query's source view
    (adapters/spark/frames.py), so the two always agree."""
    if value_format != "json":
        return STRUCT
    names = {str(name).lower() for name, _ in columns}
    if (store == "kafka" and dlq_topic and columns and len(names) == len(columns)
            and all(str(sql_type).strip().upper() in JSON_STRUCT_TYPES for _, sql_type in columns)):
        return BOTH
    return TEXT


# --- types ------------------------------------------------------------------------------------------


def arrow_type(sql_type: str) -> Any:
    """The Arrow type Spark expects for a column type."""
    import re

    import pyarrow as pa

    name = base_type(sql_type)
    simple = {"BIGINT": pa.int64(), "INT": pa.int32(), "INTEGER": pa.int32(), "SMALLINT": pa.int16(),
              "TINYINT": pa.int8(), "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "BOOLEAN": pa.bool_(),
              "BINARY": pa.binary(), "VARBINARY": pa.binary(), "BYTES": pa.binary(), "DATE": pa.date32(),
              "TIMESTAMP": pa.timestamp("us", tz="UTC"), "TIMESTAMPTZ": pa.timestamp("us", tz="UTC")}
    if name == "DECIMAL":
        digits = [int(d) for d in re.findall(r"\d+", sql_type)] or [10, 0]
        return pa.decimal128(digits[0], digits[1] if len(digits) > 1 else 0)
    return simple.get(name, pa.string())


def value_struct(columns: tuple[tuple[str, str], ...]) -> Any:
    import pyarrow as pa

    return pa.struct([(name, arrow_type(sql_type)) for name, sql_type in columns])


def spark_struct_ddl(columns: list[tuple[str, str]]) -> str:
    """`__value STRUCT<...>` in Spark DDL, for the data source's schema."""
    from dsflow.adapters.spark.translate import spark_type

    return f"{VALUE_COLUMN} STRUCT<" + ", ".join(f"`{n}`: {spark_type(t)}" for n, t in columns) + ">"


# --- decoding ---------------------------------------------------------------------------------------


Bad = list[tuple[int, str]]
"""(index in the chunk, error text) of records that did not decode."""


def decode_chunk(messages: list, decoding: Decoding) -> tuple[list[int], Any, Bad]:
    """(indexes of the records kept, their `__value` struct array or None for json text, the records that failed)."""
    keep, array, _, bad = decode_records(messages, decoding)
    return keep, array, bad


def decode_records(messages: list, decoding: Decoding) -> tuple[list[int], Any, list | None, Bad]:
    """decode_chunk, and the text keys of the records kept when keys are avro/protobuf (else None)."""
    texts, bad_keys = None, []
    if decoding.numeric_key:
        bad_keys = _key_problems(messages, decoding.key_format)
    elif decoding.registry_key:
        from dsflow.adapters.kafka.keys import key_texts as registry_key_texts

        texts, bad_keys = registry_key_texts([m.key() for m in messages], decoding.key_format, decoding.registry)
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
        from dsflow.adapters.kafka.json_values import json_problems, parse_chunk

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
    rows, bad = [], []
    names = [n for n, _ in decoding.columns]
    for i, value in enumerate(values):
        if value is None:  # a tombstone: no value
            rows.append((i, None))
            continue
        record, error = avro_record(value, decoding.registry)
        if error is not None:
            bad.append((i, error))
            continue
        lowered = {k.lower(): v for k, v in record.items()}
        rows.append((i, {n: record[n] if n in record else lowered.get(n.lower()) for n in names}))
    return rows, bad


def avro_record(value: bytes, registry: Mapping[str, str], records_only: bool = True) -> tuple[Any, str | None]:
    """(the decoded datum, None) or (None, error) for one Confluent wire-format Avro value or key;
    `records_only`: a datum that is not a record is an error."""
    import fastavro

    if len(value) < 5 or value[0] != 0:
        return None, "not in the Confluent wire format (no magic byte 0 and schema id)"
    schema_id = int.from_bytes(value[1:5], "big")
    schema = writer_schema(registry, schema_id)
    if schema is None:
        return None, f"unknown schema id {schema_id}"
    try:
        record = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
    except Exception as err:  # noqa: BLE001 - any decoding failure makes a dead letter
        return None, f"cannot decode Avro with schema id {schema_id}: {err!r}"
    if records_only and not isinstance(record, dict):
        return None, f"schema id {schema_id} is not a record schema"
    return record, None


_SCHEMAS: dict[tuple[str, int], Any] = {}


def writer_schema(registry: Mapping[str, str], schema_id: int) -> Any:
    """The parsed Avro schema of an id, cached per process; None if the registry does not know the id.
    A registry that cannot be reached stops the query (DSF-E770): that is not the record's fault."""
    import fastavro

    from dsflow.adapters.kafka.registry import URL, schema_by_id

    key = (registry.get(URL, ""), schema_id)
    if key not in _SCHEMAS:
        try:
            text, schema_type = schema_by_id(registry, schema_id)
        except DsflowError as err:
            if err.code != "DSF-E123":
                raise
            _SCHEMAS[key] = None
            return None
        _SCHEMAS[key] = fastavro.parse_schema(json.loads(text)) if schema_type.upper() == "AVRO" else None
    return _SCHEMAS[key]


def _protobuf_rows(values: list, decoding: Decoding) -> tuple[list[tuple[int, Any]], Bad]:
    from dsflow.adapters.kafka.protobuf import decode

    rows, bad = [], []
    names = [n for n, _ in decoding.columns]
    for i, value in enumerate(values):
        if value is None:
            rows.append((i, None))
            continue
        row, error = decode(value, decoding.registry, names)
        if error is None:
            rows.append((i, row))
        else:
            bad.append((i, error))
    return rows, bad


def _key_problems(messages: list, key_format: str) -> Bad:
    size = _UNPACK[key_format][0]
    return [(i, f"key: a {key_format} key has {size} bytes, this one has {len(m.key())}")
            for i, m in enumerate(messages) if m.key() is not None and len(m.key()) != size]


def key_texts(keys: list, key_format: str) -> list:
    """Binary number keys as their decimal text (how keys travel inside a query)."""
    fmt = _UNPACK[key_format][1]
    return [None if k is None else str(struct.unpack(fmt, k)[0]) for k in keys]


def key_encoder(key_format: str | None, topic: str = "", registry: Mapping[str, str] | None = None,
                schema: str | None = None, subject: str | None = None) -> Callable[[list], list] | None:
    """Keys (text inside the query) back to binary numbers for a long/int/double key format, or to Confluent
    avro/protobuf keys (`schema`, registered under `subject`, default <topic>-key); None otherwise."""
    if key_format in REGISTRY_FORMATS:
        from dsflow.adapters.kafka.keys import key_serializer

        return key_serializer(key_format, topic, registry or {}, schema, subject)
    if key_format not in _UNPACK:
        return None
    fmt = _UNPACK[key_format][1]
    parse = float if key_format == "double" else lambda t: int(float(t)) if "." in t or "e" in t.lower() else int(t)
    return lambda keys: [None if k is None else struct.pack(fmt, parse(k if isinstance(k, str) else k.decode()))
                         for k in keys]


_UNPACK = {"long": (8, ">q"), "int": (4, ">i"), "double": (8, ">d")}


def _primitive_rows(values: list, decoding: Decoding) -> tuple[list[tuple[int, Any]], Bad]:
    name = decoding.columns[0][0]
    fmt = decoding.value_format
    rows, bad = [], []
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
        elif len(value) != _UNPACK[fmt][0]:
            bad.append((i, f"a {fmt} value has {_UNPACK[fmt][0]} bytes, this one has {len(value)}"))
        else:
            rows.append((i, {name: struct.unpack(_UNPACK[fmt][1], value)[0]}))
    return rows, bad


# --- dead letters -------------------------------------------------------------------------------------


class DeadLetters:
    """Sends records that did not decode to the dead-letter topic; `close()` flushes (DSF-E772 on failure)."""

    def __init__(self, config: Mapping[str, Any], decoding: Decoding) -> None:
        self.config = dict(config)
        self.decoding = decoding
        self.count = 0
        self._producer: Any = None
        self._errors: Any = None

    def send(self, messages: list, bad: Bad) -> None:
        if not bad:
            return
        if self._producer is None:
            self._open()
        for index, error in bad:
            m = messages[index]
            headers = [(HEADER_ERROR, error[:2000]), (HEADER_TOPIC, m.topic()), (HEADER_PARTITION, str(m.partition())),
                       (HEADER_OFFSET, str(m.offset())), (HEADER_QUERY, self.decoding.query)]
            while True:
                try:
                    self._producer.produce(self.decoding.dlq_topic, m.value(), m.key(), headers=headers)
                    break
                except BufferError:
                    self._producer.poll(0.1)
            self.count += 1
        self._producer.poll(0)

    def _open(self) -> None:
        from dsflow.adapters.kafka import client
        from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic

        bootstrap = self.config.get("bootstrap.servers", "")
        extra = {k: str(v) for k, v in self.config.items() if k != "bootstrap.servers"}
        ensure_topic(bootstrap, TopicSpec(self.decoding.dlq_topic, 1), extra)
        self._errors = client.DeliveryErrors()
        self._producer = client.new_producer(self.config, self._errors)

    def close(self) -> None:
        from dsflow.adapters.kafka import client

        if self._producer is None:
            return
        try:
            client.flush_or_raise(self._producer, self.decoding.dlq_topic, self.count, self._errors)
        except DsflowError as err:
            raise DsflowError("DSF-E772", f"dead letters of query {self.decoding.query} not delivered: "
                              f"{err.message}", hint="check the dead-letter topic and the broker") from err


def dead_letter_count(config: Mapping[str, Any], topic: str) -> int | None:
    """Records in the dead-letter topic (end minus start offsets); None if it does not exist."""
    from dsflow.adapters.kafka import client

    with client.consumer(config) as c:
        try:
            parts = client.topic_partitions(c, topic, timeout=5.0)
        except DsflowError:
            return None
        if not parts:
            return None
        starts = client.start_offsets(c, topic, parts)
        ends = client.end_offsets(c, topic, parts, first_wait=0.5)
        return sum(max(0, ends[p] - starts[p]) for p in parts)


# --- writing ------------------------------------------------------------------------------------------


def value_serializer(value_format: str, topic: str, registry: Mapping[str, str], schema: str | None,
                     subject: str | None) -> Callable[[list], list] | None:
    """A function from a batch's `value` structs (dicts) to record values; None for json (text as it is)."""
    if value_format == "json":
        return None
    if value_format in PRIMITIVE_FORMATS:
        return _primitive_serializer(value_format)
    if value_format == "protobuf":
        from dsflow.adapters.kafka.protobuf import serializer

        return serializer(topic, registry, schema or "", subject)
    if value_format != "avro":
        raise DsflowError("DSF-E771", f"value.format '{value_format}' cannot be written yet")
    from confluent_kafka.serialization import MessageField, SerializationContext
    from confluent_kafka.schema_registry.avro import AvroSerializer

    from dsflow.adapters.kafka.registry import client

    conf = {"auto.register.schemas": True, "subject.name.strategy": lambda ctx, name: subject or f"{topic}-value"}
    serializer = AvroSerializer(client(registry), schema, conf=conf)
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda rows: [None if r is None else serializer(r, context) for r in rows]


def _primitive_serializer(value_format: str) -> Callable[[list], list]:
    def one(row: Any) -> bytes | None:
        value = next(iter(row.values())) if isinstance(row, dict) else row
        if value is None:
            return None
        if value_format == "string":
            return str(value).encode("utf-8")
        if value_format == "bytes":
            return bytes(value)
        return struct.pack(_UNPACK[value_format][1], value)

    return lambda rows: [one(r) for r in rows]
