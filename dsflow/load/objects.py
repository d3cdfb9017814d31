"""Resolving YAML objects (stores, databases, roles, users, datagen) into core models; grants: load/access.py."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from pydantic import ValidationError

from dsflow.core import stores as store_kinds
from dsflow.core.model import Database, Datagen, Role, Schema, SchemaRegistry, Store
from dsflow.errors import Diagnostic, Location
from dsflow.load.cleartext import clear_text_secret
from dsflow.load.raw import UNION_TAGS, RawObjectsFile
from dsflow.load.tables import store_settings_diagnostics
from dsflow.load.yamlpos import Positioned

BOOTSTRAP_KEY = "bootstrap_servers"  # in Store.sensitive when the bootstrap address came from env_var


@dataclass
class YamlObjects:
    """Everything the YAML files declared, with where each came from."""

    stores: list[Store] = field(default_factory=list)
    schema_registries: list[SchemaRegistry] = field(default_factory=list)
    databases: list[tuple[Database, list[tuple[str, str | None]]]] = field(default_factory=list)
    """Each database with its schemas: (name, owner)."""
    roles: list[tuple[Role, list[tuple[str, str, Location]]]] = field(default_factory=list)
    users: list[tuple[str, tuple[str, ...], Location]] = field(default_factory=list)
    """`users:` entries: (user, roles, where)."""
    logins: dict[str, str] = field(default_factory=dict)
    """`users:` entries' login passwords (from env_var()), by user."""
    datagens: list[Datagen] = field(default_factory=list)
    moves: list[tuple[str, str, Location]] = field(default_factory=list)
    """`moved:` entries as written (from, to, where), checked by load/moves.py once the project is known."""
    removals: list[tuple[str, bool, Location]] = field(default_factory=list)
    """`removed:` entries as written (address, keep_running, where), checked by load/removals.py."""
    imports: list[tuple[str, str | None, Location]] = field(default_factory=list)
    """`import:` entries as written (to, id, where), checked by load/removals.py."""


def pydantic_diagnostics(err: ValidationError, pos: Positioned) -> list[Diagnostic]:
    out = []
    for item in err.errors():
        loc = tuple(p for p in item["loc"] if p not in UNION_TAGS)
        where = ".".join(str(p) for p in loc) or "(top level)"
        if item["type"] == "extra_forbidden":
            out.append(Diagnostic("DSF-E010", f"unknown key '{loc[-1]}' at {where}", pos.key_location(loc),
                                  hint="remove it or check its spelling in docs/project.md"))
        elif item["type"] == "missing":
            out.append(Diagnostic("DSF-E011", f"missing required key '{loc[-1]}' at {where}", pos.location(loc[:-1]),
                                  hint="add it; see docs/project.md"))
        else:
            out.append(Diagnostic("DSF-E012", f"invalid value at {where}: {item['msg']}", pos.location(loc),
                                  hint="see docs/project.md for the allowed values"))
    return out


def read_objects(data: object, pos: Positioned, secrets: set[str], into: YamlObjects) -> list[Diagnostic]:
    """Validate one YAML file's content and add its objects to `into`."""
    if data is None:
        return []
    try:
        raw = RawObjectsFile.model_validate(data)
    except ValidationError as err:
        return pydantic_diagnostics(err, pos)
    diagnostics: list[Diagnostic] = []
    for i, store in enumerate(raw.stores):
        loc = pos.location(("stores", i))
        props = {k: _text(v) for k, v in store.properties.items()}
        sensitive = frozenset(k for k, v in props.items() if _holds_secret(v, secrets))
        bootstrap = store.bootstrap_servers or ""
        if _holds_secret(bootstrap, secrets):
            sensitive |= {BOOTSTRAP_KEY}
        where = functools.partial(_property_location, pos, i)
        diagnostics += store_settings_diagnostics(store.name, store.type, bootstrap, props, loc, where)
        for key, value in [*props.items(), ("bootstrap_servers", bootstrap)]:
            why = clear_text_secret(key, value, secrets, by_name=key != "bootstrap_servers")
            if why:
                path = ("stores", i, "properties", key) if key in props else ("stores", i, key)
                diagnostics.append(Diagnostic(
                    "DSF-E060", f"secret '{key}' of store '{store.name}' is written in clear text: {why}",
                    pos.location(path), hint=f"use {{{{ env_var('{store.name.upper()}_{_env_name(key)}') }}}} "
                                             "for the secret (or the part of the value that is one)"))
        into.stores.append(Store(name=store.name, type=store.type, bootstrap_servers=bootstrap,
                                 properties=props, sensitive=sensitive, description=store.description,
                                 schema_registry=store.schema_registry, owner=store.owner, location=loc))
    for i, registry in enumerate(raw.schema_registries):
        diagnostics += _read_registry(registry, pos, ("schema_registries", i), secrets, into)
    for i, db in enumerate(raw.databases):
        schemas = [(s, None) if isinstance(s, str) else (s.name, s.owner) for s in db.schemas]
        into.databases.append((Database(name=db.name, description=db.description, owner=db.owner,
                                        location=pos.location(("databases", i))), schemas))
    for i, role in enumerate(raw.roles):
        grants = [(g.privilege.upper(), g.on, pos.location(("roles", i, "grants", j)))
                  for j, g in enumerate(role.grants)]
        into.roles.append((Role(name=role.name, inherits=tuple(role.inherits),
                                location=pos.location(("roles", i))), grants))
    into.users += [(u.name, tuple(u.roles), pos.location(("users", i))) for i, u in enumerate(raw.users)]
    diagnostics += _read_logins(raw.users, pos, secrets, into)
    into.moves += [(m.from_, m.to, pos.location(("moved", i))) for i, m in enumerate(raw.moved)]
    into.imports += [(m.to, m.id, pos.location(("import", i))) for i, m in enumerate(raw.imports)]
    into.removals += [(r.address, r.keep_running, pos.location(("removed", i))) for i, r in enumerate(raw.removed)]
    for i, gen in enumerate(raw.datagen):
        into.datagens.append(Datagen(name=gen.name, relation=gen.relation, generator=gen.generator, rate=gen.rate,
                                     count=gen.count, seed=gen.seed, location=pos.location(("datagen", i))))
    return diagnostics


