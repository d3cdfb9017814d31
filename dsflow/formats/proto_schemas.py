"""Protobuf schemas: a relation's columns to and from a proto3 message (a base64 FileDescriptorProto), and the
message classes that decode and encode records of a schema (protobuf.py: the wire format).

Schemas travel as a base64 FileDescriptorProto (what confluent-kafka's ProtobufSerializer registers and
what the registry returns with `format=serialized`). A sink's schema is one proto3 message named after the
relation, one field per column numbered in column order: scalars are `optional` (so null stays null), a STRUCT
is a nested message (named after its field in CamelCase), an ARRAY a repeated field, a MAP (string keys only,
DSF-E774) a map<string, V> (its entry message named as protoc names it), and three column types are the
well-known messages Confluent's converters use:

    TIMESTAMP   google.protobuf.Timestamp   seconds + nanos since the epoch (UTC)
    DATE        google.type.Date            year, month, day
    DECIMAL     confluent.type.Decimal      unscaled big-endian two's complement bytes, precision, scale; the
                                            column's precision and scale are also in the field's
                                            (confluent.field_meta).params, which columns_from_proto reads back
                                            (DECIMAL(38, 18) when a schema does not say)

Protobuf has no null array or map (a NULL ARRAY or MAP is written as an empty one and reads back empty), no null
element inside a repeated field or map (writing one stops the query, DSF-E775: protobuf.py), and no repeated field
of repeated fields (an ARRAY of ARRAYs or MAPs, a MAP of them: refused at load, DSF-E777).

These files are known here (no schema references are needed for them, as confluent-kafka's
`skip.known.types` does not register them either). Keys use the same schemas (a message of the key columns).
"""

from __future__ import annotations

import base64
from typing import Any

from dsflow.core.formats import base_type
from dsflow.core.nested import Shape, is_string, parse_type, type_text

_TO_PROTO = {"BIGINT": "INT64", "INT": "INT32", "INTEGER": "INT32", "SMALLINT": "INT32", "TINYINT": "INT32",
             "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "BOOLEAN": "BOOL", "VARCHAR": "STRING", "STRING": "STRING",
             "TEXT": "STRING", "CHAR": "STRING", "BINARY": "BYTES", "VARBINARY": "BYTES", "BYTES": "BYTES"}


_FROM_PROTO = {"INT64": "BIGINT", "SINT64": "BIGINT", "SFIXED64": "BIGINT", "UINT32": "BIGINT", "FIXED32": "BIGINT",
               "INT32": "INT", "SINT32": "INT", "SFIXED32": "INT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT",
               "BOOL": "BOOLEAN", "STRING": "VARCHAR", "BYTES": "BINARY", "ENUM": "VARCHAR"}


TIMESTAMP, DATE, DECIMAL = "google.protobuf.Timestamp", "google.type.Date", "confluent.type.Decimal"


_MESSAGES = {"TIMESTAMP": TIMESTAMP, "TIMESTAMPTZ": TIMESTAMP, "DATE": DATE, "DECIMAL": DECIMAL}


_FILES = {TIMESTAMP: "google/protobuf/timestamp.proto", DATE: "google/type/date.proto",
          DECIMAL: "confluent/type/decimal.proto"}


META_FILE = "confluent/meta.proto"


DEFAULT_DECIMAL = (38, 18)
"""Precision and scale of a confluent.type.Decimal field whose schema does not give them."""


def proto_type_name(sql_type: str) -> str | None:
    return _TO_PROTO.get(base_type(sql_type))


def _decimal_digits(sql_type: str) -> tuple[int, int]:
    import re

    digits = [int(d) for d in re.findall(r"\d+", sql_type)]
    return (digits[0], digits[1] if len(digits) > 1 else 0) if digits else (10, 0)


def schema_text(record: str, package: str, columns: list[tuple[str, str]]) -> str:
    """The base64 FileDescriptorProto of a proto3 message with a field per column (STRUCT: a nested message,
    ARRAY: a repeated field, MAP: map<string, V>). Raises ValueError naming a column protobuf cannot carry."""
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name=f"{package}.{record}.proto", package=package, syntax="proto3")
    message = fdp.message_type.add(name=record)
    shapes = []
    for name, sql_type in columns:
        try:
            shapes.append((name, parse_type(sql_type)))
        except ValueError as err:
            raise ValueError(f"column '{name}' has type {sql_type}, which has no protobuf mapping") from err
    for number, (name, shape) in enumerate(shapes, start=1):
        try:
            _add_field(fdp, message, f".{package}.{record}", name, number, shape)
        except ValueError as err:
            raise ValueError(f"column '{name}' has type {type_text(shape)}, which has no protobuf mapping: "
                             f"{err}") from err
    return base64.standard_b64encode(fdp.SerializeToString(deterministic=True)).decode("ascii")


