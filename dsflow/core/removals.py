"""Forgetting: a deployed object a `removed:` entry takes out of dsflow's management (Terraform's `removed {}`).

The plan shows it as a forget, not a delete: its state entry goes, nothing that holds records is touched (a topic, a
stream or a table is kept with its records), and a query is stopped on its checkpoint or left running, as the entry
says (`keep_running`). Apply records what it forgot in the state (`State.forgotten`) and, for a query, in its ledger.
"""

from __future__ import annotations

from collections.abc import Mapping

from dsflow.core.address import Kind
from dsflow.core.changes import Action, Change
from dsflow.core.physical import TABLES, log_noun, physical_object
from dsflow.core.state import DeployedResource


def forget_change(address: str, kind: Kind, deployed: DeployedResource, keep_running: bool,
                  records: int | None, store_types: Mapping[str, str]) -> Change:
    """The forget of one deployed resource, with what happens to what it holds or runs."""
    common = dict(address=address, action=Action.FORGET, depends_on=deployed.depends_on, before=deployed.data)
    reason = "removed from management (a `removed:` entry)"
    if kind is Kind.QUERY:
        effect = ("left running, no longer supervised; its checkpoint is kept" if keep_running
                  else "query stopped; its checkpoint and offsets are kept on disk")
        return Change(reason=reason, effect=effect, keep_running=keep_running, **common)
    if kind is Kind.RELATION:
        table = deployed.data.get("kind") in TABLES
        noun = "table" if table else log_noun(deployed.data, store_types)
        held = f"~{records:,} {'rows' if table else 'records'} stay" if records is not None else \
            f"its {'rows' if table else 'records'} stay"
        return Change(reason=reason, physical=physical_object(deployed.data, store_types),
                      effect=f"{noun} kept, {held}; dsflow no longer manages it", **common)
    return Change(reason=reason, effect="kept as it is; dsflow no longer manages it", **common)
