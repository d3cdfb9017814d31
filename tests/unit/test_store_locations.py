"""Where stores point, checked when the project loads: a lake store's folder given as a URL it cannot reach
(DSF-E250) and a Kafka store's TLS/SASL settings (DSF-E251..E254, DSF-E060 for a literal secret).

Pure: projects are small {filename: content} folders; nothing talks to a broker, S3 or Spark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsflow.errors import Diagnostic, Location
from dsflow.load.project import check_project
from support.projects import PAGEVIEWS, make_project

LAKE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: 127.0.0.1:9092
  - name: lake
    type: {type}
    properties:
      {key}: "{value}"
"""


def diagnostics(tmp_path: Path, files: dict[str, str], environ: dict[str, str] | None = None) -> list[Diagnostic]:
    return check_project(make_project(tmp_path, files), environ=environ).diagnostics if environ else \
        check_project(make_project(tmp_path, files)).diagnostics


def codes(found: list[Diagnostic], code: str) -> list[Diagnostic]:
    return [d for d in found if d.code == code]


@pytest.mark.parametrize("store_type, key, value, scheme", [
    ("filesystem", "path", "abfss://lake@account.dfs.core.windows.net/tables", "abfss"),
    ("filesystem", "path", "az://container/tables", "az"),
    ("filesystem", "path", "gs://bucket/tables", "gs"),
    ("filesystem", "path", "s3://bucket/tables", "s3"),
    ("filesystem", "path", "file:///srv/lake", "file"),
    ("databricks", "path", "abfss://lake@account.dfs.core.windows.net/x", "abfss"),
    ("s3", "bucket", "gs://bucket", "gs"),
    ("s3", "prefix", "az://container/tables", "az"),
])
def test_a_lake_folder_written_as_an_unsupported_url_is_an_error(tmp_path, store_type, key, value, scheme) -> None:
    extra = "      bucket: b\n" if store_type == "s3" and key != "bucket" else ""
    found = diagnostics(tmp_path, {"stores/kafka.yml": LAKE.format(type=store_type, key=key, value=value) + extra})
    [error] = codes(found, "DSF-E250")
    assert error.location == Location("stores/kafka.yml", 8, 13 + len(key) - 4)
    assert error.message.startswith(f"the {key} of the {store_type} store 'lake' is a {scheme}:// URL")
    assert "never a URL" in error.message and "supported:" in error.hint
    assert ("an adls store (account, container, prefix)" in error.hint) == (scheme in ("abfss", "az"))


def test_an_s3_bucket_written_as_a_url_names_the_bare_bucket(tmp_path) -> None:
    found = diagnostics(tmp_path, {"stores/kafka.yml": LAKE.format(type="s3", key="bucket", value="s3://data/x")})
    [error] = codes(found, "DSF-E250")
    assert error.hint == "write the bucket name alone: bucket: data"


@pytest.mark.parametrize("store_type, key, value", [
    ("filesystem", "path", "lake"), ("filesystem", "path", "/srv/lake"), ("filesystem", "path", "C:\\lake"),
    ("s3", "bucket", "data"), ("databricks", "path", "./dbx"),
])
def test_local_folders_and_bare_buckets_are_accepted(tmp_path, store_type, key, value) -> None:
    found = diagnostics(tmp_path, {"stores/kafka.yml": LAKE.format(type=store_type, key=key, value=value)})
    assert codes(found, "DSF-E250") == [], found


