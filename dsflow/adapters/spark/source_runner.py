"""Spark's Python streaming source runner, started without pyarrow and numpy.

Spark starts one `pyspark.sql.streaming.python_streaming_source_runner` process per query reading a Python data
source, for the query's whole life: the driver side of the source (its offsets, its partitions, its commits). That
module imports `records_to_arrow_batches` from `pyspark.sql.worker.plan_data_source_read`, which imports pyarrow
(and with it numpy) at its top, though the runner uses it only for a "simple" reader's prefetched rows, which
dsflow's readers never have. So each runner held ~40 MB RSS (~13 MB of it its own) of modules it did not use:
~2 GB for 50 queries (docs/benchmarks.md, "50 queries").

The worker executable (session.py, WORKER_PYTHON) runs this module in place of the runner: it puts a stand-in for
that planning module in `sys.modules`, whose `records_to_arrow_batches` imports the real one when first called (as
does asking the stand-in for anything else), then runs the runner as `__main__`, as `python -m` would. A PySpark
whose runner imports more from that module still works: it only loads pyarrow again.
"""

from __future__ import annotations

import importlib
import runpy
import sys
import types
from typing import Any

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
PLANNING = "pyspark.sql.worker.plan_data_source_read"


class _Deferred(types.ModuleType):
    """Stands for PLANNING until something of it is used."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's questions (__path__, ...) load nothing
            raise AttributeError(name)
        return getattr(_planning(), name)


def _planning() -> types.ModuleType:
    """The real planning module (imported on first use, replacing the stand-in)."""
    if isinstance(sys.modules.get(PLANNING), _Deferred):
        del sys.modules[PLANNING]
    return importlib.import_module(PLANNING)


def records_to_arrow_batches(*args: Any, **kwargs: Any) -> Any:
    return _planning().records_to_arrow_batches(*args, **kwargs)


def main(module: str = RUNNER) -> None:
    stand_in = _Deferred(PLANNING)
    stand_in.records_to_arrow_batches = records_to_arrow_batches  # type: ignore[attr-defined]  # a module's name
    sys.modules.setdefault(PLANNING, stand_in)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else RUNNER)
