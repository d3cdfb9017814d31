"""Enforced contracts at load time: `'contract' = 'enforced'` and `'version'` on a relation, and the check that
the query writing a contracted relation produces exactly its declared columns and types (docs/project.md,
"Enforced contracts"). What breaks a deployed contract is core/contracts.py's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dsflow.core.contracts import ENFORCED, model_of, same_type
from dsflow.core.model import Column, Relation
from dsflow.errors import Diagnostic, Location
from dsflow.sql.statements import RawStatement

CONTRACT = "contract"
VERSION = "version"
Report = Callable[[Diagnostic], None]


def with_contract(relation: Relation, st: RawStatement, report: Report) -> Relation:
    """`relation` with its 'contract' and 'version' (DSF-E890 for a value they do not take, DSF-E895 for a version
    its name does not carry)."""
    update: dict[str, Any] = {}
    prop = st.prop(CONTRACT)
    if prop is not None and prop.value.strip().lower() not in (ENFORCED, "none"):
        report(Diagnostic("DSF-E890", f"'{CONTRACT}' must be '{ENFORCED}' or 'none', got '{prop.value}'",
                          prop.location, hint=f"'{CONTRACT}' = '{ENFORCED}'"))
    elif prop is not None:
        update["contract"] = prop.value.strip().lower() == ENFORCED
    version = _version(st, relation, report)
    if version is not None:
        update["version"] = version
    return relation.model_copy(update=update) if update else relation


def _version(st: RawStatement, relation: Relation, report: Report) -> int | None:
    prop = st.prop(VERSION)
    if prop is None:
        return None
    text = prop.value.strip().lower().removeprefix("v")
    if not text.isdigit() or int(text) < 1:
        report(Diagnostic("DSF-E890", f"'{VERSION}' must be a whole number from 1, got '{prop.value}'", prop.location,
                          hint=f"'{VERSION}' = '2'"))
        return None
    version = int(text)
    model, named = model_of(relation.name)
    if named != version and not (version == 1 and named is None):
        report(Diagnostic("DSF-E895", f"'{relation.fqn}' is declared as version {version}, but its name does not end "
                          f"with _v{version}", prop.location,
                          hint=f"name version {version} {model}_v{version} and keep the earlier version beside it "
                               f"(version 1 may keep the name {model})"))
        return None
    return version


def check_versions(relations: Sequence[Relation], report: Report) -> None:
    """DSF-E895 for two relations declared as the same version of one model."""
    seen: dict[tuple[str, int], Relation] = {}
    for relation in relations:
        if relation.version is None:
            continue
        key = (f"{relation.fqn.rsplit('.', 1)[0]}.{model_of(relation.name)[0]}", relation.version)
        first = seen.setdefault(key, relation)
        if first is not relation:
            report(Diagnostic("DSF-E895", f"'{relation.fqn}' and '{first.fqn}' are both version {relation.version} "
                              f"of '{key[0]}'", relation.location, hint="give each version its own number"))


def check_query_contract(st: RawStatement, path: str, fqn: str, output: Sequence[Column],
                         key: Sequence[str], report: Report) -> bool:
    """A CREATE ... AS SELECT with 'contract' = 'enforced': its column list is the contract, and the SELECT must
    produce exactly those columns (any order) with those types (DSF-E891 to DSF-E894). False if it does not."""
    if not st.columns:
        made = ", ".join(f"{c.name} {c.type}" for c in output[:3]) + (", ..." if len(output) > 3 else "")
        report(Diagnostic("DSF-E891", f"'{fqn}' enforces a contract but declares no columns", st.location,
                          hint=f"list the columns the query must produce: CREATE {st.kind.upper()} {st.name[-1]} "
                               f"({made}) WITH ('{CONTRACT}' = '{ENFORCED}', ...) AS SELECT ..."))
        return False
    declared = [Column(name=c.name, type=c.type) for c in st.columns]
    where = {c.name.lower(): c.location for c in st.columns}
    fits = _columns_fit(st, path, fqn, declared, output, where, report)
    if st.primary_key and [k.lower() for k in st.primary_key] != [k.lower() for k in key]:
        report(Diagnostic("DSF-E894", f"'{fqn}' declares PRIMARY KEY ({', '.join(st.primary_key)}) but its query is "
                          f"keyed by ({', '.join(key)})", st.location,
                          hint="declare the key the query makes (its GROUP BY columns, or its source's key)"))
        fits = False
    return fits


def check_insert_contract(st: RawStatement, path: str, sink: Relation, output: Sequence[Column],
                          report: Report) -> bool:
    """INSERT INTO a relation with 'contract' = 'enforced': its declared columns are the contract; the names are
    DSF-E043's, the types DSF-E893's."""
    return _columns_fit(st, path, sink.fqn, list(sink.columns), output, {}, report)


def _columns_fit(st: RawStatement, path: str, fqn: str, declared: Sequence[Column], output: Sequence[Column],
                 where: dict[str, Location], report: Report) -> bool:
    produced = {c.name.lower(): c for c in output}
    promised = {c.name.lower() for c in declared}
    fits = True
    for column in declared:
        got = produced.get(column.name.lower())
        if got is None:
            report(Diagnostic("DSF-E892", f"the query writing '{fqn}' does not produce contract column "
                              f"'{column.name}' {column.type}", where.get(column.name.lower(), st.location),
                              hint=f"select it (… AS {column.name}), or change the contract"))
            fits = False
        elif not same_type(column.type, got.type):
            report(Diagnostic("DSF-E893", f"the query writing '{fqn}' produces '{got.name}' as {got.type}, but the "
                              f"contract says {column.type}", output_location(st, path, got.name),
                              hint=f"cast it: CAST(... AS {column.type}) AS {column.name}, or change the contract"))
            fits = False
    for column in output:
        if column.name.lower() not in promised:
            report(Diagnostic("DSF-E892", f"the query writing '{fqn}' produces '{column.name}' {column.type}, which "
                              "its contract does not declare", output_location(st, path, column.name),
                              hint="remove it from the SELECT, or add it to the contract's columns"))
            fits = False
    return fits


def output_location(st: RawStatement, path: str, name: str) -> Location:
    """Where the SELECT's result column `name` is written (of its first SELECT), else the statement's start."""
    from dsflow.sql.parse import node_location

    select = st.select
    projections = getattr(select, "selects", None) or ()
    found = next((p for p in projections if p.alias_or_name.lower() == name.lower()), None)
    return node_location(path, found, st.location) if found is not None else st.location
