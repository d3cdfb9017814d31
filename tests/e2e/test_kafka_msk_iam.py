"""Amazon MSK IAM authentication (`sasl.mechanism: AWS_MSK_IAM`): what can be run here, for real.

No MSK cluster is reachable from this machine, so the tests check the configuration path end to end: the store
validates; every client dsflow makes for it gets librdkafka settings with SASL/OAUTHBEARER and a token callback
(adapters/kafka/msk.py), the callback's token is the presigned `kafka-cluster:Connect` request aws-msk-iam-sasl-signer
makes from the process's AWS credentials, signed for the store's region; librdkafka asks the callback for a token when
a client starts; and a store pointed at a broker without TLS (the embedded tansu) fails at once with DSF-E255 naming
the store, in every command, never a hang or a traceback.
"""

from __future__ import annotations

import base64
import time
from urllib.parse import parse_qs, urlparse

import pytest

from dsflow.adapters.kafka import client, msk
from dsflow.adapters.kafka.options import KafkaOptions
from dsflow.adapters.spark.translate import query_spec
from dsflow.errors import DsflowError
from dsflow.load.project import load_project
from test_kafka_security import dsflow, project

MSK_IAM = "      security.protocol: SASL_SSL\n      sasl.mechanism: AWS_MSK_IAM\n      aws.region: eu-west-1"
KEY_ID = "AKIAMSKTEST0000EXAMPLE"


@pytest.fixture
def aws_keys(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "msk-test-secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def _signed_request(token: str) -> tuple[str, dict[str, list[str]]]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}", parse_qs(parsed.query)


def test_every_client_gets_oauthbearer_with_a_token_for_the_region(tmp_path, broker, aws_keys) -> None:
    """From the store YAML to the driver spec, the data source's options and the librdkafka settings of a client."""
    root = project(tmp_path, MSK_IAM)
    loaded = load_project(root, variables={"bootstrap": broker})
    spec = query_spec(loaded, loaded.queries[0], "v1", str(tmp_path / "ckpt"), str(tmp_path / "status"))
    for config in (spec.sources[0].client_config, spec.sink.client_config):
        options = {"bootstrap.servers": broker, "topic": "t", **{f"kafka.{k}": v for k, v in config.items()}}
        settings = msk.librdkafka_config(KafkaOptions.parse(options).config)  # what every client is made with
        assert settings["sasl.mechanism"] == "OAUTHBEARER" and settings["security.protocol"] == "SASL_SSL"
        assert not set(msk.SETTINGS) & set(settings), "dsflow's own aws.* settings reached librdkafka"
        token, expiry = settings["oauth_cb"](None)
        host, query = _signed_request(token)
        assert host == "https://kafka.eu-west-1.amazonaws.com"
        assert query["Action"] == ["kafka-cluster:Connect"]
        assert query["X-Amz-Credential"][0].startswith(f"{KEY_ID}/") and "/eu-west-1/kafka-cluster/" in \
            query["X-Amz-Credential"][0]
        assert time.time() < expiry < time.time() + 3600


def test_librdkafka_asks_the_callback_for_a_token_when_a_client_starts(broker, aws_keys, monkeypatch) -> None:
    """A consumer made the way every dsflow consumer is (client.new_consumer) calls the real callback; its first
    request then fails at the TLS handshake (the broker has no TLS), as DSF-E702 (DSF-E255 where a store is named)."""
    tokens: list[tuple[str, float]] = []
    signer = msk.TokenSource.__call__

    def recorded(self, oauthbearer_config=None):
        tokens.append(signer(self, oauthbearer_config))
        return tokens[-1]

    monkeypatch.setattr(msk.TokenSource, "__call__", recorded)
    config = {"bootstrap.servers": broker, "security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM",
              "aws.region": "us-east-1"}
    with pytest.raises(DsflowError) as failed:
        client.new_consumer(config)
    assert failed.value.code == "DSF-E702" and "connecting: " in failed.value.message, failed.value
    assert tokens, "librdkafka never asked the token callback"
    assert _signed_request(tokens[0][0])[0] == "https://kafka.us-east-1.amazonaws.com"


def test_a_store_against_a_broker_without_tls_fails_clearly_in_every_command(tmp_path, broker, aws_keys) -> None:
    root = project(tmp_path, MSK_IAM)
    assert dsflow(root, broker, "validate").exit_code == 0
    for args in (["topic", "list"], ["topic", "describe", "events"], ["topic", "print", "events", "--limit", "1"]):
        result = dsflow(root, broker, *args)
        text = " ".join(result.output.split())
        assert result.exit_code == 1, text
        assert "DSF-E255: Kafka store 'kafka_main' (security.protocol=SASL_SSL, sasl.mechanism=AWS_MSK_IAM)" in text
        assert "Traceback" not in text
