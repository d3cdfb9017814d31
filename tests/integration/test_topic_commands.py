"""`dsflow topic list|describe|create|delete|produce|print` on a Kafka store (the test broker) and a Kinesis
store (kinesalite), through click's CliRunner. What is printed is compared with what was produced, and
what describe says with the brokers' own admin answers."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner

from dsflow.adapters.kafka.admin import describe_topic
from dsflow.adapters.kinesis import admin
from dsflow.cli import cli
from dsflow.errors import DsflowError
from support.projects import make_project

pytestmark = pytest.mark.integration

STORES = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: kin
    type: kinesis
    properties:
      region: us-east-1
      endpoint: "{{ var('kinesis') }}"
  - name: lake
    type: filesystem
    properties:
      path: lake
"""


@pytest.fixture
def project(tmp_path, broker, kinesis_endpoint):
    prefix = f"c{uuid.uuid4().hex[:6]}_"
    sql = f"""\
CREATE STREAM clicks (id BIGINT, page VARCHAR) WITH ('topic' = '{prefix}clicks', 'value.format' = 'json',
  'topic.partitions' = 2);
CREATE STREAM taps (id BIGINT, page VARCHAR) WITH ('store' = 'kin', 'topic' = '{prefix}taps',
  'value.format' = 'json', 'topic.shards' = 3);
"""
    root = make_project(tmp_path, {"stores/kafka.yml": STORES, "sql/all.sql": sql})
    args = ["-C", str(root), "--var", f"bootstrap={broker}", "--var", f"kinesis={kinesis_endpoint}"]

    def run(*more: str, stdin: str | None = None, code: int = 0) -> str:
        result = CliRunner().invoke(cli, [*args, "topic", *more], input=stdin)
        assert result.exit_code == code, result.output + repr(result.exception)
        return result.output

    return run, prefix, {"endpoint": kinesis_endpoint, "region": "us-east-1"}


@pytest.mark.parametrize("relation,store_type", [("clicks", "kafka"), ("taps", "kinesis")])
def test_topic_commands_round_trip(project, broker, relation, store_type):
    run, prefix, kinesis = project
    name = f"{prefix}{relation}"
    assert "Created" in run("create", relation)  # sized like the relation: 2 partitions, 3 shards
    info = json.loads(run("describe", relation))
    if store_type == "kafka":
        assert (info["type"], info["partitions"]) == ("kafka", describe_topic(broker, name).partitions) == ("kafka", 2)
    else:
        assert (info["type"], info["shards"]) == ("kinesis", admin.describe_stream(kinesis, name).open_shards) \
            == ("kinesis", 3)
    assert "Already exists" in run("create", relation)
    listed = [line.split("\t") for line in run("list").splitlines()]
    assert [store_type, name, f"analytics.public.{relation}"] in [row[1:] for row in listed]

    rows = [{"id": i, "page": f"p{i % 4}"} for i in range(30)]
    assert "Produced 30" in run("produce", relation, "--key-field", "page",
                                stdin="\n".join(json.dumps(r) for r in rows))
    printed = [json.loads(line) for line in run("print", relation, "--timeout", "2").splitlines()]
    assert sorted((r["value"]["id"], r["key"]) for r in printed) == [(r["id"], r["page"]) for r in rows]
    raw = [json.loads(line) for line in run("print", relation, "--raw", "--limit", "5").splitlines()]
    assert len(raw) == 5 and all(json.loads(r["value"]) in rows for r in raw)
    run("produce", relation, stdin='{"id": 1}\n{oops\n', code=1)

    assert "Deleted" in run("delete", relation, "--yes")
    run("describe", relation, code=1)


def test_topic_commands_by_topic_name_and_store(project):
    run, prefix, kinesis = project
    name = f"{prefix}loose"
    run("create", name, "--store", "kin", "--shards", "2")
    assert admin.describe_stream(kinesis, name).open_shards == 2
    run("produce", name, "--store", "kin", stdin='{"a": 1}\n{"a": 2}\n')
    printed = [json.loads(line) for line in run("print", name, "--store", "kin", "--timeout", "2").splitlines()]
    assert sorted(r["value"] for r in printed) == ['{"a": 1}', '{"a": 2}']  # no relation: printed raw
    assert name in run("list", "--store", "kin")
    run("create", name, "--store", "kin", "--partitions", "2", code=1)  # DSF-E768
    run("list", "--store", "lake", code=1)  # DSF-E767: no topics in a table store
    run("delete", name, "--store", "kin", "--yes")
    assert admin.describe_stream(kinesis, name) is None


@pytest.fixture
def invoke(tmp_path, broker, kinesis_endpoint):
    """`dsflow topic ...` on a project with a Kafka and a Kinesis stream: (result, the topic names by relation)."""
    prefix = f"b{uuid.uuid4().hex[:6]}_"
    sql = f"""\
CREATE STREAM clicks (id BIGINT, page VARCHAR) WITH ('topic' = '{prefix}clicks', 'value.format' = 'json');
CREATE STREAM taps (id BIGINT, page VARCHAR) WITH ('store' = 'kin', 'topic' = '{prefix}taps',
  'value.format' = 'json', 'topic.shards' = 1);
"""
    root = make_project(tmp_path, {"stores/kafka.yml": STORES, "sql/all.sql": sql})
    args = ["-C", str(root), "--var", f"bootstrap={broker}", "--var", f"kinesis={kinesis_endpoint}", "topic"]
    return lambda *more, stdin=None: CliRunner().invoke(cli, [*args, *more], input=stdin)


TEN_MB = '{"id": 2, "page": "' + "x" * 10_000_000 + '"}'
BAD_INPUT = [
    pytest.param(b'{"id": 1}\n\xff\xfe\x00\x01binary\n', "DSF-E706", "line 2 is not UTF-8 text", id="binary"),
    pytest.param(b'{"id": 1}\n{"id": 2, "page": "caf\xe9"}\n', "DSF-E706", "line 2 is not UTF-8 text", id="latin-1"),
    pytest.param(b'{"id": 1}\n\x00\x01\x02\n', "DSF-E706", "line 2", id="control-bytes"),
    pytest.param(('{"id": 1}\n' + TEN_MB + "\n").encode(), "DSF-E715", "line 2 is 10,000,021 bytes", id="10MB"),
]


@pytest.mark.parametrize("relation", ["clicks", "taps"])
@pytest.mark.parametrize("stdin,code,message", BAD_INPUT)
def test_produce_refuses_bad_input_with_a_code_and_produces_nothing(invoke, relation, stdin, code, message):
    assert invoke("create", relation).exit_code == 0
    result = invoke("produce", relation, stdin=stdin)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, DsflowError), repr(result.exception)  # shown without a traceback
    assert result.exception.code == code and message in result.exception.message, str(result.exception)
    printed = invoke("print", relation, "--timeout", "1")
    assert printed.exit_code == 0 and printed.output == "", printed.output  # not even the good first line
    assert invoke("delete", relation, "--yes").exit_code == 0


@pytest.mark.parametrize("option", [["--limit", "-1"], ["--timeout", "-1"], ["--timeout", "-0.5"]])
def test_print_refuses_a_negative_limit_or_timeout_as_a_usage_error(invoke, option):
    result = invoke("print", "clicks", *option)
    assert result.exit_code == 2, result.output
    assert "Invalid value" in result.output and option[0] in result.output
