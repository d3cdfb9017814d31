"""Spark's own Kafka connector (spark-sql-kafka-0-10): its jars, resolved by Maven, for queries in real-time mode
(adapters/spark/realtime.py) and the benchmarks (bench/kafka_connector.py).

    python bench/spark_kafka.py          # resolve (first time) and print the jars, one a line

`jars()` gives the jars to put in `spark.jars` for `spark.readStream.format("kafka")` and
`.writeStream.format("kafka")`:

- **What**: `org.apache.spark:spark-sql-kafka-0-10_2.13:CONNECTOR_VERSION` and those of its runtime
  dependencies that the installed pyspark does not carry in its own `jars/` folder. Today that is the
  connector, `spark-token-provider-kafka-0-10_2.13`, `kafka-clients` and `commons-pool2` (about 10 MB).
  Maven's runtime closure also holds Spark's and Hadoop's own jars (spark-tags, scala-library,
  hadoop-client-api/-runtime, slf4j-api, lz4-java, snappy-java, ...), some in other versions than pyspark's:
  those are dropped, so the session's classpath has one copy of each, pyspark's.
- **Version**: the connector of the installed Spark is the one to use, but Maven Central serves the 2.13
  connector only up to 4.2.0 while pyspark is 4.3.0; 4.2.0 read and wrote Kafka correctly on the 4.3.0 runtime
  (availableNow, Apache Kafka 4.1.1), and `tests/integration/test_bench_connector.py` checks that on every run.
- **How**: `mvn dependency:copy-dependencies` over a generated pom, with the machine's own Maven settings and
  repositories (no repository address is written here), into `$DSFLOW_CACHE_DIR/spark-kafka-VERSION/libs`
  (default `~/.cache/dsflow`), once; a `complete` file there marks a finished resolution.
- **Offline**: `DSFLOW_SPARK_KAFKA_JARS` names a folder holding the same jars copied by hand; it is used as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dsflow.errors import DsflowError

CONNECTOR_GROUP = "org.apache.spark"
CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10_2.13"
CONNECTOR_VERSION = "4.2.0"
"""The newest 2.13 connector Maven Central serves (pyspark is 4.3.0; its connector is not published there)."""
OFFLINE_ENV = "DSFLOW_SPARK_KAFKA_JARS"

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dsflow.bench</groupId><artifactId>spark-kafka-connector</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version></dependency>
  </dependencies>
</project>
"""


