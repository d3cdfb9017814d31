"""Value and key formats, used by every store that carries records (topics, streams).

    decoding.py       `Decoding` (a source's format, columns, registry, dead-letter target), `value_layout`, and
                      the decoding of a chunk of records into kept rows and dead letters (index, error)
    serializers.py    `value_serializer` and `key_encoder`: a sink's rows and keys to record bytes
    json_values.py    JSON values: the dead-letter check and the pyarrow parse that stands in for from_json
    avro.py           Avro in the Confluent wire format (writer schema by id, cached per process)
    protobuf.py       protobuf in the Confluent wire format; proto_schemas.py: columns <-> proto3 messages
    keys.py           avro/protobuf keys to and from the text keys travel as in a query
    primitives.py     string, long, int, double, bytes values and binary number keys
    arrow.py          the Arrow and Spark types of the decoded value struct `__value`
    registry.py       the schema registry client (the Confluent client's SchemaRegistryClient)

The layer sits under adapters/ (which read and write records) and above load/ and core/: it never imports an
adapter. Heavy SDKs (the Confluent client, fastavro, protobuf, pyarrow) are imported inside the functions that use
them. How a store sends its dead letters stays in its adapter (a store that can: Capability.DEAD_LETTERS).
"""
