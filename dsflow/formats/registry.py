"""The schema registry (Confluent REST API) through confluent-kafka's SchemaRegistryClient.

    subject_columns(registry, "orders-value", "avro")     # the loader: columns of a subject's latest schema
    register(config, "orders_eu-value", schema, "avro")   # apply: a sink's schema
    set_compatibility(config, "orders_eu-value", "BACKWARD")  # apply: the rule the subject evolves by
    accepts(config, "orders_eu-value", schema, "avro")    # plan: would the live registry take it as a new version
    client(config)                                        # a cached client per process (readers, writers)

`config` is the `schema.registry.*` dict of `SchemaRegistry.client_config()` (also what a log's data
source gets as options). formats/ imports the Confluent client (confluent-kafka) here, and in proto_schemas.py
for the descriptors of the protobuf files it knows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dsflow.core.formats import columns_from_avro
from dsflow.errors import DsflowError
from dsflow.formats.proto_schemas import columns_from_proto

if TYPE_CHECKING:  # the model (pydantic) is the loader's: Spark's Python processes import this module without it
    from dsflow.core.model import SchemaRegistry

URL = "schema.registry.url"
USER = "schema.registry.basic.auth.user"
PASSWORD = "schema.registry.basic.auth.password"

_CLIENTS: dict[tuple, Any] = {}


def registry_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The schema.registry.* entries of a dict of options (keys lower-cased by Spark or not)."""
    return {k.lower(): v for k, v in options.items() if k.lower().startswith("schema.registry.")}


def client(config: Mapping[str, str]) -> Any:
    """One SchemaRegistryClient per registry and credentials in this process (it caches schemas by id)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    key = (config.get(URL), config.get(USER), config.get(PASSWORD))
    if key not in _CLIENTS:
        conf = {"url": config[URL]}
        if config.get(USER) or config.get(PASSWORD):
            conf["basic.auth.user.info"] = f"{config.get(USER, '')}:{config.get(PASSWORD, '')}"
        _CLIENTS[key] = SchemaRegistryClient(conf)
    return _CLIENTS[key]


def record_serializer(value_format: str, config: Mapping[str, str], schema: Any, subject: str, topic: str,
                      key: bool = False) -> Callable[[Any], bytes]:
    """One record's value (or key) of `topic` in the Confluent wire format: avro (`schema` the schema text) or
    protobuf (`schema` the message class), the schema registered under `subject` when first written."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    context = SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE)
    if value_format == "protobuf":
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        conf = {"use.deprecated.format": False, "auto.register.schemas": True,
                "subject.name.strategy": lambda ctx, record: subject}
        serialize = ProtobufSerializer(schema, client(config), conf)
    else:
        from confluent_kafka.schema_registry.avro import AvroSerializer

        conf = {"auto.register.schemas": True, "subject.name.strategy": lambda ctx, name: subject}
        serialize = AvroSerializer(client(config), schema, conf=conf)
    return lambda record: serialize(record, context)


def _failure(config: Mapping[str, str], what: str, err: Exception) -> DsflowError:
    return DsflowError("DSF-E770", f"schema registry {config.get(URL)}: {what} failed: {err}",
                       hint="check that the registry is reachable and the credentials are right")


def latest_schema(config: Mapping[str, str], subject: str, fmt: str | None = None) -> tuple[int, str, str]:
    """(id, schema text, schema type) of the subject's latest version (`fmt='serialized'`: protobuf as a
    base64 FileDescriptorProto)."""
    found = _latest_version(config, subject, fmt)
    return found.schema_id, found.schema.schema_str, found.schema.schema_type or "AVRO"


def _latest_version(config: Mapping[str, str], subject: str, fmt: str | None = None) -> Any:
    """The registry's latest version of the subject; DSF-E123 when it has none or cannot be asked."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return client(config).get_latest_version(subject, fmt=fmt)
    except SchemaRegistryError as err:
        if err.http_status_code == 404:
            raise DsflowError("DSF-E123", f"subject '{subject}' is not in the registry") from err
        raise _failure(config, f"reading subject '{subject}'", err) from err
    except Exception as err:  # noqa: BLE001 - httpx connection errors and the like
        raise _failure(config, f"reading subject '{subject}'", err) from err


def subject_columns(registry: SchemaRegistry, subject: str, value_format: str) -> list[tuple[str, str]]:
    """The (name, SQL type) columns of the subject's latest schema."""
    _, text, schema_type = latest_schema(registry.client_config(), subject,
                                         "serialized" if value_format == "protobuf" else None)
    if schema_type.upper() != value_format.upper():
        raise DsflowError("DSF-E123", f"subject '{subject}' holds a {schema_type} schema, not {value_format}")
    try:
        if value_format == "avro":
            return columns_from_avro(text)
        return columns_from_proto(text)
    except ValueError as err:
        raise DsflowError("DSF-E123", f"subject '{subject}': {err}") from err


