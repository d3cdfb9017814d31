"""The test PostgreSQL: a private cluster the test session starts (initdb into a temporary folder, wal_level=logical,
trust auth) on a free loopback port, and its connection settings and one-statement queries.

`start()` runs once per test process (tests/conftest.py, before collection) and exports the port as PGHOST/PGPORT,
so test modules read `PORT`, `SERVER` and `DSN` at import, and `psql` and libpq clients without a port find it too.
Debian's `postgresql` package gives the binaries; as root the server runs as the `postgres` user (initdb and
postgres refuse to run as root). Nothing on the host changes: the cluster lives and dies in its own folder.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from support.servers import free_port

PORT = os.environ.get("DSFLOW_TEST_PG_PORT", "")
"""The port of the session's server ('' before `start()`)."""
SERVER = {"host": "127.0.0.1", "port": PORT, "user": "postgres"}
DSN = f"postgresql://postgres@127.0.0.1:{PORT}/test"
"""The `test` database, created with the cluster (state backends, secrets tables, entities)."""

SETTINGS = {"listen_addresses": "127.0.0.1", "wal_level": "logical", "max_replication_slots": "40",
            "max_wal_senders": "40", "max_connections": "300", "fsync": "off", "full_page_writes": "off",
            "shared_buffers": "64MB"}
"""fsync and full-page writes off: a test cluster dies with its folder, so durability across a host crash buys
nothing. synchronous_commit stays on: off, a commit returns before its WAL is written, and pg_current_wal_lsn()
(what the CDC lag is measured against) lags behind it."""


def dsn(database: str) -> str:
    return f"postgresql://postgres@127.0.0.1:{PORT}/{database}"


def sql(database: str, statement: str, args: tuple = ()) -> list[tuple]:
    """Run one statement in `database` (committed); its rows, or [] for a statement without any."""
    from dsflow.adapters.postgres import admin

    conn = admin.connect(SERVER, database)
    try:
        with conn.cursor() as cursor:
            cursor.execute(statement, args)
            return cursor.fetchall() if cursor.description else []
    finally:
        conn.close()


def _binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL's initdb was not found: install Debian's 'postgresql' package (.ci/run does)")
    return Path(initdb).resolve().parent


def _as_server_user() -> dict:
    """Keyword arguments for subprocess that run a command as `postgres` when this process is root."""
    if os.geteuid() != 0:
        return {}
    import pwd

    entry = pwd.getpwnam("postgres")
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def start() -> str:
    """Start the session's cluster (once per process) and export its port; returns the port."""
    global PORT, DSN
    if PORT:
        return PORT
    folder = Path(tempfile.mkdtemp(prefix="dsflow-pg-"))
    data = folder / "data"
    run_as = _as_server_user()
    if run_as:
        os.chown(folder, run_as["user"], run_as["group"])
    bin_dir = _binaries()
    log = folder / "server.log"
    subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                    "--locale=C.UTF-8", "--no-sync"], check=True, capture_output=True, cwd=folder, **run_as)
    port = str(free_port())
    options = [f"-c{key}={value}" for key, value in {**SETTINGS, "port": port,
                                                      "unix_socket_directories": str(folder)}.items()]
    server = subprocess.Popen([str(bin_dir / "postgres"), "-D", str(data), *options], cwd=folder,
                              stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True, **run_as)
    atexit.register(_stop, server, folder)
    _wait_ready(bin_dir, port, server, log)
    subprocess.run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", port, "-U", "postgres", "test"],
                   check=True, capture_output=True)
    PORT = port
    SERVER["port"] = port
    DSN = f"postgresql://postgres@127.0.0.1:{port}/test"
    os.environ.update(DSFLOW_TEST_PG_PORT=port, PGHOST="127.0.0.1", PGPORT=port, PGUSER="postgres")
    return port


def _wait_ready(bin_dir: Path, port: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while subprocess.run([str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", port, "-q"]).returncode != 0:
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the test PostgreSQL did not start:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)


def _stop(server: subprocess.Popen, folder: Path) -> None:
    """Fast shutdown (SIGINT) of the server this process started, then its folder."""
    if server.poll() is None:
        server.send_signal(2)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    shutil.rmtree(folder, ignore_errors=True)
