"""Functional project fixtures: a project is a dict of {filename: content} written to a folder.

    root = make_project(tmp_path, {"sql/sources.sql": "CREATE STREAM ..."})

A default dsflow.yml and a Kafka store (stores/kafka.yml) are added unless the dict names them;
map a filename to None to leave that file out (e.g. {"dsflow.yml": None} for a folder without one).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

from dsflow.core.plan import Action, Plan
from dsflow.core.state import DeployedResource, State

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_PROJECT = REPO / "example_project"
EXAMPLE_VARIABLES = {"bootstrap": "127.0.0.1:9092"}

DEFAULT_CONFIG = """\
name: testproj
default:
  database: analytics
  schema: public
  store: kafka_main
runtime:
  trigger_interval: 1 second
default_environment: dev
environments:
  dev:
    vars:
      bootstrap: 127.0.0.1:9092
"""

DEFAULT_STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
"""

KAFKA_KINESIS_STORES = """\
stores:
  - name: kafka_store
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
  - name: kinesis_store
    type: kinesis
    properties:
      region: us-east-1
      endpoint: "{{ var('kinesis') }}"
"""
"""A Kafka store and a Kinesis store, at the `bootstrap` and `kinesis` variables."""

DEFAULTS = {"dsflow.yml": DEFAULT_CONFIG, "stores/kafka.yml": DEFAULT_STORE}

PAGEVIEWS = """\
CREATE STREAM pageviews (
  id BIGINT,
  viewtime BIGINT,
  userid VARCHAR,
  pageid VARCHAR
) WITH (
  'topic' = 'pageviews',
  'value.format' = 'json',
  'timestamp' = 'viewtime'
);
"""


def make_project(tmp_path: Path, files: dict[str, str | None]) -> Path:
    """Write the project under tmp_path/project and return its root; contents are dedented."""
    root = tmp_path / "project"
    root.mkdir(parents=True, exist_ok=True)
    for name, content in {**DEFAULTS, **files}.items():
        if content is None:
            continue
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content))
    return root


def copy_example(tmp_path: Path) -> Path:
    """A copy of example_project without its runtime folder (.dsflow), safe to edit."""
    root = tmp_path / "example_project"
    shutil.copytree(EXAMPLE_PROJECT, root, ignore=shutil.ignore_patterns(".dsflow", "__pycache__"))
    return root


def applied(plan: Plan, state: State | None = None) -> State:
    """The State an apply of `plan` would record, built like dsflow.engine.apply._apply_one without executors."""
    state = (state or State()).with_lineage()
    for change in plan.actionable:
        if change.moved_from is not None and change.address not in state.resources:
            state = state.with_move(change.moved_from, change.address)
        if change.action in (Action.DELETE, Action.FORGET):
            state = state.without(change.address)
            continue
        state = state.with_resource(DeployedResource(
            address=change.address, depends_on=change.depends_on, data_hash=change.data_hash or "",
            metadata_hash=change.metadata_hash or "", data=change.after or {},
            metadata=change.after_metadata or {}))
    return state


def plan_from_files(root: Path, state: State, **options) -> Plan:
    """The example project at `root` planned against `state` as `dsflow plan` does with the files' `removed:` and
    `import:` entries (no refresh unless `observations` is given)."""
    from dsflow.core.plan import PlanOptions, make_plan
    from dsflow.core.resources import project_resources
    from dsflow.load.project import load_project

    project = load_project(root, variables=EXAMPLE_VARIABLES)
    return make_plan(project.name, project.environment, project_resources(project), state,
                     PlanOptions(removed={r.address: r.keep_running for r in project.removals},
                                 imports={i.address: i.id for i in project.imports},
                                 store_types={s.name: s.type for s in project.stores}, **options))
