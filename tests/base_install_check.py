"""CI step: `dsflow validate` on a registry-using example in a virtualenv with only the base install.

    python3 tests/base_install_check.py            # run by .ci/run

The suite runs with the test extras, which can hide a module the product imports but does not declare (certifi,
imported by confluent-kafka's registry client, once was). This makes a fresh virtualenv, installs dsflow into
it without extras, starts the dev registry (dsflow/adapters/kafka/devregistry.py, standard library only) with the
subject examples/registry_project reads its columns from (its schemas/payments-value.json), and validates that
project with the virtualenv's `dsflow`. Exit status 0 only if validate succeeds and reports no traceback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# This runs before tests/setup.sh installs anything: the registry server (standard library only) comes from this
# checkout, never from whatever dsflow the host may have installed, or not.
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.registry_server import RegistryServer  # noqa: E402

PAYMENTS = REPO / "examples" / "registry_project" / "schemas" / "payments-value.json"
"""The subject the example reads its columns from, as its README registers it."""


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="dsflow-base-install-"))
    try:
        return _check(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check(work: Path) -> int:
    """Install dsflow alone into a virtualenv in `work` and validate the registry example with it."""
    venv.create(work / "venv", with_pip=True)
    python = work / "venv" / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", str(REPO)], capture_output=True, text=True)
    if installed.returncode != 0:
        print(installed.stdout + installed.stderr, file=sys.stderr)
        return 1
    server = RegistryServer().start()
    try:
        server.registry.register("payments-value", json.loads(PAYMENTS.read_text()))
        shown = subprocess.run([str(work / "venv" / "bin" / "dsflow"),
                                "-C", str(REPO / "examples" / "registry_project"),
                                "--var", f"registry={server.url}", "validate"], capture_output=True, text=True)
    finally:
        server.stop()
    print(shown.stdout + shown.stderr)
    if shown.returncode != 0 or "Traceback" in shown.stderr:
        print(f"base install: dsflow validate failed (exit {shown.returncode})", file=sys.stderr)
        return 1
    print("base install: dsflow validate passed on examples/registry_project")
    return 0


if __name__ == "__main__":
    sys.exit(main())
