"""The stateful processors unpickle light: Spark starts a fresh Python process per transformWithState operator at
every query start only to learn its state schema, and that process unpickles the processor and calls `init`. The
processors must bring neither pandas, sqlglot nor pydantic into it (docs/testing.md, "Where a stateful test's time
goes"): checked by unpickling each in a fresh interpreter, as Spark's pre-init worker does."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pyspark import cloudpickle

from dsflow.adapters.spark import changelog_join_state, over_state, retract_state, topn_state
from dsflow.adapters.spark.join_chain import _processor
from dsflow.adapters.spark.spec import ChainStepSpec

HEAVY = ("pandas", "sqlglot", "pydantic")
UNPICKLE = """
import pickle, sys
import pyspark.sql.streaming.transform_with_state_driver_worker  # what Spark's pre-init process runs
processor = pickle.loads(sys.stdin.buffer.read())
print(",".join(m for m in {heavy!r} if m in sys.modules))
"""


def _chain_step() -> object:
    fields = ChainStepSpec.model_fields
    values = {name: (info.default if not info.is_required() else None) for name, info in fields.items()}
    return _processor(ChainStepSpec.model_construct(**{**values, "side": "inner", "chained": False}), 1000)


@pytest.mark.parametrize("make", [
    lambda: retract_state.processors(["count_star", "min"], False)[0],
    lambda: retract_state.processors(["sum"], True)[1],
    lambda: changelog_join_state.processors("left", True)[0],
    lambda: changelog_join_state.processors("full", False)[1],
    _chain_step,
    lambda: topn_state.processor(10, [True], [False]),
    lambda: over_state.processor({"frame": "rows", "preceding": 3, "aggregates": [{"function": "sum"}]}),
], ids=["retract-by-key", "retract-by-group", "join-by-row", "join-by-key", "join-chain-step", "top-n", "over"])
def test_a_processor_unpickles_without_pandas_sqlglot_or_pydantic(make):
    done = subprocess.run([sys.executable, "-c", UNPICKLE.format(heavy=HEAVY)], input=cloudpickle.dumps(make()),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    loaded = done.stdout.decode().strip()
    allowed = {"pydantic"} if make is _chain_step else set()  # join_chain.py's module reads its spec (pydantic)
    assert set(filter(None, loaded.split(","))) <= allowed, f"the unpickled processor imported {loaded}"
