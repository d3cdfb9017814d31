"""The `acl.*` settings of a kafka store (adapters/kafka/acls.py), without a broker: a principal that is not
`Type:name` is DSF-E730 at its line, the settings are dsflow's and never reach librdkafka, and what a grant maps to.
The pushdown itself runs against Apache Kafka in tests/test_kafka_grant_acls.py."""

from __future__ import annotations

import pytest

from dsflow.load.project import check_project
from projects import make_project
from test_kafka_grant_acls import CONFIG, ROLES, SQL, STORE


@pytest.mark.parametrize("value, why", [
    ("alice", "holds 'alice', which is not a Kafka principal 'Type:name'"),
    ("User:alice; bob", "holds 'bob', which is not a Kafka principal"),
    ("", "names no principal"),
])
def test_a_principal_that_is_not_type_name_is_an_error_at_its_line(tmp_path, value, why) -> None:
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(name="bad"), "roles.yml": ROLES, "sql/all.sql": SQL,
                                   "stores/kafka.yml": STORE.format(bootstrap="127.0.0.1:9", name="bad")
                                   .replace('"User:bob"', f'"{value}"')})
    found = [d for d in check_project(root).diagnostics if d.code == "DSF-E730"]
    assert len(found) == 1, found
    assert found[0].location is not None and (found[0].location.file, found[0].location.line) == \
        ("stores/kafka.yml", 7)
    assert found[0].message.startswith(f"acl.principals.writer of the kafka store 'kafka_main' {why}")


def test_acl_settings_are_dsflows_never_librdkafkas(tmp_path) -> None:
    from dsflow.adapters.kafka.acls import principals, target
    from dsflow.adapters.kafka.msk import librdkafka_config

    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(name="ok"), "roles.yml": ROLES, "sql/all.sql": SQL,
                                   "stores/kafka.yml": STORE.format(bootstrap="127.0.0.1:9", name="ok")
                                   .replace('"User:alice"', '"User:alice;User:CN=app,O=corp"')
                                   .replace("acl.group_prefix", "acl.grup_prefix")})
    result = check_project(root)
    assert [d.message for d in result.diagnostics if d.severity == "error"] == [
        "acl.grup_prefix of the kafka store 'kafka_main' is not a setting dsflow knows"]
    store = {"acl.principals.analyst": "User:alice;User:CN=app,O=corp", "client.id": "c"}
    assert principals(store) == {"analyst": ("User:alice", "User:CN=app,O=corp")}
    assert librdkafka_config(store) == {"client.id": "c"}
    assert target(None, {"privilege": "SELECT", "on": "relation.analytics.public.reads", "role": "analyst"},
                  lambda r: [r]) is None