def _add_field(fdp: Any, message: Any, scope: str, name: str, number: int, shape: Shape) -> None:
    """A field of `message` (full name `scope`): a map, a repeated field or a single (presence-tracked) one."""
    from google.protobuf import descriptor_pb2

    kinds = descriptor_pb2.FieldDescriptorProto
    if shape.kind == "map":
        if not is_string(shape.key_shape):
            raise ValueError(f"map keys must be strings, not {type_text(shape.key_shape)}")
        entry = message.nested_type.add(name=map_entry_name(name))
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=kinds.TYPE_STRING, label=kinds.LABEL_OPTIONAL)
        _add_value(fdp, entry, f"{scope}.{entry.name}", "value", 2, shape.element_shape, kinds.LABEL_OPTIONAL,
                   False)
        message.field.add(name=name, number=number, type=kinds.TYPE_MESSAGE, type_name=f"{scope}.{entry.name}",
                          label=kinds.LABEL_REPEATED)
    elif shape.kind == "array":
        _add_value(fdp, message, scope, name, number, shape.element_shape, kinds.LABEL_REPEATED, False)
    else:
        _add_value(fdp, message, scope, name, number, shape, kinds.LABEL_OPTIONAL, True)


def _add_value(fdp: Any, message: Any, scope: str, name: str, number: int, shape: Shape, label: int,
               optional: bool) -> None:
    """A field of one value's type: a nested message (STRUCT), a well-known message or a scalar (`optional`:
    a proto3 optional scalar, so that null stays null)."""
    from google.protobuf import descriptor_pb2

    kinds = descriptor_pb2.FieldDescriptorProto
    if shape.kind in ("array", "map"):
        raise ValueError(f"a repeated field or map value cannot be {type_text(shape)} (wrap it in a STRUCT)")
    if shape.kind == "struct":
        taken = {f.name for f in message.field} | {t.name for t in message.nested_type} | {name}
        nested = message.nested_type.add(name=_free_name(map_entry_name(name)[:-len("Entry")], taken))
        for inner, (field, sub) in enumerate(shape.fields, start=1):
            _add_field(fdp, nested, f"{scope}.{nested.name}", field, inner, sub)
        message.field.add(name=name, number=number, type=kinds.TYPE_MESSAGE, type_name=f"{scope}.{nested.name}",
                          label=label)
        return
    well_known = _MESSAGES.get(base_type(shape.type))
    if well_known is not None:
        _add_well_known(fdp, message, name, number, shape.type, well_known, label)
        return
    kind = proto_type_name(shape.type)
    if kind is None:
        raise ValueError(f"{shape.type} has no protobuf type")
    field = message.field.add(name=name, number=number, type=getattr(kinds, f"TYPE_{kind}"), label=label)
    if optional:
        field.proto3_optional, field.oneof_index = True, len(message.oneof_decl)
        message.oneof_decl.add(name=f"_{name}")


def _add_well_known(fdp: Any, message: Any, name: str, number: int, sql_type: str, well_known: str,
                    label: int) -> None:
    from google.protobuf import descriptor_pb2

    from confluent_kafka.schema_registry.confluent import meta_pb2

    for needed in (_FILES[well_known], META_FILE if well_known == DECIMAL else None):
        if needed and needed not in fdp.dependency:
            fdp.dependency.append(needed)
    field = message.field.add(name=name, number=number, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                              type_name=f".{well_known}", label=label)
    if well_known == DECIMAL:
        precision, scale = _decimal_digits(sql_type)
        # meta_pb2 is generated: protobuf's builder adds field_meta when it is imported
        params = field.options.Extensions[meta_pb2.field_meta].params  # type: ignore[attr-defined]
        params["precision"], params["scale"] = str(precision), str(scale)


def map_entry_name(field: str) -> str:
    """protoc's name of a map field's entry message: the field's name in CamelCase, then Entry."""
    parts = [p for p in field.split("_") if p]
    return "".join(p[:1].upper() + p[1:] for p in parts) + "Entry" if parts else "Entry"


def _free_name(name: str, taken: set[str]) -> str:
    name = name or "Struct"
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{n}"
    return candidate


def _file(text: str) -> Any:
    from google.protobuf import descriptor_pb2

    from confluent_kafka.schema_registry.confluent import meta_pb2

    # importing it registers the field_meta extension the parse reads (a name protobuf's builder adds at import)
    assert meta_pb2.field_meta  # type: ignore[attr-defined]
    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.ParseFromString(base64.standard_b64decode(text.encode("ascii")))
    return fdp


