"""What the test session sets up on the machine before any test runs, so `python3 -m pytest` works on a fresh one.

- fakesnow (a Snowflake endpoint on DuckDB, for the Snowflake sink tests) pins an older sqlglot than dsflow's, so it
  cannot be a test extra: it is installed here without its dependencies (they are in the test extras).
- The PostgreSQL CDC tests need logical replication: wal_level=logical, which takes a server restart. Done once, before
  any test holds a connection; a server already on 'logical' is left alone.
Both steps are idempotent.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import time

FAKESNOW = "fakesnow==0.12.1"
PSQL = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc"]


def ensure_fakesnow() -> None:
    if importlib.util.find_spec("fakesnow") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", FAKESNOW], check=True)


def _psql(statement: str) -> str:
    done = subprocess.run([*PSQL, statement], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def ensure_logical_replication() -> None:
    if shutil.which("psql") is None or _psql("SHOW wal_level") in ("logical", ""):
        return
    _psql("ALTER SYSTEM SET wal_level = logical")
    _restart_postgres()
    for _ in range(60):
        if _psql("SHOW wal_level") == "logical":
            return
        time.sleep(0.5)


def _restart_postgres() -> None:
    if shutil.which("pg_lsclusters"):
        for line in subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True).stdout.splitlines():
            version, cluster, port = line.split()[:3]
            if port == "5432":
                subprocess.run(["pg_ctlcluster", version, cluster, "restart"], check=True)
        return
    data = _psql("SHOW data_directory")
    subprocess.run(["su", "postgres", "-c", f"pg_ctl -D '{data}' -w restart"], check=True)
