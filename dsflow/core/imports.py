"""Adopting what exists: an `import:` entry (Terraform's `import {}`) or `dsflow import ADDRESS ID` takes an existing
log (a topic, a stream) that a declared stream or changelog names, or an existing table a declared table names (a
store kind with Capability.IMPORT_TABLES), into the state as it is.

The refresh sees the log (its partitions or shards, engine/refresh.py `observe_logs`) or the table (its columns in
the catalog, `observe_tables`); the plan is made as if it had been deployed as the declaration with the size seen,
or with the declared columns the table has (`imported_state`), so the declaration is then compared with it by the
usual rules: the same, and the import only records it; more partitions, raised in place where the store can;
columns the table lacks at the end of the declaration, added in place; anything else, replaced. A table that cannot
take the declaration's rows as it is (`refusal`) is refused at plan time (DSF-E869), before anything is applied.
dsflow did not create it, so no plan deletes it (`created_by_dsflow: false`).

A running query (its run folder, engine/refresh.py `observe_drivers`: run by a driver of its own or as a member of a
live shared application) is taken back into a state that lost its entry as its run folder records it: the
declaration its version was started from and its driver's outputs (`_running`; a member's: its host's PID and its
application); the declaration is then compared with that by the usual categories.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from dsflow.core import stores
from dsflow.core.changes import Action, Change, Observation, Observations
from dsflow.core.physical import log_size, physical_object
from dsflow.core.resources import Resource, fingerprint
from dsflow.core.state import DeployedResource, State


def can_import(relation: Any, store: Any) -> bool:
    """Whether a declared relation can be imported: a stream or changelog (its log), or a table in a store whose
    kind reads existing tables' columns (Capability.IMPORT_TABLES)."""
    return relation.kind in ("stream", "changelog") or (
        relation.kind == "table" and stores.can(store, stores.Capability.IMPORT_TABLES))


def names_object(relation: Any, id_: str) -> bool:
    """Whether `id_` is the object the relation names: its log, or its table as DATABASE.SCHEMA.TABLE or, in the
    store's database, SCHEMA.TABLE."""
    parts = relation.topic.split(".")
    return id_ == relation.topic or (relation.kind == "table" and len(parts) == 3 and id_ == ".".join(parts[1:]))


def not_importable(text: str) -> tuple[str, str]:
    """DSF-E866's message and hint for `text`, which names no relation that can be imported."""
    where = stores.listing(stores.kinds_that(stores.Capability.IMPORT_TABLES))
    return (f"import: '{text}' is not a stream, changelog or {where} table declared in the project",
            f"declare it (CREATE STREAM|CHANGELOG, or write it with 'dsflow infer'; CREATE TABLE ... WITH ('store' = "
            f"a {where} store) AS SELECT ...), then import the log or table it names")


ADOPTED = {"created_by_dsflow": False}
"""The outputs of an imported entry until apply records what its store kind notes."""


def importable(imports: Mapping[str, str], wanted: Collection[str], state: State,
               observations: Observations) -> dict[str, Observation]:
    """Address -> what the refresh saw of every import this plan makes: declared, not deployed, its log or table
    seen to exist (a size, or columns)."""
    found = {}
    for address in sorted(imports):
        seen = observations.resources.get(address)
        if address in wanted and address not in state.resources and seen is not None and \
                (seen.size is not None or seen.columns is not None or seen.running is not None):
            found[address] = seen
    return found


def missing(imports: Mapping[str, str], wanted: Collection[str], state: State,
            observations: Observations) -> list[str]:
    """The imports that cannot be made: declared, not deployed, but no log was seen (it does not exist, or the plan
    was made without a refresh)."""
    done = importable(imports, wanted, state, observations)
    return [a for a in sorted(imports) if a in wanted and a not in state.resources and a not in done]


def imported_state(state: State, wanted: Mapping[str, Resource], seen: Mapping[str, Observation]) -> State:
    """The state as if each imported log had been deployed as declared, with the size it has, and each imported
    table with the declared columns it has (in the declaration's order and types: `refusal` checked the types)."""
    if not seen:
        return state
    resources = dict(state.resources)
    for address, observed in seen.items():
        resource = wanted[address]
        if observed.running is not None:
            resources[address] = _running(resource, observed.running)
            continue
        data = {**resource.data, **_as_seen(resource.data, observed)}
        resources[address] = DeployedResource(
            address=address, depends_on=[str(d) for d in resource.depends_on], data_hash=fingerprint(data),
            metadata_hash=resource.metadata_hash, data=data, metadata=resource.metadata, outputs=dict(ADOPTED))
    return state.model_copy(update={"resources": resources})


