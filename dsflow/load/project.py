"""The loader's facade: from a project folder to a resolved, validated Project.

discover files -> render templates -> parse YAML and SQL -> resolve -> validate.
Every problem found is collected; loading raises ProjectError once with all of them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dsflow.core import gcpause
from dsflow.core import stores as store_kinds
from dsflow.core.address import Address, Kind
from dsflow.core.generators import GENERATOR_NAMES
from dsflow.core.graph import Graph, has_cycle
from dsflow.core.model import BUILTIN_ROLES, Datagen, Project, Query, RuntimeSettings, StateSettings
from dsflow.core.stores import Capability
from dsflow.errors import Diagnostic, Location, ProjectError, Severity
from dsflow.load.cache import SelectCache
from dsflow.load.cleartext import clear_text_secret
from dsflow.load.consequences import Declared, fold, sql_declarations, without_template, yaml_declarations
from dsflow.load.objects import (
    YamlObjects, check_store_registries, pydantic_diagnostics, read_objects, schemas_of,
)
from dsflow.load.moves import resolve_moves
from dsflow.load.removals import resolve_imports, resolve_removals
from dsflow.load.names import check_physical_names
from dsflow.load.queries import Namespace, resolve_statements
from dsflow.load.raw import RawProjectConfig
from dsflow.load.registry import fill_columns_from_registry
from dsflow.load.render import RenderContext, render
from dsflow.sql.statements import RawStatement
from dsflow.core.suggest import did_you_mean
from dsflow.load.yamlpos import Positioned, parse_yaml

PROJECT_FILE = "dsflow.yml"
SKIP_DIRS = {".dsflow", ".git", "target", "__pycache__", ".venv"}
TESTS_DIR = "tests"
"""The project's query tests (`dsflow test`, load/unittests.py): not part of what the project declares."""


@dataclass
class LoadResult:
    """A loaded project (None if loading failed), every diagnostic, and the secrets seen."""

    project: Project | None
    diagnostics: list[Diagnostic]
    secrets: set[str] = field(default_factory=set)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.ERROR]


def load_project(root: Path, environment: str | None = None, variables: Mapping[str, Any] | None = None,
                 environ: Mapping[str, str] | None = None) -> Project:
    """Load and validate; raise ProjectError with every diagnostic if anything is wrong."""
    result = check_project(root, environment, variables, environ)
    if result.errors or result.project is None:
        raise ProjectError(diagnostics=result.diagnostics)
    return result.project


