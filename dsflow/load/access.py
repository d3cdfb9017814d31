"""Resolving access declarations: roles, grants, revokes, user bindings and owners, from YAML and SQL.

YAML (`roles:` with `grants:`, `users:`, `owner:`) and DeltaStream's GRANT/REVOKE/CREATE ROLE statements
(parsed by sql/access_sql.py) are applied in the project's file order: a REVOKE removes what was granted before
it. Which privileges apply to which objects: core/model.py PRIVILEGES (docs/access.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dsflow.core.model import BUILTIN_ROLES, ORGANIZATION, PRIVILEGES, Binding, Grant, Role, object_type
from dsflow.errors import Diagnostic, Location, Severity
from dsflow.core.suggest import did_you_mean
from dsflow.sql.statements import ALL_PRIVILEGES, OBJECT_TYPES, RELATION_KINDS, AccessStatement

@dataclass(frozen=True)
class Target:
    """The object a grant names: its address (or 'organization') and its kind ('stream', 'database', ...)."""

    address: str
    kind: str


@dataclass
class AccessResult:
    """The resolved roles, grants and bindings, with every problem found."""

    roles: list[Role] = field(default_factory=list)
    grants: dict[str, Grant] = field(default_factory=dict)
    bindings: dict[str, tuple[list[str], Location]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def binding_models(self) -> list[Binding]:
        return [Binding(user=u, roles=tuple(sorted(set(r))), location=loc) for u, (r, loc) in self.bindings.items()]


Resolve = Callable[[str, tuple[str, ...]], Target | None]
"""(object type as written, name parts) -> the object, or None if unknown."""


def declared_roles(yaml_roles: list[Role], statements: list[AccessStatement], out: AccessResult) -> set[str]:
    """Every role name grants may use: the YAML roles and CREATE ROLE statements (each once, none built in)
    plus the built-in roles; the roles kept go to `out.roles`."""
    roles = yaml_roles + [Role(name=s.role, inherits=s.inherits, location=s.location)
                          for s in statements if s.action == "create_role"]
    seen: dict[str, Location | None] = {}
    for role in roles:
        if role.name in BUILTIN_ROLES:
            out.diagnostics.append(Diagnostic(
                "DSF-E301", f"role '{role.name}' is built in and cannot be redefined", role.location,
                hint=f"built-in roles ({', '.join(BUILTIN_ROLES)}) exist in every organization: inherit or grant "
                     "to it without declaring it, or give your role another name"))
        elif role.name in seen:
            out.diagnostics.append(Diagnostic("DSF-E020", f"role '{role.name}' is defined twice", role.location,
                                              hint=f"first defined at {seen[role.name]}"))
        else:
            seen[role.name] = role.location
            out.roles.append(role)
    names = set(seen) | set(BUILTIN_ROLES)
    for role in out.roles:
        for parent in role.inherits:
            if parent not in names:
                out.diagnostics.append(Diagnostic("DSF-E070", f"role '{role.name}' inherits unknown role '{parent}'",
                                                  role.location, hint=did_you_mean(parent, names)))
    return names


def check_privilege(privilege: str, target: Target, where: Location | None) -> Diagnostic | None:
    """DSF-E300 when `privilege` is unknown or does not apply to the target's type of object."""
    kind = object_type(target.address)
    valid = PRIVILEGES[kind]
    if privilege in valid:
        return None
    what = "the organization" if kind == ORGANIZATION else f"{kind} '{target.address.partition('.')[2]}'"
    message = f"unknown privilege '{privilege}'" if privilege not in ALL_PRIVILEGES else \
        f"privilege {privilege} does not apply to {what}"
    return Diagnostic("DSF-E300", message, where,
                      hint=f"privileges of {'the organization' if kind == ORGANIZATION else 'a ' + kind}: "
                           f"{', '.join(valid)}")


def unknown_role(role: str, names: set[str], where: Location | None, what: str) -> Diagnostic:
    """DSF-E302: a GRANT, REVOKE or user binding names a role nothing declares."""
    return Diagnostic("DSF-E302", f"{what} names unknown role '{role}'", where,
                      hint=did_you_mean(role, names) or "declare it under roles: or with CREATE ROLE")


