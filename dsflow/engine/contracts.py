"""Enforced contracts against what is deployed (core/contracts.py): the breaking changes a project makes to the
relations whose deployed version enforces a contract, as diagnostics at each relation's declaration; checked by
plan before the refresh and by validate against the state read without changes, or a saved one."""

from __future__ import annotations

from pathlib import Path

from dsflow.core.address import Address, Kind
from dsflow.core.model import Project
from dsflow.core.plan import PlanOptions
from dsflow.core.resources import project_resources
from dsflow.engine.workspace import Workspace


def check_contracts(project: Project, resources, state, targets: frozenset[str] = frozenset(),
                     excludes: frozenset[str] = frozenset()) -> None:
    """DSF-E896..E898, every one at once and before the refresh: the project breaks the enforced contract of a
    deployed relation (core/contracts.py). What --exclude leaves as deployed (and what is downstream of it), or
    --target does not reach, breaks nothing."""
    from dsflow.core.plan import wanted_resources
    from dsflow.errors import ProjectError

    skip: set[Address] = set()
    if targets or excludes:  # else nothing is skipped: no graph to build
        wanted, graph = wanted_resources(resources, PlanOptions(targets=targets))
        skip = {k for k in (r.address for r in resources) if str(k) not in wanted} if targets else set()
        for address in excludes:
            skip |= {Address.parse(address)} | set(graph.descendants(Address.parse(address)))
    found = contract_diagnostics(project, resources, state, frozenset(str(a) for a in skip))
    if found:
        raise ProjectError(diagnostics=found)


def contract_diagnostics(project: Project, resources, state, skip: frozenset[str] = frozenset()) -> list:
    """The breaking changes the project makes to deployed relations with an enforced contract, as diagnostics at
    each relation's declaration, each naming the column (or the key) and how to ship the change as a new version."""
    from dsflow.core.contracts import contract_breaks, model_of
    from dsflow.errors import Diagnostic

    desired = {str(r.address): (r.data, r.metadata) for r in resources if r.address.kind is Kind.RELATION}
    deployed = {k: (v.data, v.metadata) for k, v in state.resources.items() if k.startswith("relation.")}
    found = []
    for broken in contract_breaks(desired, deployed):
        if broken.address in skip:
            continue
        relation = project.relation(Address.parse(broken.address).name)
        name = broken.address.rsplit(".", 1)[-1]
        model, named = model_of(name)
        version = (relation.version if relation is not None else None) or named or 1
        found.append(Diagnostic(
            broken.code, f"'{Address.parse(broken.address).name}' enforces a contract and its readers rely on it as "
            f"deployed: {broken.message}", relation.location if relation is not None else None,
            hint=f"keep '{name}' as it is deployed and make the change in a new version beside it: "
                 f"CREATE ... {model}_v{version + 1} (...) WITH ('contract' = 'enforced', 'version' = '{version + 1}') "
                 f"...; move its readers over, then remove '{name}' (or drop its 'contract' first, in a plan of its "
                 "own)"))
    return found


def deployed_contracts(project: Project, saved: Path | None = None) -> list:
    """For `validate`: the breaking changes to deployed contracted relations, against the state as its backend keeps
    it (a file, an object store or a database), read without changing anything (StateBackend.peek), or against a
    state saved by `dsflow state show` (`saved`: no server is asked, as dbt's --state). A state that cannot be read
    is a warning that names its backend: no contract is compared then."""
    from dsflow.errors import Diagnostic, DsflowError, Severity

    try:
        state = saved_state(saved) if saved is not None else Workspace.of(project).state_backend().peek()
    except DsflowError as err:
        return [Diagnostic(err.code, f"the deployed state was not read, so enforced contracts were not compared with "
                           f"it: {err.message}", hint=err.hint or "compare with a saved state: dsflow state show > "
                           "state.json, then dsflow validate --state state.json", severity=Severity.WARNING)]
    if not state.resources:
        return []
    return contract_diagnostics(project, project_resources(project), state)


def saved_state(path: Path):
    """The state in a file written by `dsflow state show`; DSF-E801 if it is not one."""
    from dsflow.core.state import State
    from dsflow.errors import DsflowError

    try:
        return State.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as err:
        raise DsflowError("DSF-E801", f"{path} is not a state saved by 'dsflow state show': {err}",
                          hint="save it with: dsflow state show > state.json") from err