class ResolveError(DsflowError):
    """The connector's jars could not be found or resolved (DSF-E874); the message says why and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__("DSF-E874", message, hint=f"install Maven (it resolves them once into the cache), or set "
                         f"{OFFLINE_ENV} to a folder of the jars")


@dataclass(frozen=True)
class Connector:
    """The jars to add to a Spark session, and the versions of the artifacts among them."""

    jars: tuple[Path, ...]
    versions: dict[str, str]
    """artifactId -> version, e.g. {"spark-sql-kafka-0-10_2.13": "4.2.0", "kafka-clients": "3.9.2"}."""

    @property
    def spark_jars(self) -> str:
        """The value of `spark.jars`."""
        return ",".join(str(j) for j in self.jars)


def home() -> Path:
    """The cache folder of this connector version (beside the dev broker's Kafka jars)."""
    from dsflow.adapters.kafka.kraft import cache_dir

    return cache_dir() / f"spark-kafka-{CONNECTOR_VERSION}"


def spark_jar_names() -> set[str]:
    """The file names in the installed pyspark's jars/ folder: what Spark already has on its classpath."""
    import pyspark

    return {p.name for p in (Path(pyspark.__file__).resolve().parent / "jars").glob("*.jar")}


def provided_by_spark(artifact: str, names: set[str]) -> bool:
    """Whether a jar of `artifact` (any version) is among `names` ("spark-tags_2.13" in "spark-tags_2.13-4.3.0.jar")."""
    prefix = artifact + "-"
    return any(n.startswith(prefix) and n[len(prefix):][:1].isdigit() for n in names)


def keep(resolved: list[tuple[str, str, Path]], names: set[str]) -> list[tuple[str, str, Path]]:
    """The (artifactId, version, jar) that Spark does not already carry."""
    return [(a, v, p) for a, v, p in resolved if not provided_by_spark(a, names)]


def jars() -> Connector:
    """The connector's jars: the offline folder if DSFLOW_SPARK_KAFKA_JARS is set, else the cache, resolved by
    Maven on first use."""
    given = os.environ.get(OFFLINE_ENV)
    if given:
        return _offline(Path(given))
    manifest = home() / "complete"
    if manifest.is_file():
        record = json.loads(manifest.read_text())
        found = tuple(Path(j) for j in record["jars"])
        if all(j.is_file() for j in found):
            return Connector(found, record["versions"])
    return _resolve()


def _offline(folder: Path) -> Connector:
    found = tuple(sorted(folder.glob("*.jar")))
    if not any(j.name.startswith(f"{CONNECTOR_ARTIFACT}-") for j in found):
        raise ResolveError(f"{OFFLINE_ENV}={folder} holds no {CONNECTOR_ARTIFACT} jar: copy there the jars "
                           f"`python bench/spark_kafka.py` lists on a machine with Maven, or unset {OFFLINE_ENV}")
    versions = {}
    for artifact in (CONNECTOR_ARTIFACT, "kafka-clients"):
        match = next((j.name for j in found if j.name.startswith(artifact + "-")), None)
        versions[artifact] = match[len(artifact) + 1:-len(".jar")] if match else "?"
    return Connector(found, versions)


def _resolve() -> Connector:
    """Maven's runtime closure of the connector into `home()/resolved` (repository layout, so every jar's
    artifactId and version are its folders), then what Spark lacks copied into `home()/libs`."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ResolveError(f"Spark's Kafka connector ({CONNECTOR_ARTIFACT} {CONNECTOR_VERSION}) is not cached in "
                           f"{home()} and Maven (mvn) is not installed: install Maven (Debian: apt-get install "
                           f"maven), or set {OFFLINE_ENV} to a folder of its jars")
    folder = home()
    resolved, libs = folder / "resolved", folder / "libs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pom.xml").write_text(POM.format(group=CONNECTOR_GROUP, artifact=CONNECTOR_ARTIFACT,
                                               version=CONNECTOR_VERSION))
    for stale in (resolved, libs):
        shutil.rmtree(stale, ignore_errors=True)
    done = subprocess.run([mvn, "-q", "-B", "-f", str(folder / "pom.xml"), "dependency:copy-dependencies",
                           f"-DoutputDirectory={resolved}", "-DincludeScope=runtime",
                           "-Dmdep.useRepositoryLayout=true"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-800:]
        raise ResolveError(f"Maven could not resolve {CONNECTOR_GROUP}:{CONNECTOR_ARTIFACT}:{CONNECTOR_VERSION} "
                           f"(mvn exited with {done.returncode}; check the network and ~/.m2/settings.xml, or set "
                           f"{OFFLINE_ENV}):\n{tail}")
    closure = [(p.parent.parent.name, p.parent.name, p) for p in sorted(resolved.rglob("*.jar"))]
    kept = keep(closure, spark_jar_names())
    if CONNECTOR_ARTIFACT not in {a for a, _, _ in kept}:
        raise ResolveError(f"Maven's output in {resolved} holds no {CONNECTOR_ARTIFACT} jar")
    libs.mkdir()
    copied = tuple(Path(shutil.copy2(p, libs / p.name)) for _, _, p in kept)
    versions = {a: v for a, v, _ in kept}
    dropped = sorted(item[2].name for item in closure if item not in kept)
    (folder / "complete").write_text(json.dumps({"jars": [str(j) for j in copied], "versions": versions,
                                                 "dropped, in pyspark's jars/": dropped}, indent=1))
    shutil.rmtree(resolved, ignore_errors=True)
    return Connector(copied, versions)