def latest_columns(config: Mapping[str, str], subject: str) -> tuple[int | None, str, list[tuple[str, str]]]:
    """(version, value format, columns) of the subject's latest schema, Avro or Protobuf (`dsflow infer`);
    DSF-E123 when the subject is not there or holds another kind of schema."""
    found = _latest_version(config, subject)
    value_format = (found.schema.schema_type or "AVRO").lower()
    if value_format not in ("avro", "protobuf"):
        raise DsflowError("DSF-E123", f"subject '{subject}' holds a {value_format.upper()} schema: dsflow reads "
                          "Avro and Protobuf values through the registry")
    text = found.schema.schema_str if value_format == "avro" else latest_schema(config, subject, "serialized")[1]
    try:
        columns = columns_from_avro(text) if value_format == "avro" else columns_from_proto(text)
    except ValueError as err:
        raise DsflowError("DSF-E123", f"subject '{subject}': {err}") from err
    return found.version, value_format, columns


def register(config: Mapping[str, str], subject: str, schema_text: str, schema_type: str = "AVRO") -> int:
    """Register the schema under the subject (idempotent: the same schema keeps its id); returns the id."""
    from confluent_kafka.schema_registry import Schema

    try:
        return client(config).register_schema(subject, Schema(schema_text, schema_type.upper()))
    except Exception as err:  # noqa: BLE001
        raise _failure(config, f"registering subject '{subject}'", err) from err


_BY_ID: dict[tuple[str, int], str | None] = {}


def schema_text_by_id(config: Mapping[str, str], schema_id: int, schema_type: str) -> str | None:
    """The schema text of an id if it is a `schema_type` schema, cached per process; None if unknown."""
    key = (config.get(URL, ""), schema_id)
    if key not in _BY_ID:
        try:
            text, found = schema_by_id(config, schema_id, "serialized" if schema_type == "PROTOBUF" else None)
        except DsflowError as err:
            if err.code != "DSF-E123":
                raise
            text, found = None, ""
        _BY_ID[key] = text if found.upper() == schema_type else None
    return _BY_ID[key]


def schema_by_id(config: Mapping[str, str], schema_id: int, fmt: str | None = None) -> tuple[str, str]:
    """(schema text, schema type) of a schema id; the client caches it. DSF-E123 if the id is unknown."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        schema = client(config).get_schema(schema_id, fmt=fmt)
    except SchemaRegistryError as err:
        if err.http_status_code == 404:
            raise DsflowError("DSF-E123", f"schema id {schema_id} is not in the registry") from err
        raise _failure(config, f"reading schema id {schema_id}", err) from err
    except Exception as err:  # noqa: BLE001
        raise _failure(config, f"reading schema id {schema_id}", err) from err
    return schema.schema_str, schema.schema_type or "AVRO"


def compatibility(config: Mapping[str, str], subject: str) -> str:
    """The subject's compatibility level, or the registry's global one when the subject has none of its own."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        try:
            return client(config).get_compatibility(subject).upper()
        except SchemaRegistryError as err:
            if err.http_status_code != 404:
                raise
            return client(config).get_compatibility().upper()
    except Exception as err:  # noqa: BLE001
        raise _failure(config, f"reading the compatibility of subject '{subject}'", err) from err


def set_compatibility(config: Mapping[str, str], subject: str, level: str) -> None:
    """Set the subject's compatibility level (the rule its next versions are checked by)."""
    try:
        client(config).set_compatibility(subject, level.upper())
    except Exception as err:  # noqa: BLE001
        raise _failure(config, f"setting the compatibility of subject '{subject}' to {level}", err) from err


def accepts(config: Mapping[str, str], subject: str, schema_text: str, schema_type: str = "AVRO") -> bool:
    """The registry's own verdict (its /compatibility endpoint, under the subject's level): may the schema be
    registered as the subject's next version? True for a subject that does not exist yet."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return bool(client(config).test_compatibility(subject, Schema(schema_text, schema_type.upper())))
    except SchemaRegistryError as err:
        if err.http_status_code == 404:
            return True
        raise _failure(config, f"testing a schema against subject '{subject}'", err) from err
    except Exception as err:  # noqa: BLE001
        raise _failure(config, f"testing a schema against subject '{subject}'", err) from err


def subject_history(config: Mapping[str, str], subject: str, value_format: str) -> list[list[tuple[str, str]]]:
    """The columns of every version of the subject, oldest first ([] if there is no such subject)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    fmt = "serialized" if value_format == "protobuf" else None
    try:
        versions = client(config).get_versions(subject)
        texts = [client(config).get_version(subject, v, fmt=fmt).schema.schema_str for v in versions]
    except SchemaRegistryError as err:
        if err.http_status_code == 404:
            return []
        raise _failure(config, f"reading the versions of subject '{subject}'", err) from err
    except Exception as err:  # noqa: BLE001
        raise _failure(config, f"reading the versions of subject '{subject}'", err) from err
    if value_format == "protobuf":
        return [columns_from_proto(t) for t in texts]
    return [columns_from_avro(t) for t in texts]
