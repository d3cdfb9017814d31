"""A Kafka store's TLS and SASL settings, checked when the project loads (DSF-E251..E254): the `rules` facet asks.

The settings are librdkafka's names, passed as they are to every client dsflow makes for the store (docs/project.md,
"Secured Kafka"). Secrets (`sasl.password`, `ssl.key.password`, `ssl.key.pem`, ...) must come from `env_var()`:
load/objects.py reports a literal one (DSF-E060).
"""

from __future__ import annotations

from collections.abc import Callable

from dsflow.adapters.kafka import msk
from dsflow.errors import Diagnostic, Location

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", msk.MECHANISM)
FILE_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.crl.location",
             "ssl.keystore.location", "sasl.kerberos.keytab")
"""Settings that name a file: read by query drivers and generators that run in another working directory."""


def security_diagnostics(name: str, properties: dict[str, str],
                         where: Callable[[str], Location | None]) -> list[Diagnostic]:
    """Problems of a kafka store's security settings; `where(key)` is the key's location."""
    out: list[Diagnostic] = []
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        out.append(Diagnostic("DSF-E251", f"security.protocol '{properties['security.protocol']}' of the kafka store "
                              f"'{name}' is not one of {', '.join(PROTOCOLS)}", where("security.protocol"),
                              hint="SASL_SSL for Confluent Cloud, MSK SCRAM and Redpanda Cloud; SSL for TLS alone"))
    key = "sasl.mechanism" if "sasl.mechanism" in properties else "sasl.mechanisms"
    mechanism = properties.get(key, "").strip().upper()
    out += _msk_iam(name, protocol, mechanism, properties, where)
    if mechanism and mechanism not in MECHANISMS:
        out.append(Diagnostic("DSF-E251", f"{key} '{properties[key]}' of the kafka store '{name}' is not one of "
                              f"{', '.join(MECHANISMS)}", where(key), hint="see docs/project.md (Secured Kafka)"))
    out += _unused(name, protocol, properties, where)
    for file_key in FILE_KEYS:
        value = properties.get(file_key, "").strip()
        if value and not value.startswith("/"):
            out.append(Diagnostic("DSF-E254", f"{file_key} '{value}' of the kafka store '{name}' is a relative path",
                                  where(file_key), hint="give an absolute path: query drivers and data generators "
                                  "run in another working directory"))
    return out


def _msk_iam(name: str, protocol: str, mechanism: str, properties: dict[str, str],
             where: Callable[[str], Location | None]) -> list[Diagnostic]:
    """DSF-E252: AWS_MSK_IAM needs SASL_SSL (MSK's IAM listener) and the cluster's region; `aws.*` settings without
    it would not be used."""
    if mechanism != msk.MECHANISM:
        unused = sorted(k for k in properties if k in msk.SETTINGS)
        return [Diagnostic("DSF-E252", f"the kafka store '{name}' sets {', '.join(unused)}, used only by "
                           f"sasl.mechanism {msk.MECHANISM}", where(unused[0]),
                           hint=f"set sasl.mechanism: {msk.MECHANISM} (MSK IAM), or remove them")] if unused else []
    out = []
    if protocol != "SASL_SSL":
        out.append(Diagnostic("DSF-E252", f"sasl.mechanism {msk.MECHANISM} of the kafka store '{name}' needs "
                              f"security.protocol SASL_SSL, not {protocol}", where("security.protocol"),
                              hint="MSK's IAM listener (port 9098) takes SASL over TLS: security.protocol: SASL_SSL"))
    if not properties.get(msk.REGION, "").strip():
        out.append(Diagnostic("DSF-E252", f"sasl.mechanism {msk.MECHANISM} of the kafka store '{name}' needs "
                              f"{msk.REGION}: the region of the cluster its tokens are signed for",
                              where("sasl.mechanism"),
                              hint=f"add {msk.REGION}: eu-west-1 (the region in the cluster's bootstrap host names)"))
    return out


def _unused(name: str, protocol: str, properties: dict[str, str],
            where: Callable[[str], Location | None]) -> list[Diagnostic]:
    """DSF-E253: SASL credentials with a protocol without SASL (they would silently not be used), or a SASL
    protocol whose PLAIN/SCRAM credentials are missing."""
    sasl = sorted(k for k in properties if k.startswith("sasl."))
    if sasl and protocol in ("PLAINTEXT", "SSL"):
        return [Diagnostic("DSF-E253", f"the kafka store '{name}' sets {', '.join(sasl)} but security.protocol is "
                           f"{protocol}: the client would not authenticate with them", where(sasl[0]),
                           hint="set security.protocol: SASL_SSL (or SASL_PLAINTEXT), or remove the sasl.* settings")]
    mechanism = (properties.get("sasl.mechanism") or properties.get("sasl.mechanisms") or "GSSAPI").strip().upper()
    if protocol.startswith("SASL_") and (mechanism == "PLAIN" or mechanism.startswith("SCRAM")):
        missing = [k for k in ("sasl.username", "sasl.password") if not properties.get(k)]
        if missing:
            return [Diagnostic("DSF-E253", f"the kafka store '{name}' uses SASL/{mechanism} without "
                               f"{' and '.join(missing)}", where("security.protocol"),
                               hint="add sasl.username and sasl.password: \"{{ env_var('...') }}\"")]
    return []
