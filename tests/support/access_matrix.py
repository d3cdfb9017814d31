"""The generated project of tests/e2e/test_privilege_matrix.py and the reference it is checked against.

One set of declarations (stores, databases, schemas, relations, queries, roles with inheritance, grants of every
privilege type, users bound to roles, owners) writes the project's files AND feeds `Reference`: what the grants
say, computed in plain Python (not with dsflow.core.access). Version 1 is deployed; version 2, the working tree,
has one change needing each privilege a plan can ask for.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

ORG = "organization"
ORG_PRIVILEGES = ("CREATE_STORE", "CREATE_DATABASE", "CREATE_ROLE", "MANAGE_GRANTS", "MANAGE_USERS")
PRIVILEGES = {ORG: ORG_PRIVILEGES, "database": ("USAGE", "CREATE"), "schema": ("USAGE", "CREATE"),
              "store": ("USAGE",), "relation": ("SELECT", "INSERT"), "query": ("MANAGE",)}
"""Grantable privileges per object type (DeltaStream's; ALL stands for every one of its type)."""

# ---- the generated project: these declarations write the files AND feed the reference ----

STORES = {"kafka_main": None, "kafka_aux": "hr_owner"}
"""store -> declared owner (None: the default owner, sysadmin)"""
DATABASES = {"sales": (None, {"public": None, "secret": "data_owner"}), "hr": ("hr_owner", {"public": None})}
"""database -> (owner, {schema: owner})"""
RELATIONS = {  # fqn -> (kind, store, owner, the SELECT of its query or None)
    "sales.public.orders": ("stream", "kafka_main", None, None),
    "sales.public.customers": ("changelog", "kafka_main", "data_owner", None),
    "sales.secret.salaries": ("stream", "kafka_main", None, None),
    "hr.public.employees": ("stream", "kafka_aux", None, None),
    "sales.public.big_orders": ("stream", "kafka_main", None, "sales.public.orders"),
    "hr.public.emp_copy": ("stream", "kafka_aux", None, "hr.public.employees"),
}
COLUMNS = {"stream": "id BIGINT, amount BIGINT, who VARCHAR", "changelog": "id BIGINT, amount BIGINT, who VARCHAR, "
                                                                          "PRIMARY KEY (id)"}
ROLES = {  # role -> (inherits, [(privilege, on)])
    "reader": ((), [("USAGE", "database.sales"), ("USAGE", "schema.sales.public"),
                    ("SELECT", "relation.sales.public.orders")]),
    "writer": (("reader",), [("INSERT", "relation.sales.public.orders"), ("CREATE", "schema.sales.public"),
                             ("USAGE", "store.kafka_main")]),
    "half": ((), [("SELECT", "relation.sales.public.customers")]),
    "qman": ((), [("MANAGE", "query.sales.public.big_orders")]),
    "lead": (("qman", "half"), [("ALL", "schema.sales.secret"), ("USAGE", "database.sales"), ("ALL", "database.hr"),
                                ("ALL", "store.kafka_aux")]),
    "creator": ((), [("CREATE_STORE", ORG), ("CREATE_DATABASE", ORG)]),
    "sec": ((), [("CREATE_ROLE", ORG), ("MANAGE_GRANTS", ORG), ("MANAGE_USERS", ORG)]),
    "orgall": ((), [("ALL", ORG)]),
    "hrview": ((), [("USAGE", "schema.hr.public"), ("SELECT", "relation.hr.public.emp_copy")]),
    "data_owner": ((), []),
    "hr_owner": ((), []),
}
BUILTIN = {"orgadmin": ("sysadmin", "securityadmin", "useradmin"), "sysadmin": (), "securityadmin": (),
           "useradmin": (), "public": ()}
BUILTIN_GRANTS = {"sysadmin": [("CREATE_STORE", ORG), ("CREATE_DATABASE", ORG)],
                  "securityadmin": [("CREATE_ROLE", ORG), ("MANAGE_GRANTS", ORG)],
                  "useradmin": [("MANAGE_USERS", ORG)]}
PUBLIC_GRANTS = [("USAGE", "database.hr")]
"""granted to the built-in role every user has"""
USERS = {"alice": ["reader"], "wendy": ["writer"], "hal": ["half"], "quinn": ["qman"], "leo": ["lead"],
         "cora": ["creator"], "sam": ["sec"], "otto": ["orgall"], "vic": ["hrview", "reader"], "dora": ["data_owner"],
         "harry": ["hr_owner"], "root": ["orgadmin"], "sys": ["sysadmin"], "sue": ["securityadmin"]}
UNBOUND = "nobody"
"""a user of the identity store with no binding: only `public`"""


def objects() -> list[str]:
    """Every deployed object's address, and the organization."""
    found = [ORG, *(f"store.{s}" for s in STORES), *(f"database.{d}" for d in DATABASES)]
    found += [f"schema.{d}.{s}" for d, (_, schemas) in DATABASES.items() for s in schemas]
    found += [f"relation.{r}" for r in RELATIONS]
    return found + [f"query.{r}" for r, spec in RELATIONS.items() if spec[3]]


def owners() -> dict[str, str]:
    declared = {f"store.{s}": o for s, o in STORES.items() if o}
    for database, (owner, schemas) in DATABASES.items():
        declared.update({f"database.{database}": owner} if owner else {})
        declared.update({f"schema.{database}.{s}": o for s, o in schemas.items() if o})
    declared.update({f"relation.{r}": spec[2] for r, spec in RELATIONS.items() if spec[2]})
    return declared


# ---- the reference: what the grants say, in plain Python ----

@dataclass(frozen=True)
class Reference:
    """Who holds what, computed from the declarations above."""

    bindings: dict[str, list[str]]

    def roles(self, user: str) -> set[str]:
        inherits = {**BUILTIN, **{r: spec[0] for r, spec in ROLES.items()}}
        found, todo = set(), [*self.bindings.get(user, []), "public"]
        while todo:
            role = todo.pop()
            if role not in found:
                found.add(role)
                todo += inherits.get(role, ())
        return found

    def granted(self, user: str) -> set[tuple[str, str]]:
        grants = {**BUILTIN_GRANTS, "public": PUBLIC_GRANTS, **{r: spec[1] for r, spec in ROLES.items()}}
        held = {g for role in self.roles(user) for g in grants.get(role, [])}
        expanded = {(p, on) for privilege, on in held
                    for p in (PRIVILEGES[kind_of(on)] if privilege == "ALL" else (privilege,))}
        return expanded

    def owns(self, user: str, address: str) -> bool:
        """The owner of the object, or of anything it lives in (a query lives in its sink relation), is a role of
        the user."""
        if address == ORG:
            return False
        roles = self.roles(user)
        return any(owner_of(a) in roles for a in [address, *containers(address)])

    def missing(self, user: str, privilege: str, address: str) -> list[tuple[str, str]]:
        """What `user` lacks of `privilege` on `address`, with the USAGE the namespaces around it ask for."""
        if "orgadmin" in self.roles(user):
            return []
        granted = self.granted(user)
        needs = [("USAGE", a) for a in reversed(containers(address)) if kind_of(a) in ("database", "schema")
                 and kind_of(address) in ("relation", "schema")]
        needs.append((privilege, address))
        return [(p, a) for p, a in needs if not (self.owns(user, a) or (p != "OWNERSHIP" and (p, a) in granted))]

    def allowed(self, user: str, privilege: str, address: str) -> bool:
        return not self.missing(user, privilege, address)

    def visible(self, user: str, address: str) -> bool:
        """In the caller's catalog: owned, any privilege held on it or on something inside it; a query also
        when its sink relation may be read."""
        if "orgadmin" in self.roles(user) or self.owns(user, address):
            return True
        if kind_of(address) == "query":
            sink = f"relation.{address.partition('.')[2]}"
            return self.allowed(user, "MANAGE", address) or self.allowed(user, "SELECT", sink)
        return any(on == address or address in containers(on) for _, on in self.granted(user))


def owner_of(address: str) -> str:
    """Its declared owner, else the owner of what it lives in (created there by that role), else sysadmin."""
    declared = owners()
    return next((declared[a] for a in [address, *containers(address)] if a in declared), "sysadmin")


def kind_of(address: str) -> str:
    return ORG if address == ORG else address.partition(".")[0]


def containers(address: str) -> list[str]:
    """What an object lives in, nearest first: relation -> schema -> database; a query -> its sink relation."""
    kind, _, name = address.partition(".")
    parts = name.split(".")
    if kind == "query":
        sink = f"relation.{name}"  # every query here is a CREATE ... AS SELECT named after its sink
        return [sink, *containers(sink)]
    if kind == "relation":
        return [f"schema.{parts[0]}.{parts[1]}", f"database.{parts[0]}"]
    if kind == "schema":
        return [f"database.{parts[0]}"]
    return []


# ---- the files: v1 is deployed, v2 is the working tree the plans are made of ----

def config(prefix: str) -> str:
    return textwrap.dedent(f"""\
        name: privmatrix
        default:
          database: sales
          schema: public
          store: kafka_main
        default_environment: dev
        environments:
          dev:
            topic_prefix: {prefix}
            vars:
              bootstrap: 127.0.0.1:9092
        """)


def stores_yaml(extra_store: bool, sales_description: str) -> str:
    lines = ["stores:"]
    for name, owner in {**STORES, **({"kafka_new": None} if extra_store else {})}.items():
        lines += [f"  - name: {name}", "    type: kafka", "    bootstrap_servers: \"{{ var('bootstrap') }}\""]
        lines += [f"    owner: {owner}"] if owner else []
    lines.append("databases:")
    databases = {**DATABASES}
    if extra_store:  # v2: a new database and a new schema in each existing one
        databases = {"sales": (None, {**DATABASES["sales"][1], "extra": None}),
                     "hr": (DATABASES["hr"][0], {**DATABASES["hr"][1], "extra": None}),
                     "newdb": (None, {"public": None})}
    for name, (owner, schemas) in databases.items():
        lines += [f"  - name: {name}"] + ([f"    owner: {owner}"] if owner else [])
        lines += [f"    description: {sales_description}"] if name == "sales" and sales_description else []
        lines.append("    schemas:")
        lines += [f"      - {{name: {s}, owner: {o}}}" if o else f"      - {s}" for s, o in schemas.items()]
    return "\n".join(lines) + "\n"


def roles_yaml(v2: bool) -> str:
    roles = {**ROLES, **({"newrole": ((), [("USAGE", "database.sales")])} if v2 else {})}
    lines = ["roles:"]
    for name, (inherits, grants) in roles.items():
        lines += [f"  - name: {name}", f"    inherits: [{', '.join(inherits)}]", "    grants:" if grants else ""]
        lines += [f"      - {{privilege: {p}, on: {on}}}" for p, on in grants
                  if not (v2 and on.endswith(f".{DROPPED}"))]  # v2: grants on what it drops go with it
    lines += ["users:"] + [f"  - {{name: {u}, roles: [{', '.join(r)}]}}" for u, r in bindings(v2).items()]
    return "\n".join(line for line in lines if line) + "\n"


def bindings(v2: bool) -> dict[str, list[str]]:
    return {**USERS, **({"newbie": ["reader"]} if v2 else {})}


V2_RELATIONS = {"sales.public.refunds": ("stream", "kafka_main", None, None),
                "sales.secret.bonuses": ("stream", "kafka_main", None, None),
                "hr.public.reviews": ("stream", "kafka_aux", None, None),
                "sales.public.cust_copy": ("changelog", "kafka_main", None, "sales.public.customers")}
"""relations (and a query) v2 adds; v2 also drops hr.public.emp_copy and its query, and gives customers to `lead`"""
INSERT = ("sales.public.orders", "sales.secret.salaries", "query.sales.public.orders_insert_1")
"""v2's INSERT INTO query: its sink, its source, its address"""
DROPPED = "hr.public.emp_copy"
NEW_OWNER = ("sales.public.customers", "lead")
SOURCES = [r for r, spec in RELATIONS.items() if spec[3] is None]
"""the relations no query writes: v2 feeds each with a generator"""


def relations(v2: bool) -> dict[str, tuple]:
    if not v2:
        return dict(RELATIONS)
    found = {r: s for r, s in RELATIONS.items() if r != DROPPED}
    found[NEW_OWNER[0]] = (*found[NEW_OWNER[0]][:2], NEW_OWNER[1], None)
    return {**found, **V2_RELATIONS}


def sql(v2: bool) -> str:
    statements = []
    for fqn, (kind, store, owner, source) in relations(v2).items():
        topic = fqn.replace(".", "_")
        props = [f"'topic' = '{topic}'", f"'store' = '{store}'"] + ([f"'owner' = '{owner}'"] if owner else [])
        if source is None:
            props.append("'value.format' = 'json'")
            statements.append(f"CREATE {kind.upper()} {fqn} ({COLUMNS[kind]}) WITH ({', '.join(props)});")
        else:
            statements.append(f"CREATE {kind.upper()} {fqn} WITH ({', '.join(props)}) AS "
                              f"SELECT id, amount, who FROM {source};")
    statements += [f"GRANT {p} ON DATABASE {on.partition('.')[2]} TO ROLE public;" for p, on in PUBLIC_GRANTS]
    if v2:  # the grant public held is revoked; a query inserts into a deployed relation
        statements += [f"REVOKE {p} ON DATABASE {on.partition('.')[2]} FROM ROLE public;" for p, on in PUBLIC_GRANTS]
        statements.append(f"INSERT INTO {INSERT[0]} SELECT id, amount, who FROM {INSERT[1]};")
    return "\n".join(statements) + "\n"


def datagen_yaml(v2: bool) -> str:
    gens = [f"  - {{name: gen_{r.rsplit('.', 1)[1]}, relation: {r}, generator: columns, rate: 1}}" for r in SOURCES]
    return "datagen:\n" + "\n".join(gens) + "\n" if v2 else ""


def write_project(root: Path, prefix: str, v2: bool) -> None:
    files = {"dsflow.yml": config(prefix), "stores/all.yml": stores_yaml(v2, "sales data" if v2 else ""),
             "security/roles.yml": roles_yaml(v2), "sql/objects.sql": sql(v2), "stores/datagen.yml": datagen_yaml(v2)}
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content:
            path.write_text(content)
        else:
            path.unlink(missing_ok=True)
