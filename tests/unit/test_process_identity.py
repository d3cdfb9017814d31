"""A recorded PID is trusted only if its command line names this very process: the module and its own spec file.

pid_max is 32768 on the CI machine, and a test session starts hundreds of drivers: a PID recorded for one query
is reused by another query's driver. Stopping "the query's driver" must then leave the other one alone.
"""

import subprocess
import sys

from dsflow.adapters import process
from dsflow.engine.executors import DATAGEN_MODULE, DRIVER_MODULE, datagen_marker, driver_marker


def _impostor(*argv: str) -> subprocess.Popen:
    """A live process whose command line looks like another query's driver (it only sleeps)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *argv], start_new_session=True)


def test_another_querys_driver_on_a_reused_pid_is_neither_running_nor_stopped(tmp_path):
    other = _impostor(DRIVER_MODULE, str(tmp_path / "other" / "spec.json"))
    try:
        assert process.is_running(other.pid, driver_marker(tmp_path / "other"))
        assert process.is_running(other.pid, DRIVER_MODULE)  # what the module alone used to accept
        assert not process.is_running(other.pid, driver_marker(tmp_path / "mine"))
        assert process.stop(other.pid, driver_marker(tmp_path / "mine"), timeout=1) is False
        assert other.poll() is None
        assert process.stop(other.pid, driver_marker(tmp_path / "other"), timeout=5) is True
        assert other.wait(timeout=10) is not None
    finally:
        other.kill()


def test_generators_are_told_apart_by_their_progress_file(tmp_path):
    other = _impostor(DATAGEN_MODULE, "--progress-file", str(tmp_path / "b" / "progress.json"))
    try:
        assert process.is_running(other.pid, datagen_marker(tmp_path / "b"))
        assert not process.is_running(other.pid, datagen_marker(tmp_path / "a"))
        assert driver_marker(None) == (DRIVER_MODULE,)  # a state written before run_dir was recorded
    finally:
        other.kill()
        other.wait(timeout=10)
