"""Which librdkafka errors are a failed TLS handshake or SASL authentication (adapters/kafka/security.py's
`is_auth_failure`, what ends a secured client's first request early), on the texts Apache Kafka 4.1 and
librdkafka 2.16 gave: a refused connection is never one, even where the broker's name says ssl:// or sasl_. The
clients themselves run against the broker in tests/e2e/test_kafka_secured.py and test_kafka_security.py."""

from __future__ import annotations

import pytest

from dsflow.adapters.kafka.security import AuthWatch, is_auth_failure, reason

AUTH = [
    ("_AUTHENTICATION", "sasl_plaintext://127.0.0.1:43841/bootstrap: SASL authentication error: Authentication "
                        "failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
    ("_SSL", "ssl://127.0.0.1:42621/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate "
             "verify failed: broker certificate could not be verified"),
    ("_TRANSPORT", "ssl://127.0.0.1:42621/bootstrap: error:0A000086:SSL routines::certificate verify failed "
                   "(after 8ms in state SSL_HANDSHAKE)"),
    ("_TRANSPORT", "ssl://127.0.0.1:39219/bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls alert bad "
                   "certificate: SSL alert number 42 (after 19ms in state APIVERSION_QUERY)"),
    ("_TRANSPORT", "ssl://127.0.0.1:37371/bootstrap: SSL handshake failed: Disconnected: SSL connection closed by "
                   "peer: connecting to a PLAINTEXT broker listener? (after 1ms in state SSL_HANDSHAKE)"),
]
NOT_AUTH = [
    ("_TRANSPORT", "ssl://127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms "
                   "in state CONNECT)"),
    ("_TRANSPORT", "sasl_ssl://[::1]:9093/bootstrap: Disconnected (after 5012ms in state UP)"),
    ("_ALL_BROKERS_DOWN", "1/1 brokers are down"),
    ("_TIMED_OUT", "Failed to get metadata: Local: Timed out"),
]


@pytest.mark.parametrize("name, text", AUTH)
def test_a_failed_handshake_or_authentication_is_one(name, text) -> None:
    assert is_auth_failure(name, text)


@pytest.mark.parametrize("name, text", NOT_AUTH)
def test_a_refused_or_dropped_connection_is_not(name, text) -> None:
    assert not is_auth_failure(name, text)


def test_the_watch_keeps_the_first_auth_failure_of_what_it_is_told() -> None:
    from confluent_kafka import KafkaError

    watch = AuthWatch()
    for name, text in [NOT_AUTH[0], NOT_AUTH[2], AUTH[0], AUTH[1]]:
        watch(KafkaError(getattr(KafkaError, name), text))
    assert watch.failure.str() == AUTH[0][1]
    assert reason(watch.failure.str()).startswith("SASL authentication error: Authentication failed")
