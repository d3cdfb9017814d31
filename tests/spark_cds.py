"""A class-data-sharing archive of the Spark driver's classes, so the suite's many driver JVMs start on less CPU.

A cold local[2] SparkSession cost ~32 s of JVM CPU here, ~18 s with the JIT's first tier only (JVM_OPTS), and
~9-10 s with this archive besides (docs/testing.md, "The suite's time"). On a 2-core machine that CPU
is the suite's time.

    python3 tests/spark_cds.py      # tests/setup.sh: writes the archive once per Java and pyspark, if missing
    driver_java_options()           # conftest: the JVM options of every Spark driver the tests start

The archive is a cache (~150 MB under ~/.cache/dsflow): Java ignores one that does not match its version or the
driver's class path, and the suite then runs as it would without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

JVM_OPTS = "-XX:TieredStopAtLevel=1"
"""C1 only: a test's driver lives for seconds, and C2's compile threads on 2 cores about double a session's start;
behaviour is the same, only peak throughput is lower, which benchmarks (bench/, outside pytest) measure with
Spark's defaults."""

WORKLOAD = """
from dsflow.adapters.spark.session import build_session
spark = build_session("local[2]", "dsflow-cds", {})
spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
         .selectExpr("value % 3 AS k").groupBy("k").count()
         .writeStream.format("memory").queryName("cds").outputMode("complete").start())
query.processAllAvailable()
query.stop()
jvm = spark.sparkContext._gateway.proc
spark.stop()
jvm.stdin.close()  # the gateway JVM exits at the end of its stdin, and writes the archive as it exits
jvm.wait(120)
"""


def archive_path() -> Path:
    """Where the archive of this Java and this pyspark lives (a new one of either: another file)."""
    import pyspark

    java = Path(shutil.which("java") or "java").resolve()
    home = Path(os.environ.get("JAVA_HOME") or java.parent.parent)
    key = hashlib.sha256(f"{java}|{home}|{pyspark.__version__}|{Path(pyspark.__file__).parent}".encode()).hexdigest()
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dsflow"
    return folder / f"spark-cds-{pyspark.__version__}-{key[:12]}.jsa"


def driver_java_options() -> str:
    """JVM options of every Spark driver of the test run: the first JIT tier, and the archive when there is one."""
    archive = archive_path()
    return f"{JVM_OPTS} -XX:SharedArchiveFile={archive}" if archive.is_file() else JVM_OPTS


def write_archive() -> Path:
    archive = archive_path()
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}")
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} {JVM_OPTS}",
           "SPARK_LOCAL_IP": "127.0.0.1"}
    subprocess.run([sys.executable, "-c", WORKLOAD], env=env, check=True, timeout=600,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not partial.is_file():
        raise SystemExit(f"the JVM wrote no class-data archive at {partial}")
    partial.replace(archive)
    return archive


if __name__ == "__main__":
    print(f"Spark driver class-data archive: {write_archive()}")
