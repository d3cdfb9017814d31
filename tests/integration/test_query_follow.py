"""`dsflow query --follow` streams a continuous query's rows to the terminal until Ctrl-C, then leaves
no temporary checkpoint and no process behind. The real CLI runs in a subprocess with its own Spark.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from support.streaming import CONFIG, produce
from dsflow.adapters.kafka.admin import TopicSpec, ensure_topic
from dsflow.load.project import load_project
from support.projects import make_project

pytestmark = pytest.mark.integration

SQL = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'topic.partitions' = 2);
"""


def test_follow_prints_rows_until_ctrl_c_and_cleans_up(tmp_path, broker):
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"f{os.getpid()}_"), "sql/all.sql": SQL})
    project = load_project(root, variables={"bootstrap": broker})
    ensure_topic(broker, TopicSpec(project.relations[0].topic, 2, 1, {}))
    events = [{"id": i, "viewtime": i, "userid": f"User_{i % 3}", "pageid": f"Page_{i % 4}"} for i in range(40)]
    produce(broker, project, "pageviews", events, "userid")
    command = [sys.executable, "-m", "dsflow.cli", "-C", str(root), "--var", f"bootstrap={broker}", "query",
               "--follow", "--from", "earliest", "--json",
               "SELECT id, UPPER(userid) AS who FROM pageviews WHERE pageid = 'Page_1'"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    expected = {(e["id"], e["userid"].upper()) for e in events if e["pageid"] == "Page_1"}
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and len(lines) < len(expected) and proc.poll() is None:
        time.sleep(0.5)
    children = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    assert {(r["id"], r["who"]) for r in map(json.loads, list(lines))} == expected

    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group gets SIGINT
    assert proc.wait(timeout=60) == 0
    reader.join(timeout=5)
    stderr = proc.stderr.read()
    checkpoint = Path(re.search(r"checkpoint (\S+)\)", stderr).group(1))
    assert not checkpoint.exists(), "the temporary checkpoint was left behind"
    assert "Stopped; temporary checkpoint removed." in stderr
    assert children, "Spark's JVM was expected as a child process"
    time.sleep(1)
    assert not [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
