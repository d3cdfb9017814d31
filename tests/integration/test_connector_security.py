"""A Kafka store's security settings (librdkafka's names, as every other dsflow client takes them) carried to Spark's
own Kafka connector (adapters/kafka/javaclient.py), which real-time queries read and write through: on the run's
Apache Kafka's SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), TLS and mutual-TLS listeners, the test run's Spark
session writes records through the connector with the translated settings, and reads back, through the connector,
what dsflow's own librdkafka producer wrote with the store's settings: every record, by id. A wrong password or a
missing client certificate fails the connector's read instead of hanging; a store whose settings the connector cannot
use is refused when the project loads (DSF-E872, load/realtime.py).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from dsflow.adapters.kafka import admin, client
from dsflow.adapters.kafka.javaclient import java_settings

pytestmark = pytest.mark.integration
WRONG = "wrong-pass-7c1"


def _setups(broker) -> dict[str, tuple[int, dict[str, str]]]:
    tls = broker.tls_dir
    scram = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "admin", "sasl.password": "admin-secret"}
    return {
        "PLAIN": (broker.listeners["sasl"], scram | {"sasl.mechanism": "PLAIN"}),
        "SCRAM-SHA-256": (broker.listeners["sasl"], scram | {"sasl.mechanisms": "SCRAM-SHA-256"}),
        "SCRAM-SHA-512": (broker.listeners["sasl"], scram | {"sasl.mechanism": "SCRAM-SHA-512"}),
        "TLS": (broker.listeners["ssl"], {"security.protocol": "SSL", "ssl.ca.location": f"{tls}/ca.pem"}),
        "mTLS": (broker.listeners["mtls"], {"security.protocol": "SSL", "ssl.ca.location": f"{tls}/ca.pem",
                                            "ssl.certificate.location": f"{tls}/client.pem",
                                            "ssl.key.location": f"{tls}/client.key"}),
    }


def _options(port: int, settings: dict[str, str], folder: Path) -> dict[str, str]:
    config = {"bootstrap.servers": f"127.0.0.1:{port}", **settings}
    return {f"kafka.{k}": v for k, v in java_settings(config, folder).items()}


def _read(spark, topic: str, options: dict[str, str]) -> list[int]:
    frame = (spark.read.format("kafka").options(**options).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    return sorted(json.loads(row.value)["id"] for row in frame.selectExpr("CAST(value AS STRING) AS value").collect())


@pytest.mark.parametrize("setup", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "TLS", "mTLS"])
def test_the_connector_reads_and_writes_a_secured_listener_with_the_stores_settings(
        spark, kafka_broker, tmp_path: Path, setup: str) -> None:
    port, settings = _setups(kafka_broker)[setup]
    topic = f"sec_conn_{uuid.uuid4().hex[:8]}"
    admin.ensure_topic(kafka_broker.bootstrap, admin.TopicSpec(topic, partitions=2))
    written_by_dsflow = [json.dumps({"id": i}) for i in range(30)]
    client.produce_json_lines(f"127.0.0.1:{port}", topic, written_by_dsflow, extra=settings)
    options = _options(port, settings, tmp_path)
    assert _read(spark, topic, options) == list(range(30)), "what dsflow's producer wrote, read by the connector"

    rows = spark.createDataFrame([(json.dumps({"id": i}),) for i in range(30, 50)], "value STRING")
    rows.write.format("kafka").options(**options).option("topic", topic).save()
    read_back = client.read_to_end(f"127.0.0.1:{port}", topic, extra=settings)
    assert sorted(json.loads(r["value"])["id"] for r in read_back) == list(range(50)), \
        "what the connector wrote, read by dsflow's consumer"
    if setup == "mTLS":
        key_store = Path(options["kafka.ssl.keystore.location"])
        assert key_store.parent == tmp_path and oct(key_store.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("refused", ["wrong password", "no client certificate"])
def test_a_refused_connector_fails_its_read_instead_of_hanging(spark, kafka_broker, tmp_path: Path,
                                                               refused: str) -> None:
    setups = _setups(kafka_broker)
    if refused == "wrong password":
        port, settings = setups["SCRAM-SHA-512"][0], setups["SCRAM-SHA-512"][1] | {"sasl.password": WRONG}
    else:
        port, settings = setups["mTLS"][0], setups["TLS"][1]
    topic = f"sec_conn_{uuid.uuid4().hex[:8]}"
    admin.ensure_topic(kafka_broker.bootstrap, admin.TopicSpec(topic, partitions=1))
    options = _options(port, settings, tmp_path) | {"kafka.request.timeout.ms": "10000",
                                                    "kafka.default.api.timeout.ms": "10000"}
    with pytest.raises(Exception) as failed:
        _read(spark, topic, options)
    text = str(failed.value)
    assert ("Authentication failed" in text or "SSL" in text or "handshake" in text.lower()
            or "Timeout" in text), text[-2000:]
    assert "admin-secret" not in text and WRONG not in text
