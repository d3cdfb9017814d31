"""The `acl.*` settings of a kafka store (adapters/kafka/acls.py), without a broker: a principal that is not
`Type:name` is DSF-E730 at its line, the settings are dsflow's and never reach librdkafka, and what a grant maps to.
The pushdown itself runs against Apache Kafka in tests/e2e/test_kafka_grant_acls.py."""

from __future__ import annotations

import pytest

from dsflow.load.project import check_project
from support.projects import make_project
from support.acl_project import CONFIG, ROLES, SQL, STORE


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


def test_a_grant_maps_to_the_principals_of_its_role_and_of_the_roles_inheriting_it(tmp_path) -> None:
    from dsflow.adapters.kafka.grants import target

    roles = ROLES + "  - name: lead\n    inherits: [analyst]\n"
    store = STORE.format(bootstrap="127.0.0.1:9", name="inh").replace(
        '      acl.principals.writer: "User:bob"', '      acl.principals.lead: "User:carol;User:dave"')
    sql = SQL.replace("GRANT INSERT ON STREAM writes TO ROLE writer;", "GRANT ALL ON STREAM writes TO ROLE lead;")
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(name="inh"), "roles.yml": roles,
                                   "stores/kafka.yml": store, "sql/all.sql": sql})
    project = check_project(root).project
    assert project is not None
    select = target(project, {"role": "analyst", "privilege": "SELECT", "on": "relation.analytics.public.reads"})
    assert select is not None and (select["store"], select["topic"]) == ("kafka_main", "inh_reads")
    assert sorted((b["principal"], b["resource"], b["operation"]) for b in select["bindings"]) == [
        (p, r, o) for p in ("User:alice", "User:carol", "User:dave")
        for r, o in (("GROUP", "READ"), ("TOPIC", "DESCRIBE"), ("TOPIC", "READ"))]
    every = target(project, {"role": "lead", "privilege": "ALL", "on": "relation.analytics.public.writes"})
    assert every is not None and sorted({b["principal"] for b in every["bindings"]}) == ["User:carol", "User:dave"]
    assert {b["operation"] for b in every["bindings"] if b["resource"] == "TOPIC"} == {"READ", "WRITE", "DESCRIBE"}
    unmapped = {"role": "writer", "privilege": "INSERT", "on": "relation.analytics.public.writes"}
    assert target(project, unmapped) is None  # no principal acts as writer: recorded only
    assert target(project, {"role": "analyst", "privilege": "USAGE", "on": "store.kafka_main"}) is None


def test_a_mapping_of_a_role_nothing_declares_is_an_error_with_a_close_name(tmp_path) -> None:
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(name="typo"), "roles.yml": ROLES, "sql/all.sql": SQL,
                                   "stores/kafka.yml": STORE.format(bootstrap="127.0.0.1:9", name="typo")
                                   .replace("acl.principals.writer:", "acl.principals.writter:")})
    found = [d for d in check_project(root).diagnostics if d.code == "DSF-E302"]
    assert [d.message for d in found] == [
        "setting acl.principals.writter of store 'kafka_main' names unknown role 'writter'"]
    assert found[0].location is not None and found[0].location.file == "stores/kafka.yml"
    assert "writer" in (found[0].hint or "")
