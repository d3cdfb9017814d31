"""Grants pushed down as Kafka ACLs through the AdminClient (the bindings: adapters/kafka/acls.py).

    apply_grant   create_acls of the grant's bindings (idempotent: an existing binding is taken as it is); the
                  bindings are the grant's outputs in state
    delete        delete_acls with one exact filter per recorded binding, but for those another deployed grant
                  still records (two SELECTs of one role share their group binding); any other ACL stays
    observe_grant refresh: a recorded binding the broker no longer holds (deleted by hand), or bindings the
                  project now makes otherwise (a principal mapped or a role inheriting changed), is drift

A broker that keeps no ACLs (the embedded broker, tansu: it does not advertise DeleteAcls, and its CreateAcls answer
makes librdkafka abort the process) is DSF-E731 before any ACL call: a plaintext store's broker is asked its API
versions first. A refused call (no authorizer, the store's principal may not alter ACLs) is DSF-E732; a dead broker
DSF-E702, or DSF-E255 for a secured store, naming the store.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from dsflow.adapters.kafka import acls
from dsflow.adapters.kafka.client import (LOG, assert_reachable, auth_watch, client_config, connected, error_cb,
                                          request_failed)
from dsflow.adapters.kafka.msk import librdkafka_config
from dsflow.adapters.kafka.security import for_store, secured
from dsflow.errors import DsflowError

TIMEOUT = 10.0
DELETE_ACLS = 31
"""The API key of DeleteAcls: a broker that does not advertise it keeps no ACLs dsflow could take back."""


def heirs(project: Any) -> Any:
    from dsflow.core.access import heirs as below, project_inherits

    inherits = project_inherits(project)
    return lambda role: below(inherits, role)


def target(project: Any, data: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return acls.target(project, data, heirs(project)) if project is not None else None


class GrantExecutor:
    """A grant on a stream or changelog of a kafka store that maps roles to principals: its ACL bindings. It
    claims the grants it pushes down, and those it did (their outputs); every other grant goes to another kind."""

    def claims(self, project: Any, data: Mapping[str, Any] | None, outputs: Mapping[str, Any] | None) -> bool:
        return bool((outputs or {}).get(acls.KEY)) or target(project, data) is not None

    def create(self, ctx: Any, change: Any) -> dict[str, Any]:
        wanted = target(ctx.project, change.after)
        if wanted is None:
            return {}
        apply_grant(ctx.project, wanted)
        return {acls.KEY: wanted}

    def update(self, ctx: Any, change: Any, deployed: Any) -> dict[str, Any]:
        """Created again (drift), then the bindings recorded before and no longer made taken back."""
        outputs = self.create(ctx, change)
        before = deployed.outputs.get(acls.KEY)
        if before:
            kept = _recorded_by_others(ctx, deployed.address) + list(outputs.get(acls.KEY, {}).get("bindings", []))
            revoke(ctx.project, before, kept)
        return outputs

    def delete(self, ctx: Any, deployed: Any) -> None:
        recorded = deployed.outputs.get(acls.KEY)
        if recorded:
            revoke(ctx.project, recorded, _recorded_by_others(ctx, deployed.address))


def _recorded_by_others(ctx: Any, address: str) -> list[dict]:
    """The bindings the other deployed grants record (read from the state apply writes after every change)."""
    state = ctx.workspace.state_backend().read()
    return [b for key, r in state.resources.items() if key.startswith("grant.") and key != address
            for b in (r.outputs.get(acls.KEY) or {}).get("bindings", [])]


def _store(project: Any, name: str) -> Any:
    store = project.store(name) if project is not None else None
    if store is None or store.type != "kafka":
        raise DsflowError("DSF-E732", f"cannot reach the ACLs of the kafka store '{name}': it is no longer in the "
                          "project", hint="declare the store again, apply (its ACLs are deleted), then remove it")
    return store


def apply_grant(project: Any, wanted: Mapping[str, Any]) -> None:
    """create_acls of every binding; an existing one is fine (the broker keeps one copy)."""
    from confluent_kafka import KafkaException

    store = _store(project, wanted["store"])
    with for_store(store.name, store.properties):
        admin = _admin(store)
        made = [_binding(b) for b in wanted["bindings"]]
        try:
            for future in admin.create_acls(made, request_timeout=TIMEOUT).values():
                future.result()
        except KafkaException as exc:
            raise _refused(store, "creating ACLs", exc) from exc


def revoke(project: Any, recorded: Mapping[str, Any], kept: Iterable[Mapping[str, str]] = ()) -> None:
    """delete_acls with an exact filter for each recorded binding not in `kept`."""
    from confluent_kafka import KafkaException

    keep = list(kept)
    gone = [b for b in recorded.get("bindings", []) if b not in keep]
    if not gone:
        return
    store = _store(project, recorded["store"])
    with for_store(store.name, store.properties):
        admin = _admin(store)
        try:
            for future in admin.delete_acls([_filter(b) for b in gone], request_timeout=TIMEOUT).values():
                future.result()
        except KafkaException as exc:
            raise _refused(store, "deleting ACLs", exc) from exc


def held(project: Any, recorded: Mapping[str, Any]) -> list[dict]:
    """The recorded bindings the broker holds now (describe_acls, one request per principal)."""
    from confluent_kafka import KafkaException

    store = _store(project, recorded["store"])
    found: list[dict] = []
    with for_store(store.name, store.properties):
        admin = _admin(store)
        for principal in sorted({b["principal"] for b in recorded.get("bindings", [])}):
            try:
                listed = admin.describe_acls(_principal_filter(principal), request_timeout=TIMEOUT).result()
            except KafkaException as exc:
                raise _refused(store, "describing ACLs", exc) from exc
            found += [_recorded(b) for b in listed]
    return [b for b in recorded.get("bindings", []) if b in found]


def observe_grant(project: Any, deployed: Any) -> Any:
    """Refresh: drift when a recorded binding is missing, or the project now makes other bindings (a principal
    mapped or removed, a role's inheritance changed, a mapping added to a store whose grants were recorded only, or
    taken away); None for a grant that is not Kafka's to push down."""
    from dsflow.core.plan import Observation

    recorded = deployed.outputs.get(acls.KEY)
    wanted = target(project, deployed.data)
    if not recorded:
        return None if wanted is None else Observation(address=deployed.address, healthy=False,
                                                       detail="not pushed down as Kafka ACLs yet")
    if project is not None and (wanted or {}).get("bindings") != recorded.get("bindings"):
        return Observation(address=deployed.address, healthy=False,
                           detail="the principals the grant maps to changed")
    try:
        there = held(project, recorded)
    except DsflowError as err:
        return Observation(address=deployed.address, healthy=False, detail=f"{err.code}: {err.message}")
    missing = [b for b in recorded.get("bindings", []) if b not in there]
    if missing:
        return Observation(address=deployed.address, healthy=False,
                           detail=f"ACL {acls.describe(missing[0])} is missing"
                           + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    return Observation(address=deployed.address, healthy=True, detail="ACLs in place")


def _admin(store: Any) -> Any:
    """An AdminClient of the store, once its broker is known to keep ACLs (DSF-E731)."""
    from confluent_kafka.admin import AdminClient

    assert_reachable(store.bootstrap_servers)
    if not secured(store.properties) and DELETE_ACLS not in api_versions(store.bootstrap_servers):
        raise DsflowError("DSF-E731", f"the broker of the kafka store '{store.name}' keeps no ACLs (it does not "
                          "offer DeleteAcls: the embedded broker, tansu), so its grants cannot be pushed down",
                          hint=f"remove the store's {acls.PRINCIPALS}* settings (its grants are then enforced by "
                          "`dsflow serve` only), or use a broker with an authorizer (`dsflow dev up --broker kafka`)")
    watch = auth_watch(store.properties)
    config: dict[str, Any] = {**librdkafka_config(client_config(store.bootstrap_servers, store.properties)),
                              "logger": LOG, **error_cb(watch)}
    return connected(AdminClient(config), store.bootstrap_servers, watch)


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """The first bootstrap broker's ApiVersions (v0) answer: api key -> (min, max) version; {} if unreadable."""
    host, _, port = bootstrap.split(",")[0].strip().split("://", 1)[-1].rpartition(":")
    body = struct.pack(">hhih", 18, 0, 1, 6) + b"dsflow"
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=TIMEOUT) as sock:
            sock.settimeout(TIMEOUT)
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", _read(sock, 4))[0]
            data = _read(sock, size)
    except (OSError, ValueError, struct.error):
        return {}
    _, error, count = struct.unpack(">ihi", data[:10])
    if error:
        return {}
    entries = (struct.unpack(">hhh", data[10 + 6 * i:16 + 6 * i]) for i in range(count))
    return {key: (low, high) for key, low, high in entries}


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ValueError("the broker closed the connection")
        data += chunk
    return data