def _running(resource: Resource, running: Mapping[str, Any]) -> DeployedResource:
    """A running query's entry as its run folder records it: the declaration its version was started from (the
    declared one where the folder does not say: `refusal` refuses that import) and its driver's outputs."""
    recorded = running.get("data") is not None and running.get("data_hash") == running["outputs"]["version"]
    return DeployedResource(
        address=str(resource.address), depends_on=[str(d) for d in resource.depends_on],
        data_hash=running["data_hash"] if recorded else resource.data_hash,
        metadata_hash=running.get("metadata_hash") or resource.metadata_hash if recorded else resource.metadata_hash,
        data=running["data"] if recorded else resource.data,
        metadata=(running.get("metadata") or {}) if recorded else resource.metadata,
        outputs=dict(running["outputs"]))


def _as_seen(data: Mapping[str, Any], observed: Observation) -> dict[str, Any]:
    """The fields of a declaration an import takes from what exists: a log's size, or a table's columns."""
    if observed.columns is None:
        return {"partitions": observed.size}
    names = {column[0] for column in observed.columns}
    return {"columns": [list(c) for c in data.get("columns", []) if c[0] in names]}


def refusal(resource: Resource, observed: Observation) -> str | None:
    """Why an existing table cannot be imported for the declaration `resource` (DSF-E869), None if it can: its
    store's own verdict (types, key, required columns, `observed.refused`), or declared columns it lacks that are
    not all at the end of the declaration (a table gains columns at its end only: the plan would replace a table
    dsflow did not create, and so would not drop)."""
    if observed.refused is not None or observed.columns is None:
        return observed.refused  # a running query: only its store's (engine's) verdict
    names = {column[0] for column in observed.columns}
    present = [c[0] in names for c in resource.data.get("columns", [])]
    if all(present) or not any(present[present.index(False):]):
        return None
    lacking = [c[0] for c, here in zip(resource.data["columns"], present, strict=True) if not here]
    return f"it lacks the declared column(s) {', '.join(lacking)} before others it has, and columns are added at " \
           "a table's end only"


def refusals(imports: Mapping[str, str], wanted: Mapping[str, Resource], state: State,
             observations: Observations) -> dict[str, str]:
    """Address -> why, for every table this plan imports that cannot be imported as it is (DSF-E869)."""
    found = {}
    for address, observed in importable(imports, wanted, state, observations).items():
        if (why := refusal(wanted[address], observed)) is not None:
            found[address] = why
    return found


def with_import(change: Change, imports: Mapping[str, str], seen: Mapping[str, Observation],
                store_types: Mapping[str, str]) -> Change:
    """An imported resource's change says so: the import alone (a no-op apply still records), or with what the
    declaration changes in the log or table as it is."""
    if change.address not in seen or change.before is None:
        return change
    observed = seen[change.address]
    then = "matches the declaration" if change.action is Action.NOOP else change.reason
    update = {"imported": imports[change.address] or str(change.before.get("topic")),
              "reason": f"imported ({_seen_words(change.before, observed, store_types)}); {then}"}
    if change.action is Action.NOOP and observed.running is not None:
        update["effect"] = _running_effect(observed.running["outputs"])
    elif change.action is Action.NOOP:
        held = "rows" if observed.columns is not None else "records"
        update["effect"] = f"taken into the state as it is: nothing touched, its {held} kept; dsflow did not create " \
                           "it, so no plan deletes it"
    return change.model_copy(update=update)


def _running_effect(outputs: Mapping[str, Any]) -> str:
    """The data effect of taking a running query into the state as it is: nothing restarted, offsets kept."""
    if outputs.get("app"):
        return f"taken into the state as it is: nothing restarted (it and the other queries of its shared " \
               f"application {outputs['app']} run on), offsets kept on its checkpoint"
    return "taken into the state as it is: its driver runs on untouched, on its checkpoint"


def _seen_words(before: Mapping[str, Any], observed: Observation, store_types: Mapping[str, str]) -> str:
    """What an import found, in words: a log and its size, a table and its columns, a query's driver."""
    if observed.running is not None:
        return observed.detail
    where = physical_object({k: v for k, v in before.items() if k != "table_options"}, store_types)
    what = log_size(dict(before), store_types) if observed.columns is None else \
        "columns " + ", ".join(f"{name} {type_}" for name, type_ in observed.columns)
    return f"{where} exists with {what}"