def test_a_table_path_of_an_unsupported_scheme_is_an_error(tmp_path) -> None:
    sql = PAGEVIEWS + ("CREATE TABLE pv WITH ('store' = 'lake', 'delta.path' = 'gs://bucket/pv') AS\n"
                       "  SELECT id, userid FROM pageviews;\n"
                       "CREATE TABLE pv2 WITH ('store' = 'lake', 'delta.path' = 's3://bucket/pv2') AS\n"
                       "  SELECT id, userid FROM pageviews;\n")
    files = {"stores/kafka.yml": LAKE.format(type="filesystem", key="path", value="lake"), "sql/all.sql": sql}
    [error] = codes(diagnostics(tmp_path, files), "DSF-E250")
    assert error.location is not None and (error.location.file, error.location.line) == ("sql/all.sql", 11)
    assert error.message == ("the 'delta.path' of table 'analytics.public.pv' (store 'lake') is a gs:// URL, which "
                             "Delta tables cannot be written to")


KAFKA = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: 127.0.0.1:9092
    properties:
{properties}
"""


def kafka(tmp_path: Path, properties: dict[str, str], environ: dict[str, str] | None = None) -> list[Diagnostic]:
    lines = "\n".join(f"      {k}: \"{v}\"" for k, v in properties.items())
    return diagnostics(tmp_path, {"stores/kafka.yml": KAFKA.format(properties=lines)}, environ)


SECRET = "{{ env_var('KAFKA_SECRET') }}"


def test_confluent_cloud_settings_with_the_secret_from_env_var_are_valid(tmp_path) -> None:
    found = kafka(tmp_path, {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "KEY",
                             "sasl.password": SECRET, "ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt",
                             "ssl.endpoint.identification.algorithm": "https"}, {"KAFKA_SECRET": "s3cr3t-value"})
    assert [d for d in found if d.severity.name == "ERROR"] == []


def test_a_literal_sasl_password_or_key_pem_is_an_error(tmp_path) -> None:
    found = kafka(tmp_path, {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                             "sasl.username": "u", "sasl.password": "hunter2", "ssl.key.pem": "-----BEGIN"})
    assert sorted(d.message for d in codes(found, "DSF-E060")) == [
        "secret 'sasl.password' of store 'kafka_main' is written in clear text: its name says it is a secret",
        "secret 'ssl.key.pem' of store 'kafka_main' is written in clear text: its name says it is a secret"]


@pytest.mark.parametrize("properties, code, line, text", [
    ({"security.protocol": "TLS"}, "DSF-E251", 6, "security.protocol 'TLS' of the kafka store 'kafka_main' is not one"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM", "sasl.username": "u"}, "DSF-E251", 7,
     "sasl.mechanism 'SCRAM' of the kafka store"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"}, "DSF-E252", 7,
     "sasl.mechanism AWS_MSK_IAM of the kafka store 'kafka_main' needs aws.region"),
    ({"security.protocol": "SSL", "sasl.mechanism": "AWS_MSK_IAM", "aws.region": "eu-west-1"}, "DSF-E252", 6,
     "sasl.mechanism AWS_MSK_IAM of the kafka store 'kafka_main' needs security.protocol SASL_SSL, not SSL"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password":
      "{{ env_var('P', 'x') }}", "aws.region": "eu-west-1"}, "DSF-E252", 10,
     "the kafka store 'kafka_main' sets aws.region, used only by sasl.mechanism AWS_MSK_IAM"),
    ({"sasl.mechanism": "PLAIN", "sasl.username": "u"}, "DSF-E253", 6,
     "the kafka store 'kafka_main' sets sasl.mechanism, sasl.username but security.protocol is PLAINTEXT"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256"}, "DSF-E253", 6,
     "the kafka store 'kafka_main' uses SASL/SCRAM-SHA-256 without sasl.username and sasl.password"),
    ({"security.protocol": "SSL", "ssl.ca.location": "certs/ca.pem"}, "DSF-E254", 7,
     "ssl.ca.location 'certs/ca.pem' of the kafka store 'kafka_main' is a relative path"),
])
def test_kafka_security_settings_are_checked(tmp_path, properties, code, line, text) -> None:
    [error] = codes(kafka(tmp_path, properties), code)
    assert error.location is not None and (error.location.file, error.location.line) == ("stores/kafka.yml", line)
    assert error.message.startswith(text), error.message
