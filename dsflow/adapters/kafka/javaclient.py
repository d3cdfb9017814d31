"""A Kafka store's settings as Spark's own Kafka connector takes them (the Java client, kafka-clients), from the
librdkafka settings every other dsflow client gets (`client.client_config`).

A store's `properties` are librdkafka's names. Those that are the same in the Java client (`security.protocol`,
`sasl.mechanism`, `ssl.key.password`, `client.id`, ...) pass as they are; the security settings that differ are
translated:

    sasl.username, sasl.password          sasl.jaas.config: PlainLoginModule (PLAIN) or ScramLoginModule
                                          (SCRAM-SHA-256/512), the values quoted
    sasl.mechanisms                       sasl.mechanism
    ssl.ca.location, ssl.ca.pem           ssl.truststore.type PEM, ssl.truststore.location (a file of the CAs)
    ssl.certificate.location/.pem         ssl.keystore.type PEM, ssl.keystore.location: one file of the key and the
      and ssl.key.location/.pem           certificate chain
                                          (each file written 0600 into `folder`, the driver's scratch folder, removed
                                          with it: adapters/process.py)
    ssl.endpoint.identification.algorithm none -> '' (the Java client's "off")

What the Java client cannot do as librdkafka does is `refusals` (DSF-E872 when a real-time query's store asks for
it, load/realtime.py): AWS MSK IAM (dsflow signs its tokens in Python: msk.py), any other OAUTHBEARER or GSSAPI
setup, and `enable.ssl.certificate.verification` false.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
"""The SASL mechanisms whose user name and password become a JAAS login of the Java client."""
CONSUMED = {"sasl.username", "sasl.password", "sasl.mechanisms", "sasl.mechanism", "ssl.ca.location", "ssl.ca.pem",
            "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem",
            "ssl.endpoint.identification.algorithm"}
"""librdkafka settings translated here (not passed as they are)."""


def mechanism(config: Mapping[str, str]) -> str | None:
    value = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    return str(value).upper() if value else None


def refusals(config: Mapping[str, str]) -> list[str]:
    """Why Spark's Kafka connector cannot connect as the store's settings say (none: it can)."""
    reasons = []
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    sasl = mechanism(config)
    if protocol.startswith("SASL") and sasl not in LOGIN_MODULES:
        reasons.append(f"sasl.mechanism {sasl or '(none)'} (dsflow gives Spark's Kafka connector "
                       f"{', '.join(LOGIN_MODULES)} logins only)")
    if str(config.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        reasons.append("enable.ssl.certificate.verification false (the Java client always verifies)")
    return reasons


def java_settings(config: Mapping[str, str], folder: Path) -> dict[str, str]:
    """The connector's client settings (without the `kafka.` prefix Spark's options give them)."""
    settings = {key: str(value) for key, value in config.items() if key not in CONSUMED}
    sasl = mechanism(config)
    if sasl:
        settings["sasl.mechanism"] = sasl
    if sasl in LOGIN_MODULES and "sasl.username" in config:
        settings["sasl.jaas.config"] = (f"{LOGIN_MODULES[sasl]} required username={_quoted(config['sasl.username'])}"
                                        f" password={_quoted(config.get('sasl.password', ''))};")
    cas = _pem(config, "ssl.ca")
    if cas:
        settings |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": _written(folder, "ca", cas)}
    certificate, key = _pem(config, "ssl.certificate"), _pem(config, "ssl.key")
    if certificate and key:
        settings |= {"ssl.keystore.type": "PEM",
                     "ssl.keystore.location": _written(folder, "keystore", key.rstrip() + "\n" + certificate)}
    identification = config.get("ssl.endpoint.identification.algorithm")
    if identification is not None:
        settings["ssl.endpoint.identification.algorithm"] = "" if str(identification).lower() == "none" \
            else str(identification)
    return settings


def _quoted(value: str) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pem(config: Mapping[str, str], name: str) -> str | None:
    """The PEM text of `<name>.pem`, or of the file `<name>.location` names."""
    if config.get(f"{name}.pem"):
        return str(config[f"{name}.pem"])
    location = config.get(f"{name}.location")
    return Path(location).read_text() if location else None


def _written(folder: Path, name: str, text: str) -> str:
    """`text` in `folder`/kafka-<name>-<hash of text>.pem, readable by its owner only; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"kafka-{name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.pem"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    return str(path)
