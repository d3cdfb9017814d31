"""A secret typed into a project file is refused (DSF-E060) wherever it can be written, by its setting's name or by
what the value holds; the same value from env_var() is fine. Pure: {filename: content} projects, no I/O."""

from __future__ import annotations

import json

import pytest

from dsflow.load.project import check_project
from support.projects import DEFAULT_CONFIG, PAGEVIEWS, make_project

PEM = "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----"
STORE_PROPERTIES = [
    ("sasl.password", "hunter2"),
    ("sasl.jaas.config", 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'),
    ("ssl.key.password", "pw"),
    ("ssl.keystore.password", "pw"),
    ("ssl.truststore.password", "pw"),
    ("ssl.key.pem", PEM),
    ("basic.auth.user.info", "user:pass"),
    ("sasl.oauthbearer.config", "clientId=app clientSecret=s3cr3t scope=read"),
    ("sasl.oauthbearer.client.secret", "s3cr3t"),
    ("sasl.oauthbearer.token.endpoint.url", "https://app:s3cr3t@idp.example.com/token"),
    ("secret_access_key", "wJalrXUtnFEMI/K7MDENG"),
    ("session_token", "FwoGZXIvYXdzEB"),
    ("token", "dapi1234567890"),
    ("api.key", "k-123"),
    ("private_key", PEM),
    ("credentials", "{'type': 'service_account'}"),
    ("azure.connection.string", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc=="),
    ("sink.url", "https://acct.blob.core.windows.net/c?sv=2020-08-04&sig=abcdEFGH"),
    ("http.headers", "Authorization: Bearer abcdefghijklmnop"),
    ("jdbc.options", "user=dsflow password=pw sslmode=require"),
    ("aws.profile", "aws_secret_access_key = wJalrXUtnFEMI"),
    ("passwd", "Tr0ub4dor"),
    ("connection.url", "postgresql://dsflow:pw@db.internal:5432/ops"),
    ("ssl.keystore.key", PEM),
]
NOT_SECRETS = [("security.protocol", "SASL_SSL"), ("sasl.mechanism", "SCRAM-SHA-512"), ("client.id", "app"),
               ("ssl.endpoint.identification.algorithm", "https"), ("sasl.username", "app"),
               ("sink.url", "https://registry.example.com:8081/path?x=1"), ("key.serializer.note", "keyed by id")]


def _store(properties: dict[str, str], bootstrap: str = "{{ var('bootstrap') }}") -> str:
    lines = "".join(f"      {k}: {json.dumps(v)}\n" for k, v in properties.items())
    return (f"stores:\n  - name: kafka_main\n    type: kafka\n    bootstrap_servers: {json.dumps(bootstrap)}\n"
            f"    properties:\n{lines or '      {}'}")


def _e060(tmp_path, files: dict[str, str], environ: dict[str, str] | None = None) -> list:
    result = check_project(make_project(tmp_path, {"sql/sources.sql": PAGEVIEWS, **files}), environ=environ or {})
    return [d for d in result.diagnostics if d.code == "DSF-E060"]


@pytest.mark.parametrize(("key", "value"), STORE_PROPERTIES, ids=[k for k, _ in STORE_PROPERTIES])
def test_a_store_property_holding_a_secret_is_refused_where_it_is_written(tmp_path, key, value):
    found = _e060(tmp_path, {"stores/kafka.yml": _store({"client.id": "app", key: value})})
    assert len(found) == 1, found
    assert found[0].location.file == "stores/kafka.yml" and found[0].location.line == 7, found[0]
    assert f"'{key}'" in found[0].message and value not in found[0].message + (found[0].hint or "")


@pytest.mark.parametrize(("key", "value"), STORE_PROPERTIES, ids=[k for k, _ in STORE_PROPERTIES])
def test_the_same_value_from_env_var_is_not(tmp_path, key, value):
    store = _store({key: "{{ env_var('THE_SECRET') }}"})
    secret = value.replace("\\n", " ")  # a PEM on one line: YAML folds a rendered newline inside quotes
    assert _e060(tmp_path, {"stores/kafka.yml": store}, environ={"THE_SECRET": secret}) == []


@pytest.mark.parametrize(("key", "value"), NOT_SECRETS, ids=[k for k, _ in NOT_SECRETS])
def test_ordinary_settings_are_not_taken_for_secrets(tmp_path, key, value):
    assert _e060(tmp_path, {"stores/kafka.yml": _store({key: value})}) == []


def test_a_broker_address_with_a_password(tmp_path):
    found = _e060(tmp_path, {"stores/kafka.yml": _store({}, bootstrap="SASL_SSL://app:pw@broker:9092")})
    assert len(found) == 1 and "bootstrap_servers" in found[0].message and found[0].location.line == 4


REGISTRY = """\
schema_registries:
  - name: sr
    url: {url}
    username: app
"""


def test_a_registry_url_with_a_password(tmp_path):
    found = _e060(tmp_path, {"registries.yml": REGISTRY.format(url="https://app:pw@sr.example.com")})
    assert len(found) == 1 and "url of schema registry 'sr'" in found[0].message
    assert (found[0].location.file, found[0].location.line) == ("registries.yml", 3)
    assert _e060(tmp_path, {"registries.yml": REGISTRY.format(url="https://sr.example.com")}) == []


STATE = DEFAULT_CONFIG + "state:\n  backend: postgres\n  dsn: {dsn}\n"


@pytest.mark.parametrize("dsn", ["postgresql://dsflow:pw@db.internal:5432/ops",
                                 "'host=db user=dsflow password=pw dbname=ops'"])
def test_a_state_dsn_with_a_password(tmp_path, dsn):
    found = _e060(tmp_path, {"dsflow.yml": STATE.format(dsn=dsn)})
    assert len(found) == 1 and found[0].message.startswith("state.dsn is a secret written in clear text")
    assert (found[0].location.file, found[0].location.line) == ("dsflow.yml", 15)


def test_a_state_dsn_whose_password_comes_from_env_var(tmp_path):
    dsn = "\"postgresql://dsflow:{{ env_var('PGPASS') }}@db.internal:5432/ops\""
    assert _e060(tmp_path, {"dsflow.yml": STATE.format(dsn=dsn)}, environ={"PGPASS": "pw"}) == []


SPARK_CONF = DEFAULT_CONFIG.replace("  trigger_interval: 1 second\n",
                                    "  trigger_interval: 1 second\n  spark_conf:\n    {key}: {value}\n")


@pytest.mark.parametrize(("key", "value"), [("spark.hadoop.fs.s3a.secret.key", "wJalrXUtnFEMI"),
                                            ("spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", "k=="),
                                            ("spark.ssl.keyStorePassword", "pw")])
def test_a_secret_in_runtime_spark_conf(tmp_path, key, value):
    found = _e060(tmp_path, {"dsflow.yml": SPARK_CONF.format(key=key, value=value)})
    assert len(found) == 1 and key in found[0].message and found[0].location.line == 9, found
    assert _e060(tmp_path, {"dsflow.yml": SPARK_CONF.format(key="spark.sql.shuffle.partitions", value="'4'")}) == []


def test_a_secret_in_a_sql_with_property(tmp_path):
    sql = PAGEVIEWS.replace("'timestamp' = 'viewtime'",
                            "'timestamp' = 'viewtime',\n  'kafka.topic.sasl.password' = 'x'")
    found = _e060(tmp_path, {"sql/sources.sql": sql})
    assert len(found) == 1 and "kafka.topic.sasl.password" in found[0].message, found

