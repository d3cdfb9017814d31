"""The development schema registry: a small Confluent-compatible registry on 127.0.0.1 (`dsflow dev up --registry`).

No Confluent-compatible registry server is on PyPI (karapace is not), so dsflow ships this one: an in-memory
registry on the standard library's HTTP server (like the dev broker, it starts empty and forgets on stop),
implementing the subset of the REST API that dsflow and confluent-kafka's SchemaRegistryClient use:

    POST   /subjects/{subject}/versions        register (the same schema text gets the same id)
    POST   /subjects/{subject}                 look a schema up in a subject
    GET    /subjects                           list subjects
    GET    /subjects/{subject}/versions        list versions
    GET    /subjects/{subject}/versions/{v}    a version, or `latest`
    DELETE /subjects/{subject}                 delete a subject
    GET    /schemas/ids/{id}                   a schema by id
    GET    /config[/{subject}], PUT /config[/{subject}]   compatibility: global NONE, never enforced; a subject's
                                        own level (AVRO only) is enforced on register (409) and by
    POST   /compatibility/subjects/{subject}/versions/{v}   (Avro schema resolution, written here apart from
                                        dsflow's own rules in core/evolution.py)

Optional HTTP basic auth (user, password): requests without it get 401.

    server = RegistryServer(auth=("u", "p")).start()   # in this process: server.url, then server.stop()
    start(run_dir, port=8081) / read(run_dir) / stop(run_dir)   # a background process: `dsflow dev up --registry`

The tests use it too (tests/support/registry_server.py, the `schema_registry` fixture).
"""

from __future__ import annotations

import base64
import json
import signal
import socket
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from dsflow.errors import DsflowError

if TYPE_CHECKING:
    from dsflow.adapters import process

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class Registry:
    """The registry's data: schemas by id, and each subject's versions (schema ids)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: dict[int, dict[str, Any]] = {}
        self.subjects: dict[str, list[int]] = {}
        self.levels: dict[str, str] = {}

    def register(self, subject: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """The new version; None if the subject's level refuses it."""
        schema = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO"),
                  "references": body.get("references") or []}
        with self.lock:
            if self.lookup(subject, body) is None and not self.compatible(subject, body, None):
                return None
            found = next((i for i, s in self.schemas.items() if _same(s, schema)), None)
            schema_id = found if found is not None else len(self.schemas) + 1
            self.schemas[schema_id] = schema
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return self.version(subject, versions.index(schema_id) + 1)

    def version(self, subject: str, version: int) -> dict[str, Any]:
        schema_id = self.subjects[subject][version - 1]
        return {"subject": subject, "version": version, "id": schema_id, **self.schemas[schema_id]}

    def lookup(self, subject: str, body: dict[str, Any]) -> dict[str, Any] | None:
        for number, schema_id in enumerate(self.subjects.get(subject, []), start=1):
            if _same(self.schemas[schema_id], {"schema": body["schema"],
                                                "schemaType": body.get("schemaType", "AVRO")}):
                return self.version(subject, number)
        return None


    def compatible(self, subject: str, body: dict[str, Any], version: int | None) -> bool:
        """Under the subject's own level, against `version` (None: the latest, or all for _TRANSITIVE)."""
        level = self.levels.get(subject, "NONE")
        ids = self.subjects.get(subject, [])
        if level == "NONE" or not ids or body.get("schemaType", "AVRO") != "AVRO":
            return True
        if version is not None:
            ids = [ids[version - 1]]
        elif not level.endswith("_TRANSITIVE"):
            ids = ids[-1:]
        new, rule = json.loads(body["schema"]), level.removesuffix("_TRANSITIVE")
        for old in (json.loads(self.schemas[i]["schema"]) for i in ids):
            if rule in ("BACKWARD", "FULL") and not _readable(old, new):
                return False
            if rule in ("FORWARD", "FULL") and not _readable(new, old):
                return False
        return True


_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}


def _readable(writer: dict[str, Any], reader: dict[str, Any]) -> bool:
    """Avro schema resolution of two record schemas: data written with `writer` can be read with `reader`."""
    written = {f["name"]: f for f in writer["fields"]}
    for field in reader["fields"]:
        if field["name"] not in written:
            if "default" not in field:
                return False
        elif not _type_readable(written[field["name"]]["type"], field["type"]):
            return False
    return True


