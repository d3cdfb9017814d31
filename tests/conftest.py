"""Shared test infrastructure: one tansu broker and one Spark session per test run."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", shutil.which("python3") or "python3")


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """A real tansu broker on a free loopback port; yields its bootstrap address."""
    from dsflow.adapters.kafka import devbroker

    run_dir = Path(tempfile.mkdtemp(prefix="dsflow-broker-"))
    info = devbroker.start(run_dir, port=devbroker.free_port())
    yield info.bootstrap
    devbroker.stop(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def spark():
    """The one Spark session of the test run (local[2])."""
    from dsflow.adapters.spark.session import build_session

    session = build_session("local[2]", app_name="dsflow-tests", conf={})
    yield session
    session.stop()
