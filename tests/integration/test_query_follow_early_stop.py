"""`dsflow query --follow` interrupted by Ctrl-C while it is still starting Spark (before any row): it still
exits 0 and leaves no temporary checkpoint and no process behind. (tests/integration/test_query_follow.py covers
Ctrl-C while rows stream.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.load.project import load_project
from support.projects import make_project
from support.streaming import CONFIG

pytestmark = pytest.mark.integration

SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json');
"""


def test_ctrl_c_during_startup_cleans_up(tmp_path, broker) -> None:
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"fe{os.getpid()}_"), "sql/all.sql": SQL})
    ensure_topic(broker, TopicSpec(load_project(root, variables={"bootstrap": broker}).relations[0].topic, 1, 1, {}))
    command = [sys.executable, "-m", "dsflow.cli", "-C", str(root), "--var", f"bootstrap={broker}", "query",
               "--follow", "SELECT id, LOWER(pageid) AS page FROM pageviews"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    first = proc.stderr.readline()  # "Following (checkpoint ...); press Ctrl-C to stop." comes before Spark starts
    checkpoint = Path(re.search(r"checkpoint (\S+)\)", first).group(1))
    assert checkpoint.exists()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not psutil.Process(proc.pid).children(recursive=True):
        time.sleep(0.05)  # Spark's JVM is being launched: interrupt now, in the middle of the start
    children = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    assert "Stopped; temporary checkpoint removed." in proc.stderr.read()
    assert not checkpoint.exists(), "the temporary checkpoint was left behind"
    assert proc.stdout.read() == "", "no rows were expected"
    time.sleep(1)
    assert not [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not _left_in_group(proc.pid), "a process of the command's group outlived it"


def _left_in_group(group: int) -> list[int]:
    """Processes still in the command's process group (Spark's launcher script and its JVM included)."""
    left = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return left
