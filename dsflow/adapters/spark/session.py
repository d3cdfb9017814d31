"""Building a SparkSession with dsflow's Python data sources registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

CHECKPOINT_FILES = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
"""How Spark writes checkpoint files (offset and commit logs, state store files): through Hadoop's FileSystem API
rather than Spark's default, its FileContext API. dsflow's checkpoints are local folders, where both write a
temporary file and rename it; but a FileContext rename made Hadoop's local file system start `readlink` ~30
times per file (no native Hadoop library: one process each, from the JVM), ~300 processes per micro-batch of a
stream-stream join; the FileSystem rename is a plain rename(2). docs/benchmarks.md, "Fourth pass"."""

BASE_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    "spark.driver.memory": "1g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILES,
    "spark.python.unix.domain.socket.enabled": "true",
}
"""Spark's settings under every dsflow query; a project's `runtime.spark_conf` overrides any of them. The JVM talks to
its Python processes (the data sources' read and write tasks, their planning) over Unix domain sockets rather than
loopback TCP: over TCP a trivial Python task took 50-65 ms, ~40 ms of it waiting (the mark of Nagle's algorithm
meeting a delayed ACK); 13-47 ms over a Unix socket (docs/benchmarks.md, "Fifth pass")."""


WORKER_PYTHON = """#!/bin/sh
# Written by dsflow (dsflow/adapters/spark/session.py). Spark starts its Python processes with pyspark.zip first
# on PYTHONPATH; Python cannot cache bytecode for a zip, so each process compiled PySpark again (~0.4 s). This
# drops the zip, so they import the same PySpark, installed and byte-compiled. A query's streaming source runner
# is started through dsflow/adapters/spark/source_runner.py, which spares it pyarrow and numpy.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    '{lib}'/pyspark.zip|'{lib}'/py4j-*-src.zip) ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
  esac
done
unset IFS
PYTHONPATH=$kept
export PYTHONPATH
if [ "$#" = 2 ] && [ "$1" = -m ] && [ "$2" = pyspark.sql.streaming.python_streaming_source_runner ]; then
  exec '{python}' -m dsflow.adapters.spark.source_runner "$2"
fi
exec '{python}' "$@"
"""


def worker_python(master: str) -> str | None:
    """The executable Spark's Python processes run with: sys.executable behind a wrapper that drops pyspark.zip
    from their path (WORKER_PYTHON). Only in local mode, with Spark from the installed pyspark package and no
    PYSPARK_PYTHON of the user's; None otherwise."""
    import hashlib
    from pathlib import Path

    import pyspark

    package = Path(pyspark.__file__).resolve().parent
    lib = package / "python" / "lib"
    home = os.environ.get("SPARK_HOME")
    if not master.startswith("local") or "PYSPARK_PYTHON" in os.environ or not (lib / "pyspark.zip").exists() \
            or (home and Path(home).resolve() != package) or "'" in f"{lib}{sys.executable}":
        return None
    text = WORKER_PYTHON.format(lib=lib, python=sys.executable)
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dsflow"  # not swept like /tmp
    path = folder / f"spark-python-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    try:
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.name}.{os.getpid()}")
            partial.write_text(text)
            partial.chmod(0o755)
            partial.replace(path)
    except OSError:
        return None  # no writable cache folder: Spark's own PYTHONPATH, slower starts
    return str(path)


def build_session(master: str, app_name: str, conf: Mapping[str, str]):
    """A SparkSession for `master` with BASE_CONF, then what a cluster master needs (cluster.py), then the
    project's conf on top."""
    from dsflow.adapters.spark.cluster import submit_conf

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if master.startswith("local"):  # Spark's Python processes run this interpreter (read by SparkContext and the JVM)
        os.environ.setdefault("PYSPARK_PYTHON", worker_python(master) or sys.executable)
    settings = {**BASE_CONF, **submit_conf(master, conf, os.environ.get("PYSPARK_PYTHON", sys.executable))}
    if not master.startswith("local") and "spark.pyspark.python" in settings:  # SparkContext reads the env
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, str(value))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    register_data_sources(session)
    return session


def register_data_sources(session) -> None:
    """The Python data sources of every store kind's `spark` facet (facets.py), each registered once."""
    from dsflow.adapters.spark.facets import all_facets

    for facet in all_facets():
        for source in facet.data_sources():
            session.dataSource.register(source)


def isolated_session(spark):
    """A session of its own on `spark`'s context (temporary views, SQL conf) with dsflow's data sources, which
    sessions do not share; made the thread's active session, as registering asks the active session whether a
    source exists."""
    session = spark.newSession()
    session._jvm.SparkSession.setActiveSession(session._jsparkSession)
    register_data_sources(session)
    return session


@contextmanager
def borrowed_session(master: str, app_name: str) -> Iterator[Any]:
    """The process's Spark session if it has one (pytest's), else a local one built for the caller and stopped after
    (a cluster master is not asked: `local[2]` then)."""
    from pyspark.sql import SparkSession

    had = SparkSession.getActiveSession() is not None
    spark = build_session(master if master.startswith("local") else "local[2]", app_name, {})
    try:
        yield spark
    finally:
        if not had:
            spark.stop()