def columns_from_proto(text: str) -> list[tuple[str, str]]:
    """The (name, SQL type) columns of the first message of a base64 FileDescriptorProto: nested messages are
    STRUCTs, repeated fields ARRAYs, map<string, V> MAPs."""
    try:
        fdp = _file(text)
    except Exception as err:  # noqa: BLE001 - .proto source text is not parsed here
        raise ValueError(f"not a serialized protobuf schema: {err}") from err
    if not fdp.message_type:
        raise ValueError("the protobuf schema has no message")
    messages = _messages(fdp)
    top = f".{fdp.package}.{fdp.message_type[0].name}" if fdp.package else f".{fdp.message_type[0].name}"
    return [(f.name, type_text(_field_shape(f, messages, (top,)))) for f in fdp.message_type[0].field]


def _messages(fdp: Any) -> dict[str, Any]:
    """{full name with a leading dot: DescriptorProto} of every message of the file, nested ones too."""
    found: dict[str, Any] = {}

    def walk(scope: str, message: Any) -> None:
        found[f"{scope}.{message.name}"] = message
        for nested in message.nested_type:
            walk(f"{scope}.{message.name}", nested)

    for message in fdp.message_type:
        walk(f".{fdp.package}" if fdp.package else "", message)
    return found


def _field_shape(f: Any, messages: dict[str, Any], seen: tuple[str, ...]) -> Shape:
    from google.protobuf import descriptor_pb2

    kinds = descriptor_pb2.FieldDescriptorProto
    target = _resolve(f.type_name, messages) if f.type == kinds.TYPE_MESSAGE else None
    if target is not None and messages[target].options.map_entry:
        key, value = sorted(messages[target].field, key=lambda g: g.number)[:2]
        if key.type != kinds.TYPE_STRING:
            raise ValueError(f"field '{f.name}' is a map with {kinds.Type.Name(key.type)[5:].lower()} keys; "
                             "dsflow reads maps with string keys")
        return Shape("map", key=Shape("scalar", type="VARCHAR"), element=_field_shape(value, messages, seen))
    if target is not None:
        if target in seen:
            raise ValueError(f"field '{f.name}' is a recursive message, which no column can hold")
        single = Shape("struct", fields=tuple((g.name, _field_shape(g, messages, (*seen, target)))
                                              for g in messages[target].field))
    else:
        single = Shape("scalar", type=_scalar_type(f, kinds))
    return Shape("array", element=single) if f.label == kinds.LABEL_REPEATED else single


def _resolve(type_name: str, messages: dict[str, Any]) -> str | None:
    """The full name of a message of this file that a field's type names (None: a well-known or unknown one)."""
    if type_name in messages:
        return type_name
    matches = [m for m in messages if m.endswith(f".{type_name.lstrip('.')}")]
    return matches[0] if len(matches) == 1 and type_name.lstrip(".") not in _FILES else None


def _scalar_type(f: Any, kinds: Any) -> str:
    kind = kinds.Type.Name(f.type)[len("TYPE_"):]
    well_known = f.type_name.lstrip(".") if kind == "MESSAGE" else ""
    if kind not in _FROM_PROTO and well_known not in _FILES:
        shown = well_known or kind.lower()
        raise ValueError(f"field '{f.name}' ({shown}) cannot be read into a column")
    if well_known == DECIMAL:
        from confluent_kafka.schema_registry.confluent import meta_pb2

        # meta_pb2 is generated: protobuf's builder adds field_meta when it is imported
        params = f.options.Extensions[meta_pb2.field_meta].params  # type: ignore[attr-defined]
        precision = int(params.get("precision") or DEFAULT_DECIMAL[0])
        scale = int(params.get("scale") or (0 if "precision" in params else DEFAULT_DECIMAL[1]))
        return f"DECIMAL({precision}, {scale})"
    if well_known:
        return "TIMESTAMP" if well_known == TIMESTAMP else "DATE"
    return _FROM_PROTO[kind]


_CLASSES: dict[tuple[str, tuple[int, ...]], Any] = {}


def _pool() -> Any:
    """A descriptor pool holding the well-known files a dsflow schema may import."""
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
    from google.type import date_pb2

    from confluent_kafka.schema_registry.confluent import meta_pb2
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2

    pool = descriptor_pool.DescriptorPool()
    for module in (descriptor_pb2, timestamp_pb2, date_pb2, meta_pb2, decimal_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    return pool


def message_class(text: str, index: list[int]) -> Any:
    from google.protobuf import message_factory

    key = (text, tuple(index))
    if key not in _CLASSES:
        fdp = _file(text)
        pool = _pool()
        pool.Add(fdp)
        descriptor = pool.FindFileByName(fdp.name).message_types_by_name[fdp.message_type[index[0]].name]
        for i in index[1:]:
            descriptor = descriptor.nested_types[i]
        _CLASSES[key] = message_factory.GetMessageClass(descriptor)
    return _CLASSES[key]
