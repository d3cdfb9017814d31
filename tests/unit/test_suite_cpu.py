"""bench/suite_cpu.py, the plugin that measured each test's CPU for docs/testing.md: it counts a test's child
processes, not only the worker's own time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
TESTS = """\
import subprocess, sys

def test_idle():
    pass

def test_a_child_that_burns_cpu():
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.5\\n"
                    "while time.process_time() < end: pass"], check=True)
"""


def test_each_test_is_charged_the_cpu_of_the_processes_it_started(tmp_path):
    (tmp_path / "test_sample.py").write_text(TESTS)
    out = tmp_path / "cpu.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")]),
           "DSFLOW_SUITE_CPU": str(out)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_cpu", "-n", "0", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_sample.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line["id"].split("::")[1]: line for line in map(json.loads, out.read_text().splitlines())}
    assert set(lines) == {"test_idle", "test_a_child_that_burns_cpu"}
    assert lines["test_a_child_that_burns_cpu"]["cpu"] >= 0.5 > lines["test_idle"]["cpu"]
