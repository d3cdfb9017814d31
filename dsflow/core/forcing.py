"""Changes a user asks for by name, not by editing the project, and queries a user paused.

`plan|apply --replace QUERY` rebuilds a deployed query from scratch: a new checkpoint, its sources re-read from the
earliest offset; the plan says what it re-reads (the replay estimate of core/observing.py) and which relations receive
records again. `--reset-checkpoint QUERY` gives it a new checkpoint at its sources' end offsets, keeping what its sink
holds; the plan says what it skips, and apply needs the data-loss acknowledgement (core/safety.py). `dsflow pause`
stops a query on its checkpoint (engine/pausing.py): the plan leaves it stopped, neither drift nor a restart, and
holds its changes until `dsflow resume`.
"""

from __future__ import annotations

from collections.abc import Mapping

from dsflow.core.address import Kind
from dsflow.core.categories import Category, effect_text
from dsflow.core.changes import Action, Change, Observations, Skipped
from dsflow.core.resources import Resource
from dsflow.core.state import DeployedResource


def is_paused(deployed: DeployedResource | None) -> bool:
    """A deployed query `dsflow pause` stopped (engine/pausing.py): its checkpoint and offsets kept, not running."""
    return deployed is not None and bool(deployed.outputs.get("paused"))


def held(change: Change) -> Change:
    """A paused query is left stopped: not drift, not restarted; a change of its definition waits for resume."""
    waits = f"; its change waits for it ({change.reason})" if change.action is not Action.NOOP and not change.drift \
        else ""
    return change.model_copy(update={"action": Action.NOOP, "reason": "paused: 'dsflow resume' starts it again on "
                                     f"its checkpoint{waits}", "drift": False, "category": None, "effect": None,
                                     "estimate": None, "override": None})


def forced_change(change: Change, resource: Resource, wanted: Mapping[str, Resource], seen: Observations,
                  replace: bool, replaced: Mapping[str, str]) -> Change:
    """A deployed query's change asked for on the command line: `replace` rebuilds it from the earliest offsets (what
    it re-reads, and the relations that receive records again), else its checkpoint is reset to its sources' end
    offsets (what it skips); its project edit, if any, is applied with it. `replaced`: what the plan replaces before
    it (a source rebuilt first: what it will hold is not known, so no estimate)."""
    edit = f"; {change.reason}" if change.action is not Action.NOOP and not change.drift else ""
    common = {"action": Action.REPLACE, "override": None, "drift": False}
    if replace:
        rebuilt = any(f"relation.{s[0]}" in replaced for s in resource.data.get("sources", []))
        return change.model_copy(update={**common, "category": Category.REPLAY, "forced": "replace",
                                         "reason": f"replace asked for (--replace){edit}",
                                         "effect": effect_text(Category.REPLAY, None),
                                         "estimate": None if rebuilt else seen.estimates.get(change.address),
                                         "duplicates": duplicated(resource, wanted)})
    return change.model_copy(update={**common, "category": Category.RESET_CHECKPOINT, "forced": "reset_checkpoint",
                                     "reason": f"checkpoint reset asked for (--reset-checkpoint){edit}",
                                     "effect": effect_text(Category.RESET_CHECKPOINT, None), "estimate": None,
                                     "skips": Skipped(records=seen.skipped.get(change.address))})


def duplicated(query: Resource, wanted: Mapping[str, Resource]) -> list[str]:
    """The relations a replay of `query` writes records into again: its sink, and the sink of every query that reads
    one of those that is a stream (a changelog's upserts of the same rows end the chain)."""
    readers: dict[str, list[str]] = {}
    for resource in wanted.values():
        if resource.address.kind is Kind.QUERY:
            for source in resource.data.get("sources", []):
                readers.setdefault(source[0], []).append(resource.data.get("sink", ""))
    found: set[str] = set()
    todo = [query.data.get("sink", "")]
    while todo:
        name = todo.pop()
        relation = wanted.get(f"relation.{name}")
        if relation is None or f"relation.{name}" in found:
            continue
        found.add(f"relation.{name}")
        if relation.data.get("kind") == "stream":
            todo += readers.get(name, [])
    return sorted(found)
