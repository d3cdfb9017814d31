"""A Kafka store's settings are librdkafka's own, passed as they are to every client dsflow makes for the store. No
model lists them (librdkafka has hundreds): librdkafka itself checks each name and value when the project loads
(DSF-E256), the way it would when a client is made, without connecting anywhere. Each setting is checked alone, so
no TLS context is built and no file a setting names is read on the machine that validates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from dsflow.adapters.kafka import acls, msk

COMMON = ("bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
          "sasl.oauthbearer.method", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
          "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.scope", "sasl.kerberos.keytab",
          "sasl.kerberos.principal", "sasl.kerberos.service.name", "ssl.ca.location", "ssl.certificate.location",
          "ssl.key.location", "ssl.key.password", "ssl.ca.pem", "ssl.certificate.pem", "ssl.key.pem",
          "ssl.keystore.location", "ssl.keystore.password", "ssl.endpoint.identification.algorithm",
          "ssl.crl.location", "acks", "linger.ms", "batch.size", "compression.type", "enable.idempotence",
          "message.max.bytes", "fetch.max.bytes", "max.partition.fetch.bytes", "request.timeout.ms",
          "socket.timeout.ms", "message.timeout.ms", "retries", "retry.backoff.ms", "client.rack")
"""Settings a project commonly names: where a refused name comes from a typo, the guess is made among these."""
_NEEDS_OTHERS = "Failed to create"
"""librdkafka's message when each setting was taken but the client cannot be made from them alone (SASL_SSL with the
default mechanism, GSSAPI, not compiled in): that depends on the other settings, which security_diagnostics checks."""
_QUIET = logging.getLogger("dsflow.kafka.settings_check")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def refused(properties: Mapping[str, str]) -> list[tuple[str, str]]:
    """(setting, librdkafka's reason) for each setting librdkafka refuses: an unknown name or a value it cannot take."""
    own = {k: v for k, v in properties.items() if k not in msk.SETTINGS and not acls.is_own(k)}  # dsflow's own
    if not own:
        return []  # nothing for librdkafka to check: confluent_kafka (~15 ms) not imported on a plain plan
    from confluent_kafka import Consumer, KafkaException

    out = []
    for key, value in sorted(own.items()):
        if key in ("sasl.mechanism", "sasl.mechanisms") and msk.is_msk_iam({key: value}):
            value = "OAUTHBEARER"  # what clients get (msk.librdkafka_config)
        try:
            Consumer({"group.id": "dsflow-settings-check", key: value, "logger": _QUIET}).close()
        except KafkaException as exc:
            why = exc.args[0].str().strip()
            if not why.startswith(_NEEDS_OTHERS):
                out.append((key, _without(why, value)))
        except (TypeError, ValueError) as exc:
            out.append((key, _without(str(exc), value)))
    return out


def _without(why: str, value: str) -> str:
    """librdkafka's reason without the value itself (it may be a secret)."""
    return why.replace(str(value), "<the value>") if str(value).strip() else why
