"""Value formats on Kinesis streams against kinesalite, real Spark and the test schema registry: avro and
primitives read and written by dsflow's translated queries, records that do not decode (dead-letter stream
or a failed query naming stream, shard and sequence number), and `dsflow topic produce/print` honouring
the relation's format. Values are put and checked independently (boto3, confluent-kafka's serializers)."""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REGISTRY_AUTH
from dsflow.engine import operations
from dsflow.adapters.kinesis import admin
from dsflow.adapters.kinesis.client import new_client
from dsflow.adapters.kinesis.records import read_dead_letters
from dsflow.adapters.kinesis.writing import put_entries
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.translate import query_spec
from dsflow.cli import cli
from dsflow.load.project import load_project
from support.projects import make_project
from support.registry_projects import ENVIRON, avro_values, registry_conf

pytestmark = pytest.mark.integration

CONFIG = """\
name: kinformats
default:
  database: analytics
  schema: public
  store: kin
default_environment: dev
environments:
  dev:
    topic_prefix: "{prefix}"
"""

STORES = """\
schema_registries:
  - name: sr
    url: "{{ var('registry') }}"
    username: %s
    password: "{{ env_var('SR_PASSWORD') }}"
stores:
  - name: kin
    type: kinesis
    schema_registry: sr
    properties:
      region: us-east-1
      endpoint: "{{ var('kinesis') }}"
""" % REGISTRY_AUTH[0]

ORDER_SCHEMA = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "amount", "type": "double"}, {"name": "item", "type": "string"}]})
ORDERS = [{"id": i, "amount": float(i * 7 % 50), "item": f"item-{i % 4}"} for i in range(60)]


def _project(tmp_path: Path, kinesis: str, registry: str, sql: str):
    prefix = f"k{uuid.uuid4().hex[:8]}_"
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=prefix), "stores/kafka.yml": STORES,
                                   "sql/all.sql": sql})
    variables = {"kinesis": kinesis, "registry": registry}
    project = load_project(root, variables=variables, environ=ENVIRON)
    settings = dict(project.store("kin").properties)
    for relation in project.relations:
        admin.ensure_stream(settings, relation.topic, relation.partitions)
    return root, project, settings, variables


def _start(spark, project, name: str, work: Path):
    query = next(q for q in project.queries if q.fqn == f"analytics.public.{name}")
    spec = query_spec(project, query, "test", str(work / "cp" / name), str(work / f"{name}.status"))
    running = start_query(spark, spec, available_now=True)
    assert running.awaitTermination(180), f"{name} did not finish"
    return running


def _run(spark, project, name: str, work: Path) -> None:
    running = _start(spark, project, name, work)
    assert running.exception() is None, running.exception()


def _put(settings, stream: str, values: list[bytes], key: str = "k") -> None:
    assert put_entries(new_client(settings), stream, ({"Data": v, "PartitionKey": f"{key}{i}"}
                                                      for i, v in enumerate(values))) == len(values)


def _raw(settings, stream: str) -> list[dict]:
    """Every record's data as bytes, with shard and sequence number (boto3, independent of dsflow's reader)."""
    client = new_client(settings)
    out = []
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        iterator = client.get_shard_iterator(StreamName=stream, ShardId=shard["ShardId"],
                                             ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while iterator:
            response = client.get_records(ShardIterator=iterator, Limit=10_000)
            out += [{"data": r["Data"], "shard": shard["ShardId"], "sequence": r["SequenceNumber"],
                     "key": r["PartitionKey"]} for r in response["Records"]]
            if not response["Records"] and response.get("MillisBehindLatest", 0) == 0:
                break
            iterator = response.get("NextShardIterator")
    return out


def _avro_decode(registry: str, stream: str, values: list[bytes]) -> list[dict]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserializer = AvroDeserializer(SchemaRegistryClient(registry_conf(registry)))
    return [deserializer(v, SerializationContext(stream, MessageField.VALUE)) for v in values]


NESTED_SCHEMA = json.dumps({"type": "record", "name": "Basket", "fields": [
    {"name": "id", "type": "long"},
    {"name": "payload", "type": ["null", {"type": "record", "name": "Payload", "fields": [
        {"name": "a", "type": ["null", "int"]},
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}}]}]},
    {"name": "attrs", "type": {"type": "map", "values": "long"}}]})
