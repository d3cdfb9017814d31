"""Adopting what exists: an `import:` entry (Terraform's `import {}`) or `dsflow import ADDRESS ID` takes an existing
log (a topic, a stream) that a declared stream or changelog names into the state as it is.

The refresh sees the log (its partitions or shards, engine/refresh.py `observe_logs`); the plan is made as if that
log had been deployed as the declaration with the size seen (`imported_state`), so the declaration is then compared
with it by the usual rules: the same, and the import only records it; more partitions, raised in place where the
store can; anything else, replaced. dsflow did not create it, so no plan deletes it (`created_by_dsflow: false`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from dsflow.core.changes import Action, Change, Observations
from dsflow.core.physical import log_size, physical_object
from dsflow.core.resources import Resource, fingerprint
from dsflow.core.state import DeployedResource, State

ADOPTED = {"created_by_dsflow": False}
"""The outputs of an imported entry until apply records what its store kind notes."""


def importable(imports: Mapping[str, str], wanted: Collection[str], state: State,
               observations: Observations) -> dict[str, int]:
    """Address -> the size seen of every import this plan makes: declared, not deployed, its log seen to exist."""
    found = {}
    for address in sorted(imports):
        seen = observations.resources.get(address)
        if address in wanted and address not in state.resources and seen is not None and seen.size is not None:
            found[address] = seen.size
    return found


def missing(imports: Mapping[str, str], wanted: Collection[str], state: State,
            observations: Observations) -> list[str]:
    """The imports that cannot be made: declared, not deployed, but no log was seen (it does not exist, or the plan
    was made without a refresh)."""
    done = importable(imports, wanted, state, observations)
    return [a for a in sorted(imports) if a in wanted and a not in state.resources and a not in done]


def imported_state(state: State, wanted: Mapping[str, Resource], sizes: Mapping[str, int]) -> State:
    """The state as if each imported log had been deployed as declared, with the size it has."""
    if not sizes:
        return state
    resources = dict(state.resources)
    for address, size in sizes.items():
        resource = wanted[address]
        data = {**resource.data, "partitions": size}
        resources[address] = DeployedResource(
            address=address, depends_on=[str(d) for d in resource.depends_on], data_hash=fingerprint(data),
            metadata_hash=resource.metadata_hash, data=data, metadata=resource.metadata, outputs=dict(ADOPTED))
    return state.model_copy(update={"resources": resources})


def with_import(change: Change, imports: Mapping[str, str], sizes: Mapping[str, int],
                store_types: Mapping[str, str]) -> Change:
    """An imported resource's change says so: the import alone (a no-op apply still records), or with what the
    declaration changes in the log as it is."""
    if change.address not in sizes or change.before is None:
        return change
    where, size = physical_object(change.before, store_types), log_size(change.before, store_types)
    then = "matches the declaration" if change.action is Action.NOOP else change.reason
    update = {"imported": imports[change.address] or str(change.before.get("topic")),
              "reason": f"imported ({where} exists with {size}); {then}"}
    if change.action is Action.NOOP:
        update["effect"] = "taken into the state as it is: nothing touched, its records kept; dsflow did not create " \
                           "it, so no plan deletes it"
    return change.model_copy(update=update)