def sql_target(st: AccessStatement, resolve: Resolve) -> tuple[Target | None, Diagnostic | None]:
    """The object of a GRANT/REVOKE ... ON <type> <name>: DSF-E071 if unknown, DSF-E307 if of another kind."""
    where = st.object_location or st.location
    target = resolve(st.object_type, st.object_name)
    written = ".".join(st.object_name)
    if target is None:
        return None, Diagnostic("DSF-E071", f"{st.action} on unknown {st.object_type.lower()} '{written}'", where,
                                hint="declare it, or check the name and the object type after ON", subject=written)
    wanted = RELATION_KINDS.get(st.object_type)
    if wanted is not None and target.kind != wanted:
        actual = target.kind.replace("_", " ")
        return None, Diagnostic("DSF-E307", f"'{written}' is a {actual}, not a {st.object_type.lower()}", where,
                                hint=f"write ON {actual.upper()} {written} (or ON RELATION {written})")
    return target, None


def revoke(out: AccessResult, role: str, privilege: str, target: Target, where: Location) -> None:
    """Remove the grants of `privilege` (every privilege for ALL) of `role` on the target; DSF-E304 (a warning)
    when nothing granted it before."""
    keys = [k for k, g in out.grants.items() if g.role == role and g.on == target.address
            and (privilege == "ALL" or g.privilege == privilege)]
    for key in keys:
        del out.grants[key]
    if not keys:
        out.diagnostics.append(Diagnostic(
            "DSF-E304", f"REVOKE {privilege} ON {target.address} FROM ROLE {role}: no such grant is declared before "
            "it", where, hint="files are read in path order: declare the GRANT in an earlier file or line, or "
            "remove the REVOKE", severity=Severity.WARNING))


def bind(out: AccessResult, user: str, roles: list[str], where: Location, names: set[str]) -> None:
    """Bind `roles` to `user` (DSF-E302 for an unknown role)."""
    bound, first = out.bindings.get(user, ([], where))
    for role in roles:
        if role not in names:
            out.diagnostics.append(unknown_role(role, names, where, f"user '{user}'"))
        elif role not in bound:
            bound.append(role)
    out.bindings[user] = (bound, first)


def unbind(out: AccessResult, user: str, role: str, where: Location) -> None:
    """REVOKE ROLE ... FROM USER: DSF-E305 (a warning) when the role was not bound to the user before."""
    bound, _ = out.bindings.get(user, ([], where))
    if role in bound:
        bound.remove(role)
        return
    out.diagnostics.append(Diagnostic(
        "DSF-E305", f"REVOKE ROLE {role} FROM USER {user}: the role is not bound to the user before it", where,
        hint="files are read in path order: bind it earlier (users: in YAML, or GRANT ROLE ... TO USER), or remove "
             "the REVOKE", severity=Severity.WARNING))


def apply_statement(out: AccessResult, st: AccessStatement, names: set[str], resolve: Resolve) -> None:
    """One SQL access statement, in file order."""
    if st.action == "create_role":
        return
    if st.role not in names:
        what = {"grant": "GRANT", "revoke": "REVOKE"}.get(st.action, st.action.replace("_", " ").upper())
        out.diagnostics.append(unknown_role(st.role, names, st.location, what))
        return
    if st.action == "grant_role":
        bind(out, st.user, [st.role], st.location, names)
        return
    if st.action == "revoke_role":
        unbind(out, st.user, st.role, st.location)
        return
    target, problem = sql_target(st, resolve)
    if target is None:
        assert problem is not None  # no target: the reason why
        out.diagnostics.append(problem)
        return
    for privilege, where in st.privileges:
        problem = check_privilege(privilege, target, where)
        if problem is not None:
            out.diagnostics.append(problem)
        elif st.action == "grant":
            grant = Grant(role=st.role, privilege=privilege, on=target.address, location=where)
            out.grants.setdefault(grant.key, grant)
        else:
            revoke(out, st.role, privilege, target, where)


def check_owners(owned: list[tuple[str, str, str | None, Location | None]], names: set[str]) -> list[Diagnostic]:
    """DSF-E306 for each object (what, name, owner, where) whose owner is no declared or built-in role."""
    return [Diagnostic("DSF-E306", f"{what} '{name}' is owned by unknown role '{owner}'", where,
                       hint=did_you_mean(owner, names) or "declare the role under roles: or with CREATE ROLE")
            for what, name, owner, where in owned if owner is not None and owner not in names]