def check_project(root: Path, environment: str | None = None, variables: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> LoadResult:
    """Load and validate, returning diagnostics instead of raising."""
    loader, problems = _loader(root, environment, variables, environ)
    if loader is None:
        return LoadResult(None, problems)
    with gcpause.paused():  # see dsflow/core/gcpause.py
        project = loader.run()
    return LoadResult(project, sorted(loader.diagnostics, key=_sort_key), loader.context.secrets)


def load_settings(root: Path, environment: str | None = None, variables: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> Project:
    """The project as dsflow.yml alone declares it (name, environment, state, runtime; no store, relation or
    query): enough to find what runs and its recorded state when the rest does not validate. Raises ProjectError
    if dsflow.yml itself is wrong or its state settings do not render."""
    loader, problems = _loader(root, environment, variables, environ)
    if loader is None:
        raise ProjectError(diagnostics=problems)
    settings = loader.settings()
    if loader.diagnostics:
        raise ProjectError(diagnostics=loader.diagnostics)
    return Project(**settings, default_store=None)


def _loader(root: Path, environment: str | None, variables: Mapping[str, Any] | None,
            environ: Mapping[str, str] | None) -> tuple[_Loader | None, list[Diagnostic]]:
    """A loader for the project's environment, or the diagnostics of why dsflow.yml cannot give one."""
    root = root.resolve()
    config_path = root / PROJECT_FILE
    if not config_path.exists():
        return None, [Diagnostic("DSF-E013", f"no {PROJECT_FILE} in {root}", Location(str(config_path)),
                                 hint="run 'dsflow init' or pass -C PROJECT_DIR")]
    config, config_pos, diagnostics = _read_config(config_path)
    if config is None:
        return None, diagnostics
    env_name = environment or config.default_environment
    if env_name not in config.environments:
        return None, [Diagnostic("DSF-E014", f"unknown environment '{env_name}'", Location(PROJECT_FILE),
                                 hint=did_you_mean(env_name, config.environments))]
    values = {**config.environments[env_name].vars, **(variables or {})}
    context = RenderContext(values) if environ is None else RenderContext(values, environ=dict(environ))
    loader = _Loader(root, config, env_name, context)
    loader.config_pos = config_pos
    return loader, []


def _sort_key(diagnostic: Diagnostic) -> tuple:
    loc = diagnostic.location or Location("")
    return (loc.file, loc.line, loc.col, diagnostic.code)


def _read_config(path: Path) -> tuple[RawProjectConfig | None, Positioned | None, list[Diagnostic]]:
    text, problem = read_project_file(path, PROJECT_FILE)
    if text is None:
        assert problem is not None  # no text: the reason why
        return None, None, [problem]
    data, pos, diagnostics = parse_yaml(text, PROJECT_FILE)
    if diagnostics:
        return None, pos, diagnostics
    try:
        return RawProjectConfig.model_validate(data or {}), pos, []
    except ValidationError as err:
        return None, pos, pydantic_diagnostics(err, pos)


def read_project_file(path: Path, rel: str) -> tuple[str | None, Diagnostic | None]:
    """A project file's text, or DSF-E006 when it is no regular file (a folder, a FIFO: reading one would
    block), cannot be read or is not UTF-8."""
    try:
        if not path.is_file():
            raise OSError(f"{rel} is not a regular file")
        return path.read_text(), None
    except (OSError, UnicodeDecodeError) as err:
        return None, Diagnostic("DSF-E006", f"cannot read file: {err}", Location(rel),
                                hint="make it a readable UTF-8 text file, or move it out of the project folder")


def discover(root: Path) -> list[Path]:
    """Project files: every .yml/.yaml/.sql outside hidden and build folders, sorted; not the YAML of the top-level
    tests/ folder (`dsflow test`'s files: a .sql file there is still read, never dropped unseen)."""
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS or part.startswith(".") for part in rel.parts[:-1]) \
                or (len(rel.parts) > 1 and rel.parts[0] == TESTS_DIR and path.suffix != ".sql"):
            continue
        if path.is_file() and path.suffix in (".yml", ".yaml", ".sql") and rel.as_posix() != PROJECT_FILE:
            found.append(path)
    return found


def _parse_sql_file(text: str, path: str) -> tuple[list[RawStatement], list[Diagnostic]]:
    """sql/parse.py's parse_sql_file, imported on first use: it brings sqlglot, which a load whose files and
    SELECTs all come from the cache does not need."""
    from dsflow.sql.parse import parse_sql_file

    return parse_sql_file(text, path)


def _start_workers(files: list[tuple[str, str]], default_names: tuple[str, str]):
    """load/workers.py's Workers for these files, or None when one process loads them."""
    from dsflow.load.workers import process_count

    count = process_count(files)
    if count < 2:
        return None
    from dsflow.sql import filecache, select  # noqa: F401  imported before the fork: workers import nothing
    from dsflow.load.workers import Workers

    return Workers.start(files, count, default_names)


class _Loader:
    """One load: collects diagnostics while walking the stages."""

    def __init__(self, root: Path, config: RawProjectConfig, env_name: str, context: RenderContext):
        self.root = root
        self.config = config
        self.config_pos: Positioned | None = None
        self.env_name = env_name
        self.context = context
        self.diagnostics: list[Diagnostic] = []
        self.cache = SelectCache.for_project(root, config.state.path, env_name)  # load/cache.py; None if off
        self.workers = None
        self.order: dict[str, int] = {}
        self.unrendered: dict[str, str] = {}  # a file whose template failed -> its raw text
        self.declared: list[Declared] = []  # what the YAML files declare, read or not (load/consequences.py)
        self.existing: set[str] = set()  # the addresses of what was declared and resolved

    def report(self, diagnostic: Diagnostic) -> None:
        self.diagnostics.append(diagnostic)

    def run(self) -> Project | None:
        objects = YamlObjects()
        rendered = [(path.suffix, rel, self._render(path, rel))
                    for path, rel in ((p, p.relative_to(self.root).as_posix()) for p in discover(self.root))]
        self.order = {rel: index for index, (_, rel, _) in enumerate(rendered)}  # REVOKE follows what precedes it
        parsed = self._parse_sql([(rel, text) for suffix, rel, text in rendered
                                  if suffix == ".sql" and text is not None])
        statements: list[tuple[str, RawStatement]] = []
        for suffix, rel, text in rendered:
            if text is None:
                continue
            if suffix == ".sql":
                statements += [(rel, s) for s in parsed[rel][0]]
                self.diagnostics += parsed[rel][1]
            else:
                self._read_yaml(text, rel, objects)
        try:
            project = self._resolve(objects, statements)
        finally:
            if self.workers is not None:
                self.workers.close()
        if self.cache is not None:
            self.cache.save(self.context.secrets)
        if any(d.severity is Severity.ERROR for d in self.diagnostics):
            self._fold_consequences([(rel, text) for suffix, rel, text in rendered if suffix == ".sql"])
        return project

    def _fold_consequences(self, sql_files: list[tuple[str, str | None]]) -> None:
        """Errors that only follow from another one (an unknown store whose file failed to render, an unknown
        relation whose statement was refused) are folded under their cause (load/consequences.py)."""
        declared = list(self.declared)
        for rel, raw in self.unrendered.items():
            if not rel.endswith(".sql"):
                data, _, problems = parse_yaml(without_template(raw), rel)
                declared += [] if problems else yaml_declarations(data, functools.partial(_whole_file, rel))
        qualify = self._qualify
        for rel, text in sql_files:
            whole = text is None
            source = without_template(self.unrendered.get(rel, "")) if whole else text
            declared += sql_declarations(source or "", rel, qualify, whole_file=whole)
        fallen = [d for d in declared if d.address not in self.existing]
        if fallen:
            self.diagnostics = fold(self.diagnostics, fallen)

    def _qualify(self, parts: list[str]) -> str:
        from dsflow.load.queries import qualified_name

        return qualified_name(parts, self.config.default.database, self.config.default.schema_)

    def _parse_sql(self, files: list[tuple[str, str]]) -> dict[str, tuple[list[RawStatement], list[Diagnostic]]]:
        """Each file's statements and diagnostics: parse_sql_file, or the statements from the load cache when the
        file's text is unchanged; the files to parse are shared with forked workers when it pays (load/workers.py)."""
        parsed: dict[str, tuple[list[RawStatement], list[Diagnostic]]] = {}
        todo = []
        for rel, text in files:
            # the lambda binds this file's text and name; mypy infers no type for a lambda with defaults
            cached = (self.cache.get_file(rel, text,
                                          lambda t=text, r=rel: _parse_sql_file(t, r)[0])  # type: ignore[misc]
                      if self.cache is not None else None)
            if cached is not None:
                parsed[rel] = (cached, [])
            else:
                todo.append((rel, text))
        self.workers = _start_workers(todo, (self.config.default.database, self.config.default.schema_))
        if self.workers is not None:
            fresh = self.workers.parse()
        else:
            fresh = {rel: _parse_sql_file(text, rel) for rel, text in todo}
        for rel, text in todo:
            statements, problems = fresh[rel]
            if self.cache is not None and not problems:
                self.cache.put_file(rel, text, statements)
        return parsed | fresh

    def _render(self, path: Path, rel: str) -> str | None:
        if not _utf8_name(rel):
            self.report(Diagnostic("DSF-E200", f"the file name {ascii(rel)} is not valid UTF-8",
                                   Location(rel.encode("utf-8", "replace").decode()),
                                   hint="rename the file (names are shown in plans and state)"))
            return None
        raw, problem = read_project_file(path, rel)
        if raw is None:
            assert problem is not None  # no text: the reason why
            self.report(problem)
            return None
        text, problems = render(raw, rel, self.context)
        self.diagnostics += problems
        if text is None:
            self.unrendered[rel] = raw
        return text

    def _read_yaml(self, text: str, rel: str, objects: YamlObjects) -> None:
        data, pos, problems = parse_yaml(text, rel)
        self.diagnostics += problems
        if problems:
            return
        if data is not None and not isinstance(data, dict):
            self.report(Diagnostic("DSF-E012", "a project YAML file must be a mapping", pos.location(),
                                   hint="top-level keys: stores, databases, roles, datagen, users"))
            return
        self.diagnostics += read_objects(data, pos, self.context.secrets, objects)
        self.declared += yaml_declarations(data, pos.location)

    def _resolve(self, objects: YamlObjects, statements: list[tuple[str, RawStatement]]) -> Project | None:
        cfg = self.config
        databases, schemas = schemas_of(objects, cfg.default.database, cfg.default.schema_)
        self._check_unique("store", [(s.name, s.location) for s in objects.stores])
        self._check_unique("database", [(d.name, d.location) for d in databases])
        self._check_unique("datagen", [(g.name, g.location) for g in objects.datagens])
        self._check_unique("schema registry", [(r.name, r.location) for r in objects.schema_registries])
        self.diagnostics += check_store_registries(objects)
        stores = {s.name: s for s in objects.stores}
        default_store = cfg.default.store or (objects.stores[0].name if len(objects.stores) == 1 else None)
        statements = fill_columns_from_registry(  # the one I/O step of loading (load/registry.py)
            statements, stores, {r.name: r for r in objects.schema_registries}, default_store,
            cfg.environments[self.env_name].topic_prefix, self.report)
        if cfg.default.store and cfg.default.store not in stores:
            self.report(Diagnostic("DSF-E021", f"unknown default store '{cfg.default.store}'", Location(PROJECT_FILE),
                                   hint=did_you_mean(cfg.default.store, stores), subject=f"store.{cfg.default.store}"))
        ns = Namespace(cfg.default.database, cfg.default.schema_, default_store, {s.fqn for s in schemas}, stores,
                       self.context.secrets, cfg.runtime.trigger_interval,
                       topic_prefix=cfg.environments[self.env_name].topic_prefix, project=cfg.name,
                       environment=self.env_name, cache=self.cache, default_view_store=cfg.default.view_store,
                       workers=self.workers, functions=self._functions(statements),
                       trigger=cfg.runtime.trigger, isolation=cfg.runtime.isolation,
                       delivery_guarantee=cfg.runtime.delivery_guarantee)
        queries = resolve_statements(statements, ns, self.report)
        self._check_query_cycles(queries)
        self._check_topic_clashes(list(ns.relations.values()))
        check_physical_names(ns.relations.values(), queries, stores, self.report)  # DSF-E206..E208
        datagens = self._datagens(objects.datagens, ns)
        roles, grants, bindings = self._access(objects, statements, ns, queries, databases, schemas)
        declared = {f"relation.{r}" for r in ns.relations} | {f"query.{q.fqn}" for q in queries}
        moves, problems = resolve_moves(objects.moves, declared, ns.qualify_name)
        removals, unremovable = resolve_removals(objects.removals, declared, moves, ns.qualify_name)
        imports, unimportable = resolve_imports(objects.imports, ns.relations, ns.qualify_name, stores,
                                                   {f"query.{q.fqn}" for q in queries})
        self.diagnostics += problems + unremovable + unimportable
        self.existing = {f"relation.{r}" for r in ns.relations} | {f"store.{s}" for s in stores}
        self.existing |= {f"schema_registry.{r.name}" for r in objects.schema_registries}
        self.existing |= {f"database.{d.name}" for d in databases} | {f"schema.{s.fqn}" for s in schemas}
        self.existing |= {f"function.{name}" for name in ns.functions}
        return Project(
            **self.settings(), default_store=default_store,
            stores=tuple(objects.stores), schema_registries=tuple(objects.schema_registries),
            databases=tuple(databases), schemas=tuple(schemas),
            relations=tuple(ns.relations.values()), queries=tuple(queries), datagens=tuple(datagens),
            functions=tuple(ns.functions.values()),
            views=_views(ns),
            roles=tuple(roles), grants=tuple(grants), bindings=tuple(bindings), moves=tuple(moves),
            removals=tuple(removals), imports=tuple(imports),
        )

    def _functions(self, statements: list[tuple[str, RawStatement]]) -> dict:
        """The CREATE FUNCTIONs, checked against their Python code (load/functions.py); {} if there is none."""
        if not any(st.kind == "function" for _, st in statements):
            return {}
        from dsflow.load.functions import resolve_functions
        from dsflow.sql.functions import is_builtin

        return resolve_functions(statements, self.root, is_builtin, self.report)

    def settings(self) -> dict[str, Any]:
        """The project's fields that come from dsflow.yml alone: its name, environment, state and runtime."""
        cfg = self.config
        state_path = cfg.state.path
        return dict(
            name=cfg.name, root=str(self.root), environment=self.env_name,
            default_database=cfg.default.database, default_schema=cfg.default.schema_,
            state_path=state_path, state=self._state_settings(),
            topic_prefix=cfg.environments[self.env_name].topic_prefix,
            runtime=RuntimeSettings(**cfg.runtime.model_dump(exclude={"checkpoint_root"}),
                                    checkpoint_root=cfg.runtime.checkpoint_root or f"{state_path}/checkpoints"))

    def _access(self, objects: YamlObjects, statements: list[tuple[str, RawStatement]], ns: Namespace,
                queries: list[Query], databases: list, schemas: list) -> tuple[list, list, list]:
        """Roles, grants and user bindings (load/access.py), and the owners' roles checked (DSF-E306)."""
        from dsflow.load.access import check_owners, resolve_access
        from dsflow.load.rules import check_grants, check_store_roles
        from dsflow.load.objects import role_cycles

        known: dict[str, str] = {f"relation.{fqn}": r.kind for fqn, r in ns.relations.items()}
        known |= {f"query.{q.fqn}": "query" for q in queries} | {f"store.{s.name}": "store" for s in objects.stores}
        known |= {f"database.{d.name}": "database" for d in databases} | {f"schema.{s.fqn}": "schema" for s in schemas}
        grants = [(role.name, privilege, on, loc) for role, entries in objects.roles for privilege, on, loc in entries]
        sql = [st.extra["access"] for _, st in statements if st.kind == "access"]
        result = resolve_access([r for r, _ in objects.roles], grants, objects.users, sql, self.order, known,
                                ns.qualify_name)
        self.diagnostics += result.diagnostics + role_cycles(result.roles)
        names = {r.name for r in result.roles} | set(BUILTIN_ROLES)
        owned = [("store", s.name, s.owner, s.location) for s in objects.stores]
        owned += [("database", d.name, d.owner, d.location) for d in databases]
        owned += [("schema", s.fqn, s.owner, s.location) for s in schemas]
        owned += [(r.kind.replace("_", " "), r.fqn, r.owner, r.location) for r in ns.relations.values()]
        self.diagnostics += check_owners(owned, names) + check_store_roles(objects.stores, names)
        types = {s.name: s.type for s in objects.stores}
        self.diagnostics += check_grants(result.grants.values(), ns.relations, types)
        bindings = [b.model_copy(update={"login_password": objects.logins.get(b.user)})
                    for b in result.binding_models()]
        return result.roles, list(result.grants.values()), bindings

    def _state_settings(self) -> StateSettings:
        """The state section with its templated values rendered (a DSN password comes from env_var)."""
        raw = self.config.state
        values: dict[str, str] = {}
        for key in ("bucket", "prefix", "endpoint_url", "region", "dsn"):
            value = getattr(raw, key)
            if value is not None:
                text, problems = render(value, PROJECT_FILE, self.context)
                self.diagnostics += [replace(d, message=f"state.{key}: {d.message}", location=Location(PROJECT_FILE))
                                     for d in problems]
                if text is not None:
                    values[key] = text
                    self._refuse_clear_text(("state", key), key, text, by_name=False)
        for key, value in self.config.runtime.spark_conf.items():
            self._refuse_clear_text(("runtime", "spark_conf", key), key, value)
        return StateSettings(backend=raw.backend, path=raw.path, project=self.config.name,
                             table=raw.table or "dsflow_state", **values)

    def _refuse_clear_text(self, path: tuple[str, ...], key: str, value: str, by_name: bool = True) -> None:
        """DSF-E060 for a secret typed into dsflow.yml (the state's DSN, a Spark setting)."""
        why = clear_text_secret(key, value, self.context.secrets, by_name)
        if why:
            where = self.config_pos.location(path) if self.config_pos else Location(PROJECT_FILE)
            hint = ("render the secret part with {{ env_var('NAME') }}" if path[0] == "state" else
                    "dsflow.yml's runtime.spark_conf is not templated: give the driver the secret through its "
                    "environment (e.g. AWS_SECRET_ACCESS_KEY for s3a) or a credentials provider")
            self.report(Diagnostic("DSF-E060", f"{'.'.join(path)} is a secret written in clear text: {why}", where,
                                   hint=hint))

    def _check_unique(self, what: str, items: list[tuple[str, Location | None]]) -> None:
        seen: dict[str, Location | None] = {}
        for name, loc in items:
            if name in seen:
                self.report(Diagnostic("DSF-E020", f"{what} '{name}' is defined twice", loc,
                                       hint=f"first defined at {seen[name]}"))
            seen.setdefault(name, loc)

    def _check_topic_clashes(self, relations) -> None:
        owners: dict[tuple[str, str], str] = {}
        for relation in relations:
            key = (relation.store, relation.topic)
            if key in owners:
                self.report(Diagnostic("DSF-E023", f"relations '{owners[key]}' and '{relation.fqn}' share topic "
                                       f"'{relation.topic}' on store '{relation.store}'", relation.location,
                                       hint="give one of them its own 'topic' property"))
            owners.setdefault(key, relation.fqn)

    def _check_query_cycles(self, queries: list[Query]) -> None:
        reads = _relation_deps(queries)
        if not has_cycle(reads):  # the usual case, found on plain names without building a Graph
            return
        deps = {Address(Kind.RELATION, sink): [Address(Kind.RELATION, name) for name in sources]
                for sink, sources in reads.items()}
        for cycle in Graph.from_dependencies(deps).cycles():
            names = " -> ".join(a.name for a in cycle)
            where = next((q.location for q in queries if Address(Kind.RELATION, q.sink) in cycle), None)
            self.report(Diagnostic("DSF-E050", f"dependency cycle between relations: {names}", where,
                                   hint="a query cannot write, even indirectly, into a relation it reads"))

    def _datagens(self, gens: list[Datagen], ns: Namespace) -> list[Datagen]:
        if not gens:
            return []
        out = []
        for gen in gens:
            fqn = ns.qualify_name(gen.relation.split("."))
            if fqn not in ns.relations:
                self.report(Diagnostic("DSF-E040", f"datagen '{gen.name}' feeds unknown relation '{gen.relation}'",
                                       gen.location, subject=f"relation.{fqn}",
                                       hint=did_you_mean(gen.relation, [r.rsplit('.', 1)[-1] for r in ns.relations])))
                continue
            store = ns.stores.get(ns.relations[fqn].store)
            if store_kinds.can(store, Capability.LOGS) and not store_kinds.can(store, Capability.BROKER):
                self.report(_not_generated(gen, fqn, store))
                continue
            if gen.generator not in GENERATOR_NAMES:
                self.report(Diagnostic("DSF-E073", f"unknown generator '{gen.generator}'", gen.location,
                                       hint=did_you_mean(gen.generator, GENERATOR_NAMES)))
                continue
            out.append(gen.model_copy(update={"relation": fqn}))
        return out


def _views(ns) -> tuple:
    """The project's CREATE VIEWs (sql/views.py), () without one (sqlglot is not imported then)."""
    if not ns.views:
        return ()
    from dsflow.sql.views import view_models

    return view_models(ns.views, ns.qualify_name)


def _not_generated(gen: Datagen, fqn: str, store) -> Diagnostic:
    """DSF-E113: a generator feeds a log of a store it cannot write to (generators write to brokers only)."""
    kind = store_kinds.REGISTRY[store.type]
    brokers = [store_kinds.REGISTRY[t] for t in store_kinds.kinds_that(Capability.BROKER)]
    into = store_kinds.listing([f"{k.title} {k.log_noun}s" for k in brokers])
    return Diagnostic("DSF-E113", f"datagen '{gen.name}' feeds '{fqn}', a {kind.title} {kind.log_noun}; generators "
                      f"write to {into} only", gen.location,
                      hint=f"generate into a {store_kinds.listing([k.title for k in brokers])} stream and copy it with "
                           f"CREATE STREAM ... WITH ('store' = '<{store.type} store>') AS SELECT * FROM it")


def _whole_file(rel: str, _keys: tuple) -> Location:
    """A location that stands for a whole file (what a file whose template failed declares)."""
    return Location(rel)


def _utf8_name(rel: str) -> bool:
    """Whether a path (as the file system gave it, undecodable bytes as surrogates) is valid UTF-8."""
    try:
        rel.encode()
    except UnicodeEncodeError:
        return False
    return True


def _relation_deps(queries: list[Query]) -> dict[str, list[str]]:
    """Each relation a query writes -> the relations it reads (every relation read is a key too)."""
    deps: dict[str, list[str]] = {}
    for q in queries:
        deps.setdefault(q.sink, []).extend(s.relation for s in q.sources)
        for s in q.sources:
            deps.setdefault(s.relation, [])
    return deps