def _read_logins(users, pos: Positioned, secrets: set[str], into: YamlObjects) -> list[Diagnostic]:
    """Each user's `login_password`: kept when it came from env_var(), DSF-E374 when it is written in clear text."""
    diagnostics = []
    for i, user in enumerate(users):
        if not user.login_password:
            continue
        if _holds_secret(user.login_password, secrets):
            into.logins[user.name] = user.login_password
            continue
        diagnostics.append(Diagnostic(
            "DSF-E374", f"the login password of user '{user.name}' is written in clear text",
            pos.location(("users", i, "login_password")),
            hint=f"use {{{{ env_var('{_env_name(user.name)}_LOGIN_PASSWORD') }}}} instead"))
    return diagnostics


def _property_location(pos: Positioned, index: int, key: str) -> Location | None:
    """Where the store's property `key` is written (the store's properties when it is not)."""
    return pos.location(("stores", index, "properties", key))


def _read_registry(raw, pos: Positioned, path: tuple, secrets: set[str], into: YamlObjects) -> list[Diagnostic]:
    """A schema_registries entry: its password must come from env_var() (DSF-E121)."""
    values = {"url": raw.url, "username": raw.username or "", "password": raw.password or ""}
    sensitive = frozenset(k for k, v in values.items() if v and _holds_secret(v, secrets))
    diagnostics = [Diagnostic("DSF-E060", f"the {key} of schema registry '{raw.name}' holds a secret in clear text: "
                              f"{why}", pos.location((*path, key)), hint="take the secret from env_var()")
                   for key in ("url", "username") if (why := clear_text_secret(key, values[key], secrets, False))]
    if values["password"] and "password" not in sensitive:
        diagnostics.append(Diagnostic(
            "DSF-E121", f"the password of schema registry '{raw.name}' is written in clear text",
            pos.location((*path, "password")),
            hint=f"use {{{{ env_var('{_env_name(raw.name)}_PASSWORD') }}}} instead"))
    into.schema_registries.append(SchemaRegistry(name=raw.name, **values, sensitive=sensitive,
                                                 description=raw.description, location=pos.location(path)))
    return diagnostics


def check_store_registries(objects: YamlObjects) -> list[Diagnostic]:
    """Every store's schema_registry names a declared registry, and only stores with Capability.REGISTRY have one
    (DSF-E120)."""
    from dsflow.core.suggest import did_you_mean

    names = {r.name for r in objects.schema_registries}
    out = []
    for store in objects.stores:
        if store.schema_registry is None:
            continue
        if not store_kinds.can(store, store_kinds.Capability.REGISTRY):
            kinds = store_kinds.listing(store_kinds.kinds_that(store_kinds.Capability.REGISTRY))
            out.append(Diagnostic("DSF-E120", f"store '{store.name}' is not a {kinds} store and cannot "
                                  "have a schema_registry", store.location, hint="remove schema_registry"))
        elif store.schema_registry not in names:
            out.append(Diagnostic("DSF-E120", f"store '{store.name}' names unknown schema registry "
                                  f"'{store.schema_registry}'", store.location,
                                  hint=did_you_mean(store.schema_registry, names) or
                                  "declare it under schema_registries: (name, url, username, password)",
                                  subject=f"schema_registry.{store.schema_registry}"))
    return out


def schemas_of(objects: YamlObjects, default_db: str, default_schema: str) -> tuple[list[Database], list[Schema]]:
    """Declared databases and schemas, plus the project's default ones."""
    databases = [db for db, _ in objects.databases]
    schemas = [Schema(database=db.name, name=s, owner=owner, location=db.location)
               for db, names in objects.databases for s, owner in names]
    if not any(d.name == default_db for d in databases):
        databases.append(Database(name=default_db, description="project default"))
    if not any(s.fqn == f"{default_db}.{default_schema}" for s in schemas):
        schemas.append(Schema(database=default_db, name=default_schema))
    return databases, schemas


def role_cycles(roles: list) -> list[Diagnostic]:
    """DSF-E210 for each role that inherits itself, directly or through other roles (the plan orders roles by
    what they inherit, so a cycle would have no order)."""
    from dsflow.core.graph import has_cycle, reaches

    inherits = {r.name: list(r.inherits) for r in roles}
    if not has_cycle(inherits):
        return []
    out = []
    for role in roles:
        path, seen = [role.name], set()
        while path[-1] in inherits and path[-1] not in seen:
            seen.add(path[-1])
            nxt = next((p for p in inherits[path[-1]] if p in inherits and reaches(inherits, p, role.name)), None)
            if nxt is None:
                break
            path.append(nxt)
            if nxt == role.name:
                out.append(Diagnostic("DSF-E210", f"role '{role.name}' inherits itself: {' -> '.join(path)}",
                                      role.location, hint="remove one of the 'inherits' entries of the cycle"))
                break
    return out


def _holds_secret(value: str, secrets: set[str]) -> bool:
    """True if an env_var value was rendered into `value`, alone or inside a longer text (a JAAS config)."""
    return any(secret in value for secret in secrets)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _env_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", key).upper()
