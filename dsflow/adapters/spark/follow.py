"""`dsflow query --follow` on Spark (core/engines.py `follow`, asked by engine/adhoc.py): the checked query run in
this process, in a Spark session of its own, its micro-batches handed to a callback until it is stopped."""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsflow.adapters.spark.driver import build_dataframe
from dsflow.adapters.spark.session import build_session, isolated_session
from dsflow.adapters.spark.spec import QuerySpec, SinkSpec
from dsflow.adapters.spark.translate import chain_spec, source_specs, spark_tree, temporal_spec
from dsflow.core.engines import Rows
from dsflow.core.model import Project, Query
from dsflow.errors import DsflowError
from dsflow.sql.plan import lower


def follow(project: Project, query: Query, on_rows: Rows, stop: threading.Event,
           on_started: Callable[[Path], None] = lambda _: None) -> None:
    """Run the query until `stop` is set (or Ctrl-C), handing each micro-batch's rows to `on_rows`.

    The checkpoint is a temporary folder, removed at the end; the query runs in a session of its own, on a Spark
    context stopped (with its JVM) when no other followed query of this process uses it.
    """
    checkpoint = Path(tempfile.mkdtemp(prefix="dsflow-follow-"))
    columns = [c.name for c in query.output_columns]
    plan = lower(query, project)
    spec = QuerySpec(name="dsflow_follow", version="adhoc", master=project.runtime.spark_master,
                     spark_conf=dict(project.runtime.spark_conf), checkpoint=str(checkpoint / "ck"),
                     status_path=str(checkpoint / "status.json"), trigger_interval="1 second",
                     sources=source_specs(project, plan), select_sql=spark_tree(plan, project).sql(dialect="spark"),
                     temporal=temporal_spec(project, query), chain=chain_spec(project, plan),
                     sink=SinkSpec(topic="", client_config={}, columns=columns, kind="console",
                                   output_mode=query.output_mode))
    try:
        on_started(checkpoint)
        with _follow_session(spec.master, spec.spark_conf) as spark:
            if threading.current_thread() is threading.main_thread():  # Spark installed its own Ctrl-C handler
                signal.signal(signal.SIGINT, lambda *_: stop.set())
            _run_followed(spark, spec, query, columns, on_rows, stop)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def _run_followed(spark: Any, spec: Any, query: Query, columns: list[str], on_rows: Rows,
                  stop: threading.Event) -> None:
    frame = build_dataframe(spark, spec).select(*[f"`{c}`" for c in columns])

    def batch(df, _batch_id: int) -> None:
        rows = [tuple(r) for r in df.collect()]
        if rows:
            on_rows(columns, rows)

    running = (frame.writeStream.foreachBatch(batch).outputMode(query.output_mode)
               .option("checkpointLocation", spec.checkpoint).trigger(processingTime="1 second").start())
    try:
        while not stop.is_set() and running.isActive:
            running.awaitTermination(0.5)
    finally:
        if running.isActive:
            running.stop()
    error = running.exception()
    if error is not None:
        raise DsflowError("DSF-E723", f"the query failed: {str(error).splitlines()[0]}")


_FOLLOWING: dict[str, Any] = {"spark": None, "users": 0}
_FOLLOWING_LOCK = threading.Lock()


@contextmanager
def _follow_session(master: str, conf: dict[str, str]) -> Iterator[Any]:
    """A session of its own for one followed query, on the one Spark context of this process (`dsflow serve`
    follows several at once): the context starts with the first and stops, with its JVM, after the last."""
    with _FOLLOWING_LOCK:
        if _FOLLOWING["spark"] is None:
            _FOLLOWING["spark"] = build_session(master, "dsflow:follow", conf)
        _FOLLOWING["users"] += 1
        try:
            session = isolated_session(_FOLLOWING["spark"])
        except BaseException:
            _release_follow_session()
            raise
    try:
        yield session
    finally:
        with _FOLLOWING_LOCK:
            _release_follow_session()


def _release_follow_session() -> None:
    _FOLLOWING["users"] -= 1
    if _FOLLOWING["users"] == 0:
        spark, _FOLLOWING["spark"] = _FOLLOWING["spark"], None
        _stop_spark(spark)


def _stop_spark(spark: Any) -> None:
    if spark is None:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()
    proc = getattr(gateway, "proc", None) if gateway is not None else None
    try:
        if gateway is not None:
            gateway.shutdown()
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - last resort
                proc.kill()
        SparkContext._gateway = None
        SparkContext._jvm = None