def _type_readable(writer: Any, reader: Any) -> bool:
    readers = [_name(t) for t in (reader if isinstance(reader, list) else [reader])]
    return all(any(w == r or r in _PROMOTIONS.get(w, ()) for r in readers)
               for w in (_name(t) for t in (writer if isinstance(writer, list) else [writer])))


def _name(avro_type: Any) -> str:
    if isinstance(avro_type, dict):
        if avro_type.get("logicalType"):
            return f"{avro_type['type']}:{avro_type['logicalType']}"
        return avro_type["type"] if isinstance(avro_type["type"], str) and len(avro_type) == 1 else \
            json.dumps(avro_type, sort_keys=True)
    return str(avro_type)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["schema"] == b["schema"] and a.get("schemaType", "AVRO") == b.get("schemaType", "AVRO")


class _Handler(BaseHTTPRequestHandler):
    registry: Registry
    auth: str | None

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: int, message: str) -> None:
        self._send(status, {"error_code": code, "message": message})

    def _authorized(self) -> bool:
        if self.auth is None:
            return True
        if self.headers.get("Authorization") == f"Basic {self.auth}":
            return True
        self._error(401, 40101, "Unauthorized")
        return False

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _parts(self) -> list[str]:
        return [unquote(p) for p in urlparse(self.path).path.strip("/").split("/") if p]

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self._authorized():
            return
        parts, reg = self._parts(), self.registry
        with reg.lock:
            if parts == ["subjects"]:
                return self._send(200, sorted(reg.subjects))
            if len(parts) == 2 and parts[0] == "config":
                level = reg.levels.get(parts[1])
                return self._send(200, {"compatibilityLevel": level}) if level else \
                    self._error(404, 40408, f"Subject '{parts[1]}' does not have subject-level compatibility")
            if parts in (["config"], ["schemas", "types"]):
                return self._send(200, {"compatibilityLevel": "NONE"} if parts == ["config"] else ["AVRO", "PROTOBUF"])
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                schema = reg.schemas.get(int(parts[2]))
                return self._send(200, schema) if schema else self._error(404, 40403, "Schema not found")
            if len(parts) >= 3 and parts[0] == "subjects" and parts[2] == "versions":
                versions = reg.subjects.get(parts[1])
                if not versions:
                    return self._error(404, 40401, f"Subject '{parts[1]}' not found.")
                if len(parts) == 3:
                    return self._send(200, list(range(1, len(versions) + 1)))
                number = len(versions) if parts[3] == "latest" else int(parts[3]) if parts[3].isdigit() else 0
                if not 1 <= number <= len(versions):
                    return self._error(404, 40402, "Version not found.")
                return self._send(200, reg.version(parts[1], number))
        self._error(404, 404, f"not implemented: GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        parts, body = self._parts(), self._body()
        if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            registered = self.registry.register(parts[1], body)
            return self._send(200, registered) if registered else self._error(
                409, 409, f"Schema being registered is incompatible with an earlier schema for subject '{parts[1]}'")
        if len(parts) == 5 and parts[:2] == ["compatibility", "subjects"] and parts[3] == "versions":
            return self._compatibility(parts[2], parts[4], body)
        if len(parts) == 2 and parts[0] == "subjects":
            with self.registry.lock:
                found = self.registry.lookup(parts[1], body)
            return self._send(200, found) if found else self._error(404, 40403, "Schema not found")
        self._error(404, 404, f"not implemented: POST {self.path}")

    def _compatibility(self, subject: str, version: str, body: dict[str, Any]) -> None:
        with self.registry.lock:
            versions = self.registry.subjects.get(subject)
            if not versions:
                return self._error(404, 40401, f"Subject '{subject}' not found.")
            number = len(versions) if version == "latest" else int(version)
            return self._send(200, {"is_compatible": self.registry.compatible(subject, body, number)})

    def do_PUT(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        parts, body = self._parts(), self._body()
        level = body.get("compatibility", "NONE")
        if len(parts) == 2 and parts[0] == "config":
            with self.registry.lock:
                self.registry.levels[parts[1]] = level.upper()
        self._send(200, {"compatibility": level})

    def do_DELETE(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        parts = self._parts()
        with self.registry.lock:
            versions = self.registry.subjects.pop(parts[1], None) if len(parts) == 2 else None
        if versions is None:
            return self._error(404, 40401, "Subject not found.")
        self._send(200, list(range(1, len(versions) + 1)))


class RegistryServer:
    """The registry on 127.0.0.1 in a daemon thread; `url` once started."""

    def __init__(self, auth: tuple[str, str] | None = None, port: int = 0) -> None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode() if auth else None
        self.registry = Registry()
        handler = type("Handler", (_Handler,), {"registry": self.registry, "auth": token})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> RegistryServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# --- the background process: `dsflow dev up --registry` -----------------------------------------------------------

DEFAULT_PORT = 8081
MODULE = "dsflow.adapters.kafka.devregistry"


@dataclass(frozen=True)
class RegistryInfo:
    """A running dev registry, as recorded in its file (`registry.json` in the dev folder)."""

    pid: int
    port: int
    log: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start(run_dir: Path, port: int = DEFAULT_PORT, timeout: float = 10.0) -> RegistryInfo:
    """Start the registry on 127.0.0.1:port in a process of its own, unless the file names a live one; wait until
    it answers."""
    from dsflow.adapters import process

    current = read(run_dir)
    if current is not None:
        return current
    if _port_open(port):
        raise DsflowError("DSF-E902", f"port {port} on 127.0.0.1 is already in use",
                          hint="pass --registry-port or stop what listens there")
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "registry.log"
    proc = process.spawn(MODULE, ["--port", str(port), "--run-dir", str(run_dir.resolve())], log, _identity(run_dir))
    info = RegistryInfo(pid=proc.pid, port=port, log=str(log))
    _info_file(run_dir).write_text(json.dumps(asdict(info)))
    deadline = time.monotonic() + timeout
    while not _answers(info.url):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(run_dir)
            raise DsflowError("DSF-E903", f"the dev schema registry did not answer on {info.url} within "
                              f"{timeout:.0f} s", hint=f"read {log}")
        time.sleep(0.1)
    return info


def read(run_dir: Path) -> RegistryInfo | None:
    """The recorded registry if its process still runs (its identity in this folder: PID and start time, its lock
    held), else None."""
    from dsflow.adapters import process

    path = _info_file(run_dir)
    if not path.exists():
        return None
    info = RegistryInfo(**json.loads(path.read_text()))
    if not process.is_running(info.pid, _identity(run_dir)):
        path.unlink(missing_ok=True)
        return None
    return info


def stop(run_dir: Path) -> bool:
    """Stop the recorded registry by PID; True if one was running."""
    from dsflow.adapters import process

    path = _info_file(run_dir)
    if not path.exists():
        return False
    info = RegistryInfo(**json.loads(path.read_text()))
    stopped = process.stop(info.pid, _identity(run_dir), timeout=10.0)
    path.unlink(missing_ok=True)
    return stopped


def _identity(run_dir: Path) -> process.Identity:
    """The registry process's identity (adapters/process.py), in its run folder."""
    from dsflow.adapters import process

    return process.Identity(run_dir.resolve(), "registry", (MODULE, str(run_dir.resolve())))


def _info_file(run_dir: Path) -> Path:
    return run_dir / "registry.json"


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    try:
        with opener.open(f"{url}/subjects", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


def main(argv: list[str] | None = None) -> None:
    """`python -m dsflow.adapters.kafka.devregistry --port N --run-dir DIR`: serve until SIGTERM."""
    import argparse

    parser = argparse.ArgumentParser(prog=MODULE)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--run-dir", required=True, help="the dev folder (names this process for `dsflow dev down`)")
    args = parser.parse_args(argv)
    server = RegistryServer(port=args.port)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.httpd.shutdown).start())
    print(f"schema registry on {server.url}", flush=True)
    server.httpd.serve_forever()
    server.httpd.server_close()


if __name__ == "__main__":
    main()
