"""The Spark session's Python processes import the installed, byte-compiled PySpark, not pyspark.zip
(dsflow/adapters/spark/session.py, worker_python): checked in the real processes of the shared session. Its
checkpoints are written through Hadoop's FileSystem API (CHECKPOINT_FILES); that stateful queries still resume
exactly from them, even after a kill, is tests/e2e/test_stateful_kill.py. Its Python processes talk to the JVM over
Unix domain sockets."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyspark

from dsflow.adapters.spark.session import CHECKPOINT_FILES, worker_python


def test_spark_python_processes_import_the_installed_pyspark(spark):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    def where(_):
        import os

        import pyspark

        return f"{pyspark.__file__}|{os.environ.get('PYTHONPATH', '')}"

    seen = spark.range(4, numPartitions=2).select(F.udf(where, StringType())("id").alias("w")).distinct().collect()
    package = str(Path(pyspark.__file__).resolve().parent)
    for row in seen:
        module, path = row.w.split("|", 1)
        assert module.startswith(package) and "pyspark.zip" not in module, module
        assert "pyspark.zip" not in path and "py4j-" not in path, path


def test_the_wrapper_drops_only_the_zips(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    wrapper = worker_python("local[2]")
    assert wrapper is not None and os.access(wrapper, os.X_OK)
    lib = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    mixed = ":".join([f"{lib}/pyspark.zip", "/opt/my lib", f"{lib}/py4j-0.10.9.9-src.zip", "/x/*.zip", ""])
    out = subprocess.run([wrapper, "-c", "import os; print(os.environ['PYTHONPATH'])"], env={**os.environ,
                         "PYTHONPATH": mixed}, capture_output=True, text=True, check=True).stdout.strip()
    assert out == "/opt/my lib:/x/*.zip"
    assert worker_python("local[2]") == wrapper  # written once


def test_no_wrapper_outside_local_mode_or_with_the_users_python(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert worker_python("spark://127.0.0.1:7077") is None
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert worker_python("local[2]") is None
    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")
    assert worker_python("local[2]") is None


def test_checkpoint_files_go_through_the_filesystem_api(spark):
    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") == CHECKPOINT_FILES
    loaded = spark._jvm.java.lang.Class.forName(CHECKPOINT_FILES)  # fails if a PySpark upgrade moved the class
    assert loaded.getName() == CHECKPOINT_FILES


def test_python_processes_talk_to_the_jvm_over_unix_sockets(spark):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    def mode(_):
        import os

        return os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "unset")

    seen = spark.range(4, numPartitions=2).select(F.udf(mode, StringType())("id").alias("m")).distinct().collect()
    assert [row.m.lower() for row in seen] == ["true"]


def _live_cmdline(process, started_after: float) -> list[str]:
    """The command line of a process started after `started_after`, or [] for an older one or one that already
    exited (a zombie not yet reaped by Spark)."""
    import psutil

    try:
        return process.cmdline() if process.create_time() >= started_after else []
    except (psutil.ZombieProcess, psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def test_a_streaming_source_runner_starts_without_pyarrow_and_numpy(spark, tmp_path):
    """Each query's Python streaming source runner (one process for the query's life) is started through
    dsflow/adapters/spark/source_runner.py, sparing it pyarrow and numpy (~40 MB RSS each); the query still reads
    and writes its rows. Seen in the runner's memory map (/proc/PID/maps)."""
    import time

    import psutil

    from dsflow.adapters.spark.warmup import NAME, WarmupSource

    spark.dataSource.register(WarmupSource)
    started = time.time()
    query = (spark.readStream.format(NAME).load().writeStream.format("memory").queryName("runner_probe")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="1 second").start())
    try:
        deadline = time.monotonic() + 120
        while not spark.sql("SELECT * FROM runner_probe").collect() and time.monotonic() < deadline:
            assert query.isActive, query.exception()
            time.sleep(0.5)
        assert [tuple(r) for r in spark.sql("SELECT id FROM runner_probe").collect()] == [(0,)]
        runners = [(p, cmdline) for p in psutil.Process().children(recursive=True)  # this query's only
                   if "python_streaming_source_runner" in " ".join(cmdline := _live_cmdline(p, started - 1))]
        assert runners and all("dsflow.adapters.spark.source_runner" in cmdline for _, cmdline in runners), \
            [cmdline for _, cmdline in runners]
        for runner, _ in runners:
            mapped = Path(f"/proc/{runner.pid}/maps").read_text()
            assert "/pyarrow/" not in mapped and "/numpy/" not in mapped, runner.pid
    finally:
        query.stop()
