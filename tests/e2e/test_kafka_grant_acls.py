"""Grants pushed down as Kafka ACLs (adapters/kafka/acls.py, grants.py) on the run's Apache Kafka (KRaft,
StandardAuthorizer, allow.everyone.if.no.acl.found=false: dsflow/adapters/kafka/kraft.py).

The store maps dsflow roles to SASL principals (`acl.principals.analyst: User:alice`, `...writer: User:bob`); dsflow
administers the ACLs through the plaintext listener (ANONYMOUS, a super user), and every check is made by the
principal itself through the SASL listener (SCRAM-SHA-256): what it may read or write, a REVOKE, an ACL deleted by
hand (drift), and destroy taking back exactly dsflow's ACLs. No query runs: no Spark.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from support.brokers import kafka_only
from dsflow.core.plan import Action
from dsflow.core.safety import Allowance
from dsflow.engine import operations
from support.acl_project import CONFIG, ROLES, SQL, STORE
from support.projects import make_project

pytestmark = [pytest.mark.integration, kafka_only]

READS = "grant.analyst.select.relation.analytics.public.reads"
REFUSED = "TOPIC_AUTHORIZATION_FAILED"


class Deployment:
    def __init__(self, tmp_path: Path, bootstrap: str) -> None:
        self.name = f"acl{uuid.uuid4().hex[:6]}"
        self.root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(name=self.name), "roles.yml": ROLES,
                                            "stores/kafka.yml": STORE.format(bootstrap=bootstrap, name=self.name),
                                            "sql/all.sql": SQL})
        self.options = operations.Options(self.root)

    def topic(self, stream: str) -> str:
        return f"{self.name}_{stream}"

    def plan(self, destroy: bool = False):
        loaded = operations.load(self.options)
        return loaded, operations.plan(loaded, destroy=destroy)

    def apply(self, destroy: bool = False):
        loaded, plan = self.plan(destroy)
        result = operations.apply(loaded, plan, allowance=Allowance(everything=True))
        assert result.ok, result.failed
        return plan

    def edit(self, path: str, old: str, new: str) -> None:
        file = self.root / path
        assert old in file.read_text()
        file.write_text(file.read_text().replace(old, new))


def sasl(kafka_broker, user: str) -> dict[str, str]:
    return {"bootstrap.servers": f"127.0.0.1:{kafka_broker.listeners['sasl']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": f"{user}-secret"}


def read_as(kafka_broker, user: str, topic: str, group: str) -> str:
    """'read' when the user consumed the topic's first record (and committed its offset in `group`), else the
    error's name."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**sasl(kafka_broker, user), "group.id": group, "enable.auto.commit": False})
    try:
        described = consumer.list_topics(topic, timeout=10).topics[topic]
        if described.error is not None:  # no DESCRIBE: the topic's metadata is refused
            return described.error.name()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                return msg.error().name()
            consumer.commit(message=msg, asynchronous=False)  # READ on the group (acl.group_prefix)
            return "read"
        return "nothing"
    finally:
        consumer.close()


def write_as(kafka_broker, user: str, topic: str) -> str:
    """'written' when the broker acknowledged a record, else the delivery error's name."""
    from confluent_kafka import Producer

    outcome: list[str] = []
    producer = Producer({**sasl(kafka_broker, user), "message.timeout.ms": 15000})
    producer.produce(topic, b'{"id": 1}', on_delivery=lambda err, _: outcome.append(err.name() if err else "written"))
    producer.flush(20)
    return outcome[0] if outcome else "undelivered"


def eventually(check, expected: str, seconds: float = 20.0) -> str:
    """`check()` until it answers `expected` (the authorizer takes an ACL change within moments)."""
    deadline = time.monotonic() + seconds
    found = check()
    while found != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        found = check()
    return found


def admin(kafka_broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_broker.bootstrap})


def acls_of(kafka_broker, principal: str) -> list:
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    wanted = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                              AclPermissionType.ANY)
    client = admin(kafka_broker)  # kept until the answer: a client collected first fails its futures
    return client.describe_acls(wanted, request_timeout=10).result()


def topic_acl(topic: str, principal: str, operation: str):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                      AclOperation[operation], AclPermissionType.ALLOW)