"""A producer's nested Avro schema, written independently of dsflow."""
BASKETS = [{"id": i,
            "payload": None if i % 4 == 0 else {"a": None if i % 3 == 0 else i, "tags": [f"t{i}", None][:i % 3]},
            "attrs": {"k": i * 2, "z": 1} if i % 2 else {}} for i in range(20)]


def _basket_out(b: dict) -> dict:
    """What nested_out writes for a basket, computed in plain Python (a subscript counts from 1, NULL beyond)."""
    tags = (b["payload"] or {}).get("tags") or []
    return {"id": b["id"], "payload": None if b["payload"] is None else {"a": b["payload"]["a"], "tags": tags},
            "attrs": b["attrs"], "first_tag": tags[0] if tags else None, "k": b["attrs"].get("k")}


def test_avro_and_primitives_through_kinesis_queries(tmp_path, spark, kinesis_endpoint, schema_registry):
    """avro in, avro and long out; long in, string out; nested avro (STRUCT, ARRAY, MAP) in and out: every value as
    a reference computes it."""
    _, project, settings, _ = _project(tmp_path, kinesis_endpoint, schema_registry, """
        CREATE STREAM orders (id BIGINT, amount DOUBLE, item VARCHAR)
          WITH ('value.format' = 'avro', 'topic.shards' = 2);
        CREATE STREAM big_orders AS SELECT id, amount * 2 AS doubled, item FROM orders WHERE amount > 10;
        CREATE STREAM order_ids WITH ('value.format' = 'long') AS SELECT id FROM orders;
        CREATE STREAM id_texts WITH ('value.format' = 'string') AS SELECT CAST(id * 10 AS VARCHAR) AS s FROM order_ids;
        CREATE STREAM baskets (id BIGINT, payload STRUCT<a INTEGER, tags ARRAY<VARCHAR>>, attrs MAP<VARCHAR, BIGINT>)
          WITH ('value.format' = 'avro');
        CREATE STREAM nested_out AS SELECT id, payload, attrs, payload->tags[1] AS first_tag, attrs['k'] AS k
          FROM baskets;
    """)
    topic = {r.fqn.rsplit(".", 1)[-1]: r.topic for r in project.relations}
    _put(settings, topic["orders"], avro_values(schema_registry, topic["orders"], ORDER_SCHEMA, ORDERS))
    _put(settings, topic["baskets"], avro_values(schema_registry, topic["baskets"], NESTED_SCHEMA, BASKETS))
    for name in ("big_orders", "order_ids", "id_texts", "nested_out"):
        _run(spark, project, name, tmp_path)

    nested = _avro_decode(schema_registry, topic["nested_out"],
                          [r["data"] for r in _raw(settings, topic["nested_out"])])
    assert sorted(nested, key=lambda r: r["id"]) == [_basket_out(b) for b in BASKETS]

    big = _avro_decode(schema_registry, topic["big_orders"], [r["data"] for r in _raw(settings, topic["big_orders"])])
    assert sorted(big, key=lambda r: r["id"]) == [{"id": o["id"], "doubled": o["amount"] * 2, "item": o["item"]}
                                                  for o in ORDERS if o["amount"] > 10]
    ids = [struct.unpack(">q", r["data"])[0] for r in _raw(settings, topic["order_ids"])]
    assert sorted(ids) == [o["id"] for o in ORDERS]
    texts = sorted(r["data"].decode() for r in _raw(settings, topic["id_texts"]))
    assert texts == sorted(str(o["id"] * 10) for o in ORDERS)


SQL_LONGS = """
    CREATE STREAM longs (v BIGINT) WITH ('value.format' = 'long');
    CREATE STREAM copied {with_dlq} AS SELECT v FROM longs;
"""


def test_undecodable_record_stops_the_query_naming_where(tmp_path, spark, kinesis_endpoint, schema_registry):
    """Without 'dlq.topic' a record that does not decode fails the query (DSF-E773): nothing is dropped."""
    _, project, settings, _ = _project(tmp_path, kinesis_endpoint, schema_registry, SQL_LONGS.format(with_dlq=""))
    source = project.relation("analytics.public.longs").topic
    _put(settings, source, [struct.pack(">q", 1), b"bad", struct.pack(">q", 3)])
    bad = next(r for r in _raw(settings, source) if r["data"] == b"bad")
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException) as failed:
        _start(spark, project, "copied", tmp_path)
    error = str(failed.value)
    assert "DSF-E773" in error and bad["sequence"] in error and bad["shard"] in error and source in error