YamlGrant = tuple[str, str, str, Location]
"""(role, privilege as written, on as written, where) of a YAML role's grants: entry."""
YamlUser = tuple[str, tuple[str, ...], Location]
"""(user, roles, where) of a YAML users: entry."""


def resolve_access(yaml_roles: list[Role], yaml_grants: list[YamlGrant], yaml_users: list[YamlUser],
                   statements: list[AccessStatement], order: dict[str, int], known: dict[str, str],
                   qualify: Callable[[tuple[str, ...]], str]) -> AccessResult:
    """Roles, grants and bindings of the YAML entries and SQL statements, applied in file order (then line and
    column): a REVOKE removes only what was declared before it. `known`: address -> kind of every object
    ('stream', 'database', ...); `qualify`: relation or query name parts -> db.schema.name."""
    out = AccessResult()
    names = declared_roles(yaml_roles, statements, out)
    resolver = Resolver(known, qualify)
    events: list[tuple[tuple, AccessStatement | YamlGrant | YamlUser]] = [
        ((order.get(s.location.file, 0), s.location.line, s.location.col), s) for s in statements]
    events += [((order.get(g[3].file, 0), g[3].line, g[3].col), g) for g in yaml_grants]
    events += [((order.get(u[2].file, 0), u[2].line, u[2].col), u) for u in yaml_users]
    seen_users: dict[str, Location] = {}
    for _, event in sorted(events, key=lambda item: item[0]):
        if isinstance(event, AccessStatement):
            apply_statement(out, event, names, resolver.sql)
        elif len(event) == 3:
            user, roles, where = event
            if user in seen_users:
                out.diagnostics.append(Diagnostic("DSF-E020", f"user '{user}' is defined twice", where,
                                                  hint=f"first defined at {seen_users[user]}"))
                continue
            seen_users[user] = where
            bind(out, user, list(roles), where, names)
        else:
            _yaml_grant(out, event, resolver)
    return out


@dataclass(frozen=True)
class Resolver:
    """Finds the object a grant names among the project's objects."""

    known: dict[str, str]
    qualify: Callable[[tuple[str, ...]], str]

    def _found(self, address: str) -> Target | None:
        kind = self.known.get(address)
        return Target(address, kind) if kind is not None else None

    def yaml(self, on: str) -> Target | None:
        """`on:` of a YAML grant: 'organization', an address, or a relation name (qualified by the defaults)."""
        if on == ORGANIZATION:
            return Target(ORGANIZATION, ORGANIZATION)
        if on in self.known:
            return self._found(on)
        kind, _, rest = on.partition(".")
        if kind in ("relation", "query") and rest:
            return self._found(f"{kind}.{self.qualify(tuple(rest.split('.')))}")
        return self._found(f"relation.{self.qualify(tuple(on.split('.')))}")

    def sql(self, written: str, parts: tuple[str, ...]) -> Target | None:
        """ON <type> <name> of a GRANT or REVOKE statement."""
        kind = OBJECT_TYPES.get(written)
        if kind == ORGANIZATION:
            return Target(ORGANIZATION, ORGANIZATION)
        if kind in ("relation", "query"):
            return self._found(f"{kind}.{self.qualify(parts)}")
        if kind == "schema" and len(parts) < 3:
            return self._found(f"schema.{self.qualify((*parts, '_')).rsplit('.', 1)[0]}")
        return self._found(f"{kind}.{'.'.join(parts)}") if kind else None


def _yaml_grant(out: AccessResult, entry: YamlGrant, resolver: Resolver) -> None:
    role, privilege, on, where = entry
    target = resolver.yaml(on)
    if target is None:
        out.diagnostics.append(Diagnostic("DSF-E071", f"grant on unknown object '{on}'", where,
                                          hint=did_you_mean(on, resolver.known) or "an address such as database.db, "
                                          "schema.db.s, store.k, query.db.s.q, organization, or a relation name",
                                          subject=on))
        return
    problem = check_privilege(privilege.upper(), target, where)
    if problem is not None:
        out.diagnostics.append(problem)
        return
    grant = Grant(role=role, privilege=privilege.upper(), on=target.address, location=where)
    out.grants.setdefault(grant.key, grant)