def produce_plain(kafka_broker, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce(topic, b'{"id": 0, "name": "first"}')
    assert producer.flush(20) == 0


def test_roles_read_and_write_exactly_their_grants_revoke_drift_and_destroy(tmp_path, broker, kafka_broker) -> None:
    from confluent_kafka.admin import AclBindingFilter

    deployment = Deployment(tmp_path, kafka_broker.bootstrap)
    reads, writes = deployment.topic("reads"), deployment.topic("writes")
    group = f"{deployment.name}-readers"
    carol = topic_acl(reads, "User:carol", "READ")  # made by hand: dsflow leaves it
    try:
        deployment.apply()
        produce_plain(kafka_broker, reads)
        assert eventually(lambda: read_as(kafka_broker, "alice", reads, group), "read") == "read"
        assert read_as(kafka_broker, "alice", writes, group) == REFUSED
        assert eventually(lambda: write_as(kafka_broker, "bob", writes), "written") == "written"
        assert write_as(kafka_broker, "bob", reads) == REFUSED
        assert write_as(kafka_broker, "alice", reads) == REFUSED  # SELECT is no INSERT
        assert read_as(kafka_broker, "bob", writes, group) in (REFUSED, "GROUP_AUTHORIZATION_FAILED")  # no SELECT

        loaded = operations.load(deployment.options)
        recorded = loaded.workspace.state_backend().read().resources[READS].outputs["kafka"]
        assert recorded["store"] == "kafka_main" and recorded["topic"] == reads
        assert sorted((b["resource"], b["name"], b["operation"]) for b in recorded["bindings"]) == [
            ("GROUP", f"{deployment.name}-", "READ"), ("TOPIC", reads, "DESCRIBE"), ("TOPIC", reads, "READ")]
        _, again = deployment.plan()
        assert not again.has_changes, again.actionable  # refresh finds every ACL in place

        # drift: alice's READ deleted by hand; the plan updates the grant, apply creates it again
        hand = topic_acl(reads, "User:alice", "READ")
        exact = AclBindingFilter(hand.restype, hand.name, hand.resource_pattern_type, hand.principal, hand.host,
                                 hand.operation, hand.permission_type)
        client = admin(kafka_broker)
        client.delete_acls([exact], request_timeout=10)[exact].result()
        assert eventually(lambda: read_as(kafka_broker, "alice", reads, group), REFUSED) == REFUSED
        _, drifted = deployment.plan()
        assert [(c.address, c.action, c.drift) for c in drifted.actionable] == [(READS, Action.UPDATE, True)]
        assert "ACL READ on TOPIC" in drifted.actionable[0].reason
        deployment.apply()
        assert eventually(lambda: read_as(kafka_broker, "alice", reads, group), "read") == "read"

        # REVOKE: alice is refused again, bob keeps his
        client.create_acls([carol], request_timeout=10)[carol].result()
        deployment.edit("sql/all.sql", "GRANT SELECT ON STREAM reads TO ROLE analyst;\n", "")
        plan = deployment.apply()
        assert [(c.address, c.action) for c in plan.actionable] == [(READS, Action.DELETE)]
        assert eventually(lambda: read_as(kafka_broker, "alice", reads, group), REFUSED) == REFUSED
        assert acls_of(kafka_broker, "User:alice") == []
        assert write_as(kafka_broker, "bob", writes) == "written"

        deployment.apply(destroy=True)
        assert acls_of(kafka_broker, "User:alice") == [] and acls_of(kafka_broker, "User:bob") == []
        assert acls_of(kafka_broker, "User:carol") == [carol]  # another principal's ACL on the topic survives
    finally:
        client = admin(kafka_broker)
        gone = AclBindingFilter(carol.restype, carol.name, carol.resource_pattern_type, carol.principal, carol.host,
                                carol.operation, carol.permission_type)
        client.delete_acls([gone], request_timeout=10)[gone].result()


def test_an_interrupted_apply_creates_the_same_acls_again_and_revoke_keeps_shared_ones(tmp_path, broker,
                                                                                      kafka_broker) -> None:
    """Two SELECTs of one role share its group binding: revoking one keeps it; create is idempotent; the role
    mapped to another principal is drift, and apply moves the ACLs to it."""
    from dsflow.adapters.kafka.grants import GrantExecutor
    from dsflow.core.plan import Change
    from dsflow.engine.executors import Context

    deployment = Deployment(tmp_path, kafka_broker.bootstrap)
    deployment.edit("sql/all.sql", "GRANT INSERT ON STREAM writes TO ROLE writer;",
                    "GRANT SELECT ON STREAM writes TO ROLE analyst;")
    try:
        deployment.apply()
        loaded = operations.load(deployment.options)
        state = loaded.workspace.state_backend().read()
        recorded = state.resources[READS].outputs
        change = Change(address=READS, action=Action.CREATE, reason="again", after=state.resources[READS].data)
        ctx = Context(project=loaded.project, workspace=loaded.workspace)
        assert GrantExecutor().create(ctx, change) == recorded
        deployment.edit("sql/all.sql", "GRANT SELECT ON STREAM reads TO ROLE analyst;\n", "")
        deployment.apply()
        left = sorted((a.restype.name, a.name, a.operation.name) for a in acls_of(kafka_broker, "User:alice"))
        writes = deployment.topic("writes")
        assert left == [("GROUP", f"{deployment.name}-", "READ"), ("TOPIC", writes, "DESCRIBE"),
                        ("TOPIC", writes, "READ")]

        # the role now acts through another principal: drift on the grant; apply moves its ACLs
        deployment.edit("stores/kafka.yml", '"User:alice"', '"User:erin"')
        _, moved = deployment.plan()
        assert [(c.action, c.reason) for c in moved.actionable if c.address.startswith("grant.")] == [
            (Action.UPDATE, "drift: the principals the grant maps to changed")]
        deployment.apply()
        assert acls_of(kafka_broker, "User:alice") == []
        assert len(acls_of(kafka_broker, "User:erin")) == 3

        # the mapping taken away: the grant is recorded only, its ACLs deleted; given back: pushed down again
        deployment.edit("stores/kafka.yml", 'acl.principals.analyst: "User:erin"', 'client.id: "acl-test"')
        deployment.apply()
        assert acls_of(kafka_broker, "User:erin") == []
        deployment.edit("stores/kafka.yml", 'client.id: "acl-test"', 'acl.principals.analyst: "User:erin"')
        _, back = deployment.plan()
        assert [c.reason for c in back.actionable if c.address.startswith("grant.")] == [
            "drift: not pushed down as Kafka ACLs yet"]
        deployment.apply()
        assert len(acls_of(kafka_broker, "User:erin")) == 3
    finally:
        deployment.apply(destroy=True)
    assert acls_of(kafka_broker, "User:alice") == [] and acls_of(kafka_broker, "User:erin") == []
