"""`dsflow dev up --registry` (issue 40, item 5): the product's schema registry runs examples/registry_project as its
README says, through the real executable; `dev down` stops it by its recorded PID."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from dsflow.adapters import process
from dsflow.adapters.kafka import devbroker, devregistry
from support.projects import REPO

EXAMPLE = REPO / "examples" / "registry_project"
pytestmark = pytest.mark.integration  # it starts the dev broker (tansu) beside the registry


def dsflow(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from dsflow.cli import main; main()", "-C", str(root), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "NO_PROXY": "*"})


def _register(url: str, schema_file: Path) -> dict:
    request = urllib.request.Request(f"{url}/subjects/payments-value/versions", data=schema_file.read_bytes(),
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as answer:
        return json.loads(answer.read())


def test_dev_registry_runs_the_registry_example(tmp_path):
    root = tmp_path / "registry_project"
    shutil.copytree(EXAMPLE, root)
    assert (root / "README.md").exists() and "dev up --registry" in (root / "README.md").read_text()
    broker_port, registry_port = devbroker.free_port(), devbroker.free_port()
    url = f"http://127.0.0.1:{registry_port}"
    variables = ["--var", f"registry={url}", "--var", f"bootstrap=127.0.0.1:{broker_port}"]
    up = dsflow(root, "dev", "up", "--port", str(broker_port), "--registry", "--registry-port", str(registry_port))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"Schema registry running at {url}" in up.stdout
        found = devregistry.read(root / ".dsflow" / "dev")
        assert found is not None and process.is_running(found.pid, devregistry._identity(root / ".dsflow" / "dev"))
        missing = dsflow(root, *variables, "validate")  # the subject is not registered yet
        assert missing.returncode == 1 and "DSF-E123" in missing.stdout + missing.stderr
        assert _register(url, root / "schemas" / "payments-value.json")["version"] == 1
        valid = dsflow(root, *variables, "validate")
        assert valid.returncode == 0, valid.stdout + valid.stderr
        assert "Schema registry running" in dsflow(root, "dev", "status").stdout
    finally:
        down = dsflow(root, "dev", "down")
    assert "Schema registry stopped." in down.stdout, down.stdout + down.stderr
    assert not process.is_running(found.pid, devregistry._identity(root / ".dsflow" / "dev"))
    assert devregistry.read(root / ".dsflow" / "dev") is None
