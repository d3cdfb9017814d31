"""TEST INFRASTRUCTURE, not product code: a small Confluent-compatible schema registry.

No Confluent-compatible registry server is on PyPI (karapace is not), so the tests run this one: an
in-memory registry on the standard library's HTTP server, implementing the subset of the REST API
that dsflow and confluent-kafka's SchemaRegistryClient use:

    POST   /subjects/{subject}/versions        register (the same schema text gets the same id)
    POST   /subjects/{subject}                 look a schema up in a subject
    GET    /subjects                           list subjects
    GET    /subjects/{subject}/versions        list versions
    GET    /subjects/{subject}/versions/{v}    a version, or `latest`
    DELETE /subjects/{subject}                 delete a subject
    GET    /schemas/ids/{id}                   a schema by id
    GET    /config, PUT /config[/{subject}]    compatibility: accepted and echoed, never enforced

Optional HTTP basic auth (user, password): requests without it get 401.

    server = RegistryServer(auth=("u", "p")).start()   # server.url, then server.stop()
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class Registry:
    """The registry's data: schemas by id, and each subject's versions (schema ids)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: dict[int, dict[str, Any]] = {}
        self.subjects: dict[str, list[int]] = {}

    def register(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        schema = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO"),
                  "references": body.get("references") or []}
        with self.lock:
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
            return self._send(200, self.registry.register(parts[1], body))
        if len(parts) == 2 and parts[0] == "subjects":
            with self.registry.lock:
                found = self.registry.lookup(parts[1], body)
            return self._send(200, found) if found else self._error(404, 40403, "Schema not found")
        self._error(404, 404, f"not implemented: POST {self.path}")

    def do_PUT(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        body = self._body()
        self._send(200, {"compatibility": body.get("compatibility", "NONE")})

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
