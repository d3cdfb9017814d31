"""A Kafka store's security settings (TLS, SASL) in the errors of its clients.

Every client dsflow makes for a store (admin, producer, consumer, the Spark data source, the data generator) gets
the store's `properties` as librdkafka settings (`client.client_config`). When a secured store cannot be reached
the broker usually accepted the TCP connection and the TLS handshake or the SASL authentication failed, which
librdkafka reports as a transport failure: `for_store` turns that into DSF-E255 naming the store and its security
settings, and names the store in the message of any other Kafka error.

librdkafka retries a failed handshake until the request's timeout; it tells of each failure only through the
client's `error_cb`. A secured store's clients get an `AuthWatch` there, which keeps the first TLS or SASL failure,
so that their first request (client.py's `connected`) ends at that failure instead of the timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dsflow.errors import DsflowError

KAFKA_ERRORS = ("DSF-E702", "DSF-E703", "DSF-E704", "DSF-E705", "DSF-E708")
"""The Kafka client errors (client.py) that get the store's name."""
CONNECT_ERRORS = ("DSF-E702", "DSF-E703")
SECURITY_KEYS = ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "ssl.endpoint.identification.algorithm")
"""The settings named in DSF-E255 (never a secret: no user name, password or key)."""
AUTH_ERRORS = ("_AUTHENTICATION", "_SSL")
"""librdkafka's error names of a failed SASL authentication and of a failed TLS handshake."""
TLS_OR_SASL = ("SSL", "SASL")
"""Words of a transport failure's reason that tell it is TLS's or SASL's (an alert, a closed handshake)."""

LOG = logging.getLogger("dsflow.kafka")


def secured(properties: Mapping[str, str]) -> bool:
    """True when the store asks for TLS or SASL."""
    return str(properties.get("security.protocol", "PLAINTEXT")).upper() != "PLAINTEXT"


def security_summary(properties: Mapping[str, str]) -> str:
    """'security.protocol=SASL_SSL, sasl.mechanism=PLAIN' (the non-secret security settings)."""
    return ", ".join(f"{key}={properties[key]}" for key in SECURITY_KEYS if properties.get(key))


def store_error(err: DsflowError, store: str, properties: Mapping[str, str]) -> DsflowError:
    """`err` (a Kafka client error) with the store named; DSF-E255 when a secured store's broker accepted the
    connection and the client then failed (a TLS handshake, an authentication: librdkafka's transport error)."""
    if err.code not in KAFKA_ERRORS or f"store '{store}'" in err.message:
        return err
    if err.code in CONNECT_ERRORS and secured(properties) and err.__cause__ is not None:
        return DsflowError(
            "DSF-E255", f"Kafka store '{store}' ({security_summary(properties)}): {err.message}",
            hint="the broker accepted the connection, then TLS or SASL failed: check the store's security.protocol "
                 "(SSL against a plaintext listener fails so), sasl.* credentials and ssl.* files; see docs/project.md "
                 "(Secured Kafka)", location=err.location)
    return DsflowError(err.code, f"Kafka store '{store}': {err.message}", hint=err.hint, location=err.location)


@contextmanager
def for_store(store: str, properties: Mapping[str, str] | None) -> Iterator[None]:
    """Raise a Kafka client error of the block as `store_error` makes it."""
    try:
        yield
    except DsflowError as err:
        raised = store_error(err, store, properties or {})
        if raised is err:
            raise
        raise raised from err


def is_auth_failure(name: str, text: str) -> bool:
    """True for a librdkafka error (its name and text, "<broker>: <reason>") that is a failed TLS handshake or SASL
    authentication; never for a refused or dropped connection, whose broker name alone may say ssl:// or sasl_."""
    if name in AUTH_ERRORS:
        return True
    return name == "_TRANSPORT" and any(word in reason(text) for word in TLS_OR_SASL)


def reason(text: str) -> str:
    """A librdkafka error text without the broker it starts with ("sasl_ssl://host:9093/bootstrap: ...")."""
    return text.split(": ", 1)[-1]


class AuthWatch:
    """A client's `error_cb` (called from its poll): keeps the first TLS or SASL failure. Every error is logged at
    INFO (librdkafka's own FAIL log line of each failure stays an error)."""

    def __init__(self) -> None:
        self.failure: Any = None
        """The first KafkaError that `is_auth_failure`, or None."""

    def __call__(self, err: Any) -> None:
        LOG.info("client error %s: %s", err.name(), err.str())
        if self.failure is None and is_auth_failure(err.name(), err.str()):
            self.failure = err
