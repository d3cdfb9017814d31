"""Which Kafka ACLs a grant becomes: a kafka store's `acl.*` settings (dsflow's own, never handed to librdkafka),
checked when the project loads (DSF-E730), and the bindings of a grant on a relation whose topic is on such a store.

    acl.principals.<role>  the Kafka principals acting as dsflow role <role>: `Type:name` (`User:alice`), several
                           separated by `;` (as Kafka's `super.users`: a TLS principal's name holds commas)
    acl.group_prefix       consumer groups whose names start with it (PREFIXED): READ for the principals of a SELECT

A grant to role R on a stream or changelog of the store is pushed down to the principals of R and of every role
inheriting R: SELECT -> READ and DESCRIBE on the topic (LITERAL), INSERT -> WRITE and DESCRIBE, ALL -> all three;
each ALLOW from any host. A store without `acl.principals.*` pushes nothing down (grants recorded in state only).
The calls to the broker are adapters/kafka/grants.py's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from dsflow.errors import Diagnostic, Location

PREFIX = "acl."
"""dsflow's own settings of a kafka store: taken out of every client's settings (msk.librdkafka_config)."""
PRINCIPALS = "acl.principals."
GROUP_PREFIX = "acl.group_prefix"
KEY = "kafka"
"""The key of a pushed-down grant's outputs in state."""
PRINCIPAL = re.compile(r"[A-Za-z][A-Za-z0-9_-]*:\S(?:.*\S)?")
"""A Kafka principal, `Type:name` (KafkaPrincipal's string form): `User:alice`, `User:CN=app,O=corp`, `User:*`."""
OPERATIONS = {"SELECT": ("READ", "DESCRIBE"), "INSERT": ("WRITE", "DESCRIBE"), "ALL": ("READ", "WRITE", "DESCRIBE")}
"""The topic operations each privilege on a relation becomes."""
LOGS = ("stream", "changelog")


def is_own(key: str) -> bool:
    """True for a setting of dsflow's (`acl.*`), not librdkafka's."""
    return key.startswith(PREFIX)


def principals(properties: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """dsflow role -> the Kafka principals acting as it, from a store's settings."""
    out = {}
    for key, value in properties.items():
        if key.startswith(PRINCIPALS) and key[len(PRINCIPALS):]:
            out[key[len(PRINCIPALS):]] = tuple(p.strip() for p in str(value).split(";") if p.strip())
    return out


def acl_diagnostics(name: str, properties: Mapping[str, Any],
                    where: Callable[[str], Location | None]) -> list[Diagnostic]:
    """DSF-E730 for each `acl.*` setting of a kafka store that dsflow cannot use; `where(key)`: its location."""
    out = []
    for key, value in sorted(properties.items()):
        if not is_own(key):
            continue
        text = str(value).strip()
        if key == GROUP_PREFIX:
            why = "is empty: it would let the principals READ every consumer group" if not text else None
        elif key.startswith(PRINCIPALS) and key[len(PRINCIPALS):]:
            why = _bad_principals(text)
        else:
            why = "is not a setting dsflow knows"
        if why:
            out.append(Diagnostic("DSF-E730", f"{key} of the kafka store '{name}' {why}", where(key),
                                  hint=f"map a role to Kafka principals, e.g. {PRINCIPALS}analyst: \"User:alice\" "
                                  f"(several separated by ';'), and optionally {GROUP_PREFIX}: \"analytics-\"; see "
                                  "docs/access.md (Kafka)"))
    return out


def _bad_principals(text: str) -> str | None:
    found = [p.strip() for p in text.split(";")]
    bad = [p for p in found if not PRINCIPAL.fullmatch(p)]
    if not text:
        return "names no principal"
    if bad:
        return f"holds {bad[0]!r}, which is not a Kafka principal 'Type:name' (such as User:alice)"
    return None


def target(project: Any, data: Mapping[str, Any] | None, heirs: Callable[[str], list[str]]) -> dict[str, Any] | None:
    """Where and how a grant is pushed down: {store, topic, bindings} for a SELECT, INSERT or ALL on a stream or
    changelog of a kafka store with `acl.principals.*` some principal of the role (or of a role inheriting it,
    `heirs(role)`) is mapped to; None otherwise."""
    data = data or {}
    on, privilege = str(data.get("on", "")), str(data.get("privilege", "")).upper()
    if project is None or privilege not in OPERATIONS or not on.startswith("relation."):
        return None
    relation = project.relation(on.split(".", 1)[1])
    if relation is None or relation.kind not in LOGS or not relation.store:
        return None
    store = project.store(relation.store)
    if store is None or store.type != "kafka":
        return None
    mapped = principals(store.properties)
    names = sorted({p for role in heirs(str(data.get("role", ""))) for p in mapped.get(role, ())})
    if not names:
        return None
    return {"store": store.name, "topic": relation.topic,
            "bindings": bindings(relation.topic, OPERATIONS[privilege], names,
                                 store.properties.get(GROUP_PREFIX))}


def bindings(topic: str, operations: tuple[str, ...], names: list[str], group_prefix: str | None) -> list[dict]:
    """The ALLOW bindings (as recorded in state) for `names` on `topic`, and READ on the groups of the prefix."""
    out = [binding("TOPIC", topic, "LITERAL", name, op) for name in names for op in operations]
    if group_prefix and "READ" in operations:
        out += [binding("GROUP", group_prefix, "PREFIXED", name, "READ") for name in names]
    return out


def binding(resource: str, name: str, pattern: str, principal: str, operation: str) -> dict[str, str]:
    return {"resource": resource, "name": name, "pattern": pattern, "principal": principal, "operation": operation}


def describe(b: Mapping[str, str]) -> str:
    """'READ on TOPIC p_events (LITERAL) for User:alice'."""
    return f"{b['operation']} on {b['resource']} {b['name']} ({b['pattern']}) for {b['principal']}"