def _refused(store: Any, what: str, exc: Exception) -> DsflowError:
    """A dead broker as client.request_failed says (DSF-E702, named by for_store); any other refusal DSF-E732."""
    err = request_failed(store.bootstrap_servers, what, exc)
    if err.code != "DSF-E703":
        return err
    return DsflowError("DSF-E732", f"the broker of the kafka store '{store.name}' refused {what}: {exc}",
                       hint="the broker needs an authorizer (KRaft: authorizer.class.name StandardAuthorizer), and "
                       "the store's principal ALTER and DESCRIBE on the CLUSTER (or to be a super user)")


def _binding(b: Mapping[str, str]) -> Any:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return AclBinding(ResourceType[b["resource"]], b["name"], ResourcePatternType[b["pattern"]], b["principal"], "*",
                      AclOperation[b["operation"]], AclPermissionType.ALLOW)


def _filter(b: Mapping[str, str]) -> Any:
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    return AclBindingFilter(ResourceType[b["resource"]], b["name"], ResourcePatternType[b["pattern"]],
                            b["principal"], "*", AclOperation[b["operation"]], AclPermissionType.ALLOW)


def _principal_filter(principal: str) -> Any:
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    anything: Any = None  # a filter's None matches any resource name and host
    return AclBindingFilter(ResourceType.ANY, anything, ResourcePatternType.ANY, principal, anything,
                            AclOperation.ANY, AclPermissionType.ALLOW)


def _recorded(found: Any) -> dict[str, str]:
    """A binding the broker lists, in the form recorded in state (any host's ALLOW only: others never match)."""
    if found.host != "*":
        return {}
    return acls.binding(found.restype.name, found.name, found.resource_pattern_type.name, found.principal,
                        found.operation.name)
