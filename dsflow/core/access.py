"""Who may do what: roles, grants, ownership and user bindings, evaluated over resource records (pure).

The model is built from (address, attributes) records: the resources a project declares, or the ones the
deployed state holds (the server enforces the deployed state, never the working tree). Privileges follow
DeltaStream (and SQL databases): a privilege on a relation also needs USAGE on its database and schema; the owner of
an object, or of a namespace it lives in, has every privilege on it; ALL is every privilege of the object's type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

ORGANIZATION = "organization"
ACCESS_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,99}")
"""A role or user name, in YAML (load/raw.py) and in GRANT/REVOKE/CREATE ROLE statements (sql/access_sql.py)."""


class Privilege(str, Enum):
    """A privilege that can be granted to a role (OWNERSHIP is held by an object's owner, never granted)."""

    USAGE = "USAGE"
    CREATE = "CREATE"
    SELECT = "SELECT"
    INSERT = "INSERT"
    MANAGE = "MANAGE"
    CREATE_STORE = "CREATE_STORE"
    CREATE_DATABASE = "CREATE_DATABASE"
    CREATE_ROLE = "CREATE_ROLE"
    MANAGE_GRANTS = "MANAGE_GRANTS"
    MANAGE_USERS = "MANAGE_USERS"
    ALL = "ALL"
    OWNERSHIP = "OWNERSHIP"


P = Privilege
APPLICABLE: dict[str, frozenset[Privilege]] = {
    ORGANIZATION: frozenset({P.CREATE_STORE, P.CREATE_DATABASE, P.CREATE_ROLE, P.MANAGE_GRANTS, P.MANAGE_USERS}),
    "database": frozenset({P.USAGE, P.CREATE}),
    "schema": frozenset({P.USAGE, P.CREATE}),
    "store": frozenset({P.USAGE}),
    "relation": frozenset({P.SELECT, P.INSERT}),
    "query": frozenset({P.MANAGE}),
}
"""The grantable privileges of each object type (ALL stands for all of them)."""

BUILTIN_ROLES: dict[str, tuple[str, ...]] = {
    "orgadmin": ("sysadmin", "securityadmin", "useradmin"),
    "sysadmin": (),
    "securityadmin": (),
    "useradmin": (),
    "public": (),
}
"""DeltaStream's built-in roles and what each inherits; every user has `public`."""

BUILTIN_GRANTS: dict[str, frozenset[Privilege]] = {
    "sysadmin": frozenset({P.CREATE_STORE, P.CREATE_DATABASE}),
    "securityadmin": frozenset({P.CREATE_ROLE, P.MANAGE_GRANTS}),
    "useradmin": frozenset({P.MANAGE_USERS}),
}
"""Organization privileges the built-in roles hold; orgadmin holds every privilege on everything."""

DEFAULT_OWNER = "sysadmin"


def heirs(inherits: Mapping[str, tuple[str, ...]], role: str) -> list[str]:
    """`role` and every role inheriting it, transitively (`inherits`: each role's parents); parents before
    children. A cycle (refused at load) never loops."""
    found = [role]
    for name in found:
        found += [c for c, ps in inherits.items() if name in ps and c not in found]
    order: list[str] = []
    while len(order) < len(found):
        ready = [n for n in found if n not in order and all(p not in found or p in order for p in inherits.get(n, ()))]
        order += ready or [n for n in found if n not in order]
    return order


def project_inherits(project: Any) -> dict[str, tuple[str, ...]]:
    """What each role inherits: the built-in roles' (orgadmin inherits sysadmin, ...) and the project's."""
    return {**BUILTIN_ROLES, **{r.name: tuple(r.inherits) for r in project.roles}}
SUPERUSER = "orgadmin"


def object_type(address: str) -> str:
    """`relation` for `relation.db.public.x`; `organization` for the organization."""
    return ORGANIZATION if address == ORGANIZATION else address.partition(".")[0]


@dataclass(frozen=True)
class Decision:
    """The answer to one check: allowed or not, and which (privilege, object) pairs were missing."""

    allowed: bool
    missing: tuple[tuple[Privilege, str], ...] = ()
    message: str = ""


@dataclass(frozen=True)
class Refusal:
    """A change of a plan the caller may not make."""

    address: str
    action: str
    decision: Decision


@dataclass(frozen=True)
class AccessModel:
    """Roles (with inheritance), grants, owners and user bindings of one project environment."""

    inherits: Mapping[str, tuple[str, ...]]
    grants: Mapping[str, frozenset[tuple[Privilege, str]]]
    bindings: Mapping[str, tuple[str, ...]]
    owners: Mapping[str, str]
    parents: Mapping[str, tuple[str, ...]]
    _closure: dict[str, frozenset[str]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_records(cls, records: Iterable[tuple[str, Mapping[str, Any]]]) -> AccessModel:
        """From (address, attributes) pairs; attributes are a resource's data and metadata, merged."""
        inherits = dict(BUILTIN_ROLES)
        grants: dict[str, set[tuple[Privilege, str]]] = {r: {(p, ORGANIZATION) for p in ps}
                                                          for r, ps in BUILTIN_GRANTS.items()}
        bindings: dict[str, tuple[str, ...]] = {}
        owners: dict[str, str] = {}
        parents: dict[str, tuple[str, ...]] = {}
        for address, attributes in records:
            kind = object_type(address)
            if kind == "role":
                inherits[attributes.get("name", address.partition(".")[2])] = tuple(attributes.get("inherits", ()))
            elif kind == "grant":
                privilege = _privilege(attributes.get("privilege"))
                if privilege is not None:
                    grants.setdefault(attributes["role"], set()).add((privilege, attributes["on"]))
            elif kind == "binding":
                bindings[attributes.get("user", address.partition(".")[2])] = tuple(attributes.get("roles", ()))
            if attributes.get("owner"):
                owners[address] = attributes["owner"]
            parents[address] = _parents(address, attributes)
        return cls(inherits, {r: frozenset(g) for r, g in grants.items()}, bindings, owners, parents)

    def roles_of(self, user: str) -> frozenset[str]:
        """The roles bound to `user`, everything they inherit, and `public`."""
        if user not in self._closure:
            seen: set[str] = set()
            todo = [*self.bindings.get(user, ()), "public"]
            while todo:
                role = todo.pop()
                if role not in seen:
                    seen.add(role)
                    todo.extend(self.inherits.get(role, ()))
            self._closure[user] = frozenset(seen)
        return self._closure[user]

    def owner_of(self, address: str) -> str:
        """The declared owner, else the owner of the nearest parent that has one, else sysadmin."""
        for candidate in (address, *self.ancestors(address)):
            if candidate in self.owners:
                return self.owners[candidate]
        return DEFAULT_OWNER

    def ancestors(self, address: str) -> tuple[str, ...]:
        """The namespaces (and for a query, its sink relation) `address` lives in, nearest first."""
        out: list[str] = []
        todo = list(self.parents.get(address, _parents(address, {})))
        while todo:
            parent = todo.pop(0)
            if parent not in out:
                out.append(parent)
                todo.extend(self.parents.get(parent, _parents(parent, {})))
        return tuple(out)

    def check(self, user: str, privilege: Privilege | str, address: str) -> Decision:
        """Whether `user` holds `privilege` on `address`, with the prerequisites the hierarchy asks for."""
        privilege = Privilege(privilege)
        roles = self.roles_of(user)
        if SUPERUSER in roles:
            return Decision(True)
        missing = tuple(need for need in _requirements(privilege, address) if not self._holds(roles, *need))
        if not missing:
            return Decision(True)
        return Decision(False, missing, _message(user, roles, missing))

    def can_see(self, user: str, address: str) -> bool:
        """Whether `address` appears in the caller's catalog: a privilege on it or inside it, or ownership."""
        roles = self.roles_of(user)
        if SUPERUSER in roles or self._owns(roles, address):
            return True
        kind = object_type(address)
        if kind in ("query", "datagen"):  # what writes into a relation is seen by those who may read it
            target = next((p for p in self.parents.get(address, ()) if p.startswith("relation.")), None)
            return (kind == "query" and self.check(user, P.MANAGE, address).allowed) or (
                target is not None and self.check(user, P.SELECT, target).allowed)
        if any(self._granted(roles, p, address) for p in APPLICABLE.get(kind, ())):
            return True
        return any(address in self.ancestors(on) for role in roles for _, on in self.grants.get(role, ()))

    def authorize_plan(self, user: str, plan: Mapping[str, Any]) -> list[Refusal]:
        """Every change of a plan (its JSON document) that `user` may not make."""
        refusals = []
        for change in plan.get("changes", ()):
            if not acts(change):
                continue
            missing = []
            for privilege, on in change_requirements(change):
                decision = self.check(user, privilege, on)
                missing += [m for m in decision.missing if m not in missing]
            if missing:
                roles = self.roles_of(user)
                refusals.append(Refusal(change["address"], change["action"],
                                        Decision(False, tuple(missing), _message(user, roles, tuple(missing)))))
        return refusals

    def _holds(self, roles: frozenset[str], privilege: Privilege, address: str) -> bool:
        if self._owns(roles, address):
            return True
        return privilege is not P.OWNERSHIP and self._granted(roles, privilege, address)

    def _owns(self, roles: frozenset[str], address: str) -> bool:
        if address == ORGANIZATION:
            return False
        return any(self.owner_of(a) in roles for a in (address, *self.ancestors(address)))

    def _granted(self, roles: frozenset[str], privilege: Privilege, address: str) -> bool:
        return any((privilege, address) in self.grants.get(r, ()) or (P.ALL, address) in self.grants.get(r, ())
                   for r in roles)


def acts(change: Mapping[str, Any]) -> bool:
    """Whether applying a change (of the plan JSON) does something a privilege must allow: not a no-op, nor a refresh
    that only records drift; an import that matches is applied (recorded), and a query's refresh outside a
    refresh-only plan rolls back an interrupted blue/green deployment (stops a driver, deletes what it made)."""
    if change.get("imported"):
        return True
    if change.get("action") == "no-op":
        return False
    return change.get("action") != "refresh" or (not change.get("drift") and change["address"].startswith("query."))


def change_requirements(change: Mapping[str, Any]) -> list[tuple[Privilege, str]]:
    """What a caller must hold to make one change of a plan (a change of the plan JSON)."""
    address, action = change["address"], change["action"]
    kind = object_type(address)
    attributes = change.get("after") or change.get("before") or {}
    if kind == "role":
        return [(P.CREATE_ROLE, ORGANIZATION)]
    if kind in ("grant", "binding"):
        return [(P.MANAGE_GRANTS, ORGANIZATION)]
    if action != "create" and not change.get("imported"):  # an import takes in what the caller did not own yet
        return [(P.OWNERSHIP, address)]
    if kind == "store":
        return [(P.CREATE_STORE, ORGANIZATION)]
    if kind == "database":
        return [(P.CREATE_DATABASE, ORGANIZATION)]
    if kind in ("schema", "relation"):
        needs = [(P.CREATE, parent) for parent in _parents(address, attributes)]
        if attributes.get("store"):
            needs.append((P.USAGE, f"store.{attributes['store']}"))
        return needs
    if kind == "query":
        sink = attributes.get("sink", "")
        needs = [(P.CREATE, f"schema.{_namespace(sink)}")]
        if attributes.get("statement") == "insert":  # INSERT INTO writes into a relation that already exists
            needs.append((P.INSERT, f"relation.{sink}"))
        return needs + [(P.SELECT, f"relation.{source[0]}") for source in attributes.get("sources", ())]
    if kind == "datagen":
        return [(P.INSERT, f"relation.{attributes.get('relation', '')}")]
    return [(P.OWNERSHIP, address)]


def _requirements(privilege: Privilege, address: str) -> list[tuple[Privilege, str]]:
    """The privilege itself and the USAGE on enclosing namespaces that SQL databases and DeltaStream ask for."""
    kind, _, name = address.partition(".")
    parts = name.split(".")
    needs = []
    if kind == "relation" and len(parts) == 3:
        needs = [(P.USAGE, f"database.{parts[0]}"), (P.USAGE, f"schema.{parts[0]}.{parts[1]}")]
    elif kind == "schema" and len(parts) == 2:
        needs = [(P.USAGE, f"database.{parts[0]}")]
    return [*needs, (privilege, address)]


def _parents(address: str, attributes: Mapping[str, Any]) -> tuple[str, ...]:
    """The immediate containers of an object: relation -> schema -> database; a query -> its sink relation, a
    generator -> the relation it feeds."""
    kind, _, name = address.partition(".")
    parts = name.split(".")
    if kind == "relation" and len(parts) == 3:
        return (f"schema.{parts[0]}.{parts[1]}",)
    if kind == "schema" and len(parts) == 2:
        return (f"database.{parts[0]}",)
    if kind == "query" and attributes.get("sink"):
        return (f"relation.{attributes['sink']}",)
    if kind == "datagen" and attributes.get("relation"):
        return (f"relation.{attributes['relation']}",)
    return ()


def _namespace(fqn: str) -> str:
    return fqn.rpartition(".")[0]


def _privilege(value: Any) -> Privilege | None:
    try:
        return Privilege(str(value).upper())
    except ValueError:
        return None


def _message(user: str, roles: frozenset[str], missing: tuple[tuple[Privilege, str], ...]) -> str:
    wanted = ", ".join(f"{p.value} on {on}" for p, on in missing)
    return f"user '{user}' (roles: {', '.join(sorted(roles))}) lacks {wanted}"


def records_of(resources: Iterable[Any]) -> list[tuple[str, dict[str, Any]]]:
    """(address, data + metadata) of deployed resources (core.state.DeployedResource) or project resources."""
    return [(str(r.address), {**r.data, **r.metadata}) for r in resources]
