"""Shared test infrastructure: one broker (Apache Kafka), one PostgreSQL and one Spark session per test run."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import settings

import spark_cds

# No wall-clock deadline on generated examples: under load (CI beside other work) a slow example is not a failure;
# speed is measured in bench/, never in tests.
settings.register_profile("dsflow", deadline=None)
settings.load_profile("dsflow")

os.environ.setdefault("DSFLOW_RUNTIME", "off")  # `dsflow apply` in a test starts no supervisor unless asked

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every Spark driver of the run (the session below and the drivers and hosts `dsflow apply` starts, which inherit
# the environment) compiles with C1 only and maps the class-data archive tests/setup.sh wrote (tests/spark_cds.py).
os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                      f"--driver-java-options {shlex.quote(spark_cds.driver_java_options())} pyspark-shell")
# The other JVMs of the run (Apache Kafka, spark-class's launcher, a standalone cluster's master, worker and
# executors) with C1 only as well: the broker's C2 compiles were half its CPU in an e2e file (24.8 -> 12.2 s of
# 129.5 -> 107.0 s in tests/e2e/test_e2e_example.py; docs/testing.md).
os.environ.setdefault("JDK_JAVA_OPTIONS", spark_cds.JVM_OPTS)
# Local AWS-compatible endpoints (kinesalite, moto) take any credentials; set before the Spark session starts so
# its Python workers (dsflow_kinesis reads and writes) inherit them too
for _key, _value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"),
                     ("AWS_DEFAULT_REGION", "us-east-1")):
    os.environ.setdefault(_key, _value)


def pytest_configure(config: pytest.Config) -> None:
    """In the controlling process: the run's folder of shared servers (tests/support/shared.py) and its PostgreSQL
    (tests/support/pgserver.py), before collection (test modules read its port at import) and before any pytest-xdist
    worker starts (workers inherit both through the environment)."""
    if hasattr(config, "workerinput"):
        return
    from support import pgserver
    from support import shared

    shared.begin()
    pgserver.start()  # first: its folder is the server user's, outside the run's folder (this user's, 0700)
    _temporary_files_in_the_run_folder(shared.run_dir() / "tmp")


def _temporary_files_in_the_run_folder(folder: Path) -> None:
    """Every process of the run (workers, drivers, JVMs, Spark's Python workers) keeps its temporary files in the
    run's folder, which `shared.end()` removes: a test leaves nothing in the host's /tmp, even where it kills a
    driver with SIGKILL (Spark's local folders, RocksDB working copies, extracted native libraries, the mkdtemp
    folders of tests and of dsflow itself). pytest's own tmp_path folders stay where pytest keeps and rotates them."""
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    folder.mkdir(mode=0o700, exist_ok=True)
    os.environ["TMPDIR"] = str(folder)
    os.environ["JDK_JAVA_OPTIONS"] = f"{os.environ.get('JDK_JAVA_OPTIONS', '')} -Djava.io.tmpdir={folder}".strip()
    tempfile.tempdir = None  # this process asks again


FILE_SECONDS = Path(__file__).parent / "file_seconds.json"
"""Seconds each test file took in a whole run (tests/file_seconds.py writes it from a JUnit report)."""


SERVER_FIXTURES = {"broker", "kafka_broker", "tansu_broker", "spark", "s3_endpoint", "schema_registry",
                   "azurite_endpoint", "kinesis_endpoint"}
"""A test that uses one of these is `integration` whatever its module says: the unit tier needs no server."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use a server fixture are marked `integration`. Then the slowest files first, each file's tests
    kept together and in order: pytest-xdist hands whole files (--dist loadfile) to whichever worker is free, so a
    long file started last would leave the other worker idle at the end of the run (pyproject.toml's
    `--no-loadscope-reorder` keeps xdist from ordering the files by their number of tests instead). The same order
    in every process (xdist checks that its workers collected alike)."""
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    seconds = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.is_file() else {}
    items.sort(key=lambda item: -float(seconds.get(item.nodeid.split("::", 1)[0], 0.0)))


def pytest_unconfigure(config: pytest.Config) -> None:
    """In the controlling process, after every worker ended: stop the run's shared brokers."""
    if not hasattr(config, "workerinput"):
        from support import shared

        shared.end()


@pytest.fixture(autouse=True)
def _secrets_of_this_test_only() -> Iterator[None]:
    """Forget the secret values a test registered: the process-wide registry would otherwise scrub them from the
    output of later tests (one project's env_var() bootstrap is the shared broker's address in another's)."""
    from dsflow.core import secrets

    before = secrets.registered()
    yield
    secrets.forget(secrets.registered() - before)


BROKER_KIND = os.environ.get("DSFLOW_TEST_BROKER", "kafka")
"""The broker the tests run on (`broker`): Apache Kafka, what users run; DSFLOW_TEST_BROKER=tansu runs them on
`dsflow dev up`'s JVM-free default instead. tests/support/brokers.py's `both_brokers` (the Kafka-contract subset) run on
both, `tansu_only` on tansu."""


def _shared_broker(kind: str):
    """The run's broker of `kind`, started by the first process of the run that asks (tests/support/shared.py)."""
    from support import shared

    from dsflow.adapters.kafka import devbroker

    def start(folder: Path) -> dict:
        return asdict(devbroker.start(folder, port=devbroker.free_port(), kind=kind))

    return devbroker.BrokerInfo(**shared.server(f"broker-{kind}", start))


@pytest.fixture(scope="session")
def kafka_broker():
    """The run's Apache Kafka on free loopback ports (devbroker.BrokerInfo: its listeners and TLS material)."""
    return _shared_broker("kafka")


@pytest.fixture(scope="session")
def tansu_broker():
    """A tansu broker, for the Kafka-contract subset and the tests that pin tansu's own behaviour."""
    return _shared_broker("tansu")


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> str:
    """A broker's plaintext bootstrap address: the run's BROKER_KIND, or the kind a test is parametrized with
    (tests/support/brokers.py)."""
    kind = getattr(request, "param", BROKER_KIND)
    return request.getfixturevalue("kafka_broker" if kind == "kafka" else "tansu_broker").bootstrap


@pytest.fixture(scope="session")
def spark():
    """The one Spark session of the test run (local[2]), with Spark's own Kafka connector on its class path (resolved
    by tests/setup.sh), so that bench/kafka_connector.py's smoke run needs no session of its own."""
    from dsflow.adapters.kafka.connector import jars
    from dsflow.adapters.spark.session import build_session

    session = build_session("local[2]", app_name="dsflow-tests", conf={"spark.jars": jars().spark_jars})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real moto S3 server on a free loopback port, stopped by its PID at the end; yields its URL."""
    import urllib.request

    from support.servers import local_server

    def ready(port: int) -> None:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)

    with local_server("moto", lambda port: [shutil.which("moto_server") or "moto_server", "-H", "127.0.0.1",
                                            "-p", str(port)], ready) as port:
        yield f"http://127.0.0.1:{port}"


REGISTRY_AUTH = ("dsflow-test", "registry-secret")
"""Basic-auth user and password of the `schema_registry` fixture."""


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[str]:
    """A Confluent-compatible schema registry (tests/support/registry_server.py, test infrastructure) on 127.0.0.1
    in a thread, with basic auth REGISTRY_AUTH; yields its URL."""
    from support.registry_server import RegistryServer

    server = RegistryServer(auth=REGISTRY_AUTH).start()
    yield server.url
    server.stop()


KINESALITE = Path(__file__).parent / ".node" / "node_modules" / "kinesalite"
AZURITE = Path(__file__).parent / ".node" / "node_modules" / "azurite"
AZURITE_VERSION = "3.37.0"
AZURITE_ACCOUNT = ("devstoreaccount1",
                   "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")
"""Azurite's one built-in account and its well-known key (public, in Azure's emulator docs)."""


@pytest.fixture(scope="session")
def azurite_endpoint() -> Iterator[str]:
    """A real Azurite Blob service (Azure storage emulator) on a free loopback port, in its own temp folder,
    stopped by its PID; yields the account's Blob endpoint URL (http://127.0.0.1:PORT/devstoreaccount1).

    tests/setup.sh installs azurite (AZURITE_VERSION or later: older ones ignore the `startFrom` of a blob listing,
    which delta-rs uses to find a table's newest commit) from npm into tests/.node.
    """
    from support.servers import local_server

    _require_node_module(AZURITE, "azurite")
    folder = tempfile.mkdtemp(prefix="dsflow-azurite-")

    def command(port: int) -> list[str]:
        return ["node", str(AZURITE / "dist" / "src" / "blob" / "main.js"), "--blobHost", "127.0.0.1",
                "--blobPort", str(port), "--location", folder, "--silent", "--disableTelemetry",
                "--skipApiVersionCheck", "--loose"]

    with local_server("azurite", command, timeout=60) as port:
        yield f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT[0]}"
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def kinesis_endpoint() -> Iterator[str]:
    """A real kinesalite (Kinesis API) on a free loopback port, stopped by its PID; yields its URL.

    tests/setup.sh installs kinesalite from npm into tests/.node. boto3 finds the test credentials and region set
    at the top of this file.
    """
    from support.servers import local_server

    _require_node_module(KINESALITE, "kinesalite")
    with local_server("kinesalite", lambda port: ["node", str(Path(__file__).parent / "support" / "kinesalite.js"),
                                                  str(port)]) as port:
        yield f"http://127.0.0.1:{port}"


def _require_node_module(folder: Path, name: str) -> None:
    if not folder.is_dir():
        pytest.fail(f"{name} is not installed in {folder.parent}: run tests/setup.sh (the README's test command does)")