def test_undecodable_records_go_to_the_dead_letter_stream(tmp_path, spark, kinesis_endpoint, schema_registry):
    _, project, settings, _ = _project(tmp_path, kinesis_endpoint, schema_registry,
                                       SQL_LONGS.format(with_dlq="WITH ('dlq.topic' = 'dead')"))
    source = project.relation("analytics.public.longs").topic
    sink = project.relation("analytics.public.copied").topic
    values = [struct.pack(">q", i) for i in range(50)]
    values[7], values[31] = b"\x01\x02\x03", struct.pack(">i", 9)  # 3 and 4 bytes: not a long
    _put(settings, source, values)
    _run(spark, project, "copied", tmp_path)

    got = sorted(struct.unpack(">q", r["data"])[0] for r in _raw(settings, sink))
    assert got == [i for i in range(50) if i not in (7, 31)]
    dead_stream = project.dlq_topic(project.queries[0])
    assert dead_stream.endswith("_dead")
    letters = read_dead_letters(settings, dead_stream)
    assert operations.dead_letters(project, "analytics.public.copied") == {"dlq_topic": dead_stream, "dead_letters": 2}
    by_sequence = {r["sequence"]: r for r in _raw(settings, source)}
    assert sorted(letter["data"] for letter in letters) == sorted([values[7], values[31]])
    for letter in letters:
        original = by_sequence[letter["sequence"]]
        assert (letter["data"], letter["shard"], letter["stream"]) == (original["data"], original["shard"], source)
        assert letter["partition_key"] == original["key"] and "bytes" in letter["error"]
        assert letter["query"] == "analytics.public.copied"


def test_topic_produce_and_print_honour_the_format(tmp_path, kinesis_endpoint, schema_registry, monkeypatch):
    root, project, settings, variables = _project(tmp_path, kinesis_endpoint, schema_registry, """
        CREATE STREAM orders (id BIGINT, amount DOUBLE, item VARCHAR) WITH ('value.format' = 'avro');
        CREATE STREAM counts (n BIGINT) WITH ('value.format' = 'long');
    """)
    for key, value in ENVIRON.items():
        monkeypatch.setenv(key, value)
    args = ["-C", str(root), *[a for k, v in variables.items() for a in ("--var", f"{k}={v}")], "topic"]

    def invoke(*more: str, stdin: str | None = None) -> str:
        result = CliRunner().invoke(cli, [*args, *more], input=stdin)
        assert result.exit_code == 0, result.output + repr(result.exception)
        return result.output

    lines = "".join(json.dumps(o) + "\n" for o in ORDERS[:5])
    assert "Produced 5 record(s)" in invoke("produce", "orders", "--key-field", "item", stdin=lines)
    invoke("produce", "counts", stdin='{"n": 42}\n{"n": -7}\n')

    orders = project.relation("analytics.public.orders").topic
    raw = _raw(settings, orders)
    assert all(r["data"][0] == 0 for r in raw)  # Confluent wire format: magic byte, schema id, Avro
    assert sorted(_avro_decode(schema_registry, orders, [r["data"] for r in raw]), key=lambda o: o["id"]) == ORDERS[:5]
    counts = project.relation("analytics.public.counts").topic
    assert sorted(struct.unpack(">q", r["data"])[0] for r in _raw(settings, counts)) == [-7, 42]

    printed = [json.loads(line) for line in invoke("print", "orders", "--timeout", "1").splitlines()]
    assert sorted((p["value"] for p in printed), key=lambda o: o["id"]) == ORDERS[:5]
    assert {p["key"] for p in printed} == {o["item"] for o in ORDERS[:5]}
    printed = [json.loads(line) for line in invoke("print", "counts", "--timeout", "1").splitlines()]
    assert sorted(p["value"]["n"] for p in printed) == [-7, 42]
    _put(settings, counts, [b"xyz"])
    printed = [json.loads(line) for line in invoke("print", "counts", "--timeout", "1").splitlines()]
    assert [p["error"] for p in printed if "error" in p] == ["not long: a long value has 8 bytes, this one has 3"]
    raw_print = [json.loads(line) for line in invoke("print", "counts", "--raw", "--timeout", "1").splitlines()]
    assert all("error" not in p for p in raw_print) and len(raw_print) == 3
