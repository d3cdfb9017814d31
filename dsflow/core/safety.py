"""What a plan may destroy: records are deleted only when the plan says so and the user allowed it.

A change that deletes or replaces a relation whose topic or table dsflow created carries `Change.destroys`
(core/plan.py): the object and the records it holds. Apply refuses the whole plan, before it touches anything,
unless each such change was acknowledged on the command line; a relation that declares
'lifecycle.prevent_destroy' = 'true' refuses even then.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsflow.core.changes import Change, DataLoss
from dsflow.core.plan import Plan
from dsflow.core.settings import changed_settings
from dsflow.core.state import State
from dsflow.errors import DsflowError


@dataclass(frozen=True)
class Allowance:
    """The data loss a user acknowledged (`--allow-destroy ADDRESS`, `--allow-data-loss`): `--auto-approve` alone
    never lets apply delete a topic or table that holds records."""

    everything: bool = False
    addresses: frozenset[str] = frozenset()
    """Resource addresses (relation.db.schema.name) or relation names (db.schema.name)."""

    def allows(self, address: str) -> bool:
        return self.everything or address in self.addresses or address.split(".", 1)[-1] in self.addresses


def _loss(change: Change) -> DataLoss:
    """What a change of `Plan.destroying` destroys: each has it."""
    assert change.destroys is not None
    return change.destroys


def check_prevented(plan: Plan) -> None:
    """DSF-E823 when the plan deletes or replaces a relation that declares 'lifecycle.prevent_destroy'."""
    prevented = [c for c in plan.destroying if _loss(c).prevented]
    if prevented:
        raise DsflowError("DSF-E823", "the plan would destroy " + ", ".join(
            f"{c.address} ({c.action.value}: {_loss(c).object})" for c in prevented)
            + ", which declares 'lifecycle.prevent_destroy' = 'true'",
            hint="undo the edit that deletes or replaces it, or set 'lifecycle.prevent_destroy' = 'false' and "
                 "apply that first")


def check_data_loss(plan: Plan, allowance: Allowance) -> None:
    """DSF-E822 unless every change that destroys records, or skips them (a reset checkpoint), was allowed; DSF-E823
    for a prevented one. `dsflow destroy` is itself the acknowledgement for its own plan (prevent_destroy still
    holds)."""
    check_prevented(plan)
    if plan.mode == "destroy":
        return
    refused = [(c.address, _destroyed(c)) for c in plan.destroying if not allowance.allows(c.address)]
    refused += [(c.address, _skipped(c)) for c in plan.changes
                if c.skips is not None and not allowance.allows(c.address)]
    refused += [(c.address, gone_text(c.estimate.gone)) for c in plan.changes
                if c.estimate is not None and any(c.estimate.gone.values()) and not allowance.allows(c.address)]
    if refused:
        raise DsflowError("DSF-E822", "the plan loses records and nothing was applied: " + "; ".join(
            f"{address} {words}" for address, words in refused),
            hint="if that is intended, apply again with " + " ".join(f"--allow-destroy {a}" for a, _ in refused)
                 + " (or --allow-data-loss)")


def _destroyed(change: Change) -> str:
    loss = _loss(change)
    held = f" holding ~{loss.records:,} records" if loss.records is not None else ""
    return f"({change.action.value}) deletes {loss.object}{held}"


def _skipped(change: Change) -> str:
    """What a reset checkpoint skips, in words (`Change.skips`)."""
    records = change.skips.records if change.skips is not None else None
    now = f": ~{records:,} records now" if records is not None else ""
    return f"(--reset-checkpoint) never reads what its sources hold past its last committed batch{now}"


def gone_text(gone: dict[str, int]) -> str:
    """What a replay cannot re-read, in words: '(replay) rebuilds without ~300 records topic t no longer holds ...'."""
    lost = ", ".join(f"~{n:,} records {log} no longer holds" for log, n in sorted(gone.items()) if n)
    return f"(replay) rebuilds without {lost} (deleted since the deployed version read them)"


def check_same_logs(address: str, recorded: dict[str, str], current: dict[str, str]) -> None:
    """DSF-E824 when a source topic whose id was recorded is now another log (deleted and created again) or gone:
    offsets carried onto it would skip or misread its records."""
    changed = changed_logs(recorded, current)
    if changed:
        raise DsflowError("DSF-E824", f"{address}: the offsets to carry were read from topic(s) {', '.join(changed)} "
                          "as they were; the topic is now another log (deleted and created again) or gone, so carried "
                          "offsets would skip its records. Nothing was stopped.",
                          hint="run 'dsflow plan' again: it plans a replay from the earliest offset instead")


def changed_logs(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """The topics whose id now differs from the one recorded (or that are gone)."""
    return sorted(topic for topic, log in recorded.items() if current.get(topic) != log)


def check_partitions(plan: Plan) -> None:
    """DSF-E825 when a change lowers a topic's partition count: a broker cannot remove partitions, and recreating the
    topic under a plan that only meant to resize it would destroy its records and scatter its keys."""
    lowered = [c for c in plan.changes if c.before and c.after and c.before.get("kind") in ("stream", "changelog")
               and c.after.get("partitions", 0) < c.before.get("partitions", 0)]
    if lowered:
        raise DsflowError("DSF-E825", "a topic's partitions cannot be lowered: " + ", ".join(
            # lowered holds changes with a before and an after only
            f"{c.address} ({c.before['partitions']} -> {c.after['partitions']})"  # type: ignore[index]
            for c in lowered),
            hint="keep the partition count; to start over with fewer, remove the relation (apply with --allow-destroy) "
                 "and add it back")


TABLE_PLACE = frozenset(f"properties.{k}" for k in (
    "bucket", "prefix", "path", "catalog", "account", "database", "schema", "dsn", "host", "port", "dbname",
    "warehouse", "catalog_uri", "catalog_name", "container"))
"""Store settings that say where its tables live (a bucket, a folder, a warehouse database, a server)."""


def check_table_places(plan: Plan, state: State) -> None:
    """DSF-E830 when a store that holds deployed tables changes where they live: restarting the queries would
    write new tables elsewhere while the state, and a later destroy, still point at the old ones."""
    moved = []
    for change in plan.changes:
        deployed = state.resources.get(change.address)
        if not change.address.startswith("store.") or deployed is None or change.after_metadata is None:
            continue
        places = [n for n in changed_settings("store", deployed.metadata, change.after_metadata) if n in TABLE_PLACE]
        store = change.address[len("store."):]
        tables = sorted(k for k, v in state.resources.items() if k.startswith("relation.") and
                        v.data.get("store") == store and v.data.get("kind") in ("table", "materialized_view"))
        if places and tables:
            moved.append(f"store '{store}' ({', '.join(places)}) holding {', '.join(tables)}")
    if moved:
        raise DsflowError("DSF-E830", "a store's tables cannot be moved by changing where the store points: "
                          + "; ".join(moved),
                          hint="keep the store's place and declare a new store for the new one; point the tables at "
                               "it (a planned replace, with --allow-destroy) or copy them there and adopt them")
