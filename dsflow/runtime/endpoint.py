"""The supervisor's HTTP endpoint on 127.0.0.1, one port for two readers:

    GET  /metrics      Prometheus text (runtime/metrics.py); open, as a local scrape expects
    POST /v1/look      look at the state now, not at the next tick; answers once a look that began after the
                       request has ended (what apply and destroy ask after changing the state)
    GET  /v1/status    the supervisor's own record: PID, looks done, the last look asked and by whom

The /v1 paths want `Authorization: Bearer TOKEN`, TOKEN being the content of the token file the supervisor writes
when it starts (`supervisor.token` in the environment's run folder, readable by its owner only): who can read the
project's run files can steer its supervisor, nobody else on the machine can. A new token is drawn at every start.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

TOKEN_FILE = "supervisor.token"
LOOK_WAIT_SECONDS = 10.0
"""How long POST /v1/look waits for the look it asked for to end."""
PAUSE_SLICE_SECONDS = 0.5


def write_token(run_dir: Path) -> str:
    """A new token in the run folder's token file (mode 0600, replacing the last start's)."""
    token = secrets.token_urlsafe(32)
    path = run_dir / TOKEN_FILE
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    os.replace(tmp, path)
    return token


def read_token(run_dir: Path) -> str | None:
    try:
        return (run_dir / TOKEN_FILE).read_text().strip() or None
    except OSError:
        return None


class Looks:
    """When the supervisor looks at the state: every tick, or at once when someone asks (`ask`)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.started = self.done = 0
        self._asked = False
        self.last_asked: dict[str, Any] | None = None

    def begin(self) -> None:
        with self._cond:
            self.started += 1
            self._asked = False

    def end(self) -> None:
        with self._cond:
            self.done += 1
            self._cond.notify_all()

    def pause(self, seconds: float, stop: threading.Event | None = None) -> None:
        """Wait until the next tick, or less when asked to look or told to stop.

        The wait is cut in slices: a SIGTERM the kernel hands to another thread runs its Python handler only once
        the main thread runs again, so a single long wait could outlast the signal by a whole tick."""
        deadline = time.monotonic() + seconds
        with self._cond:
            while not self._asked and not (stop is not None and stop.is_set()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(min(left, PAUSE_SLICE_SECONDS))

    def wake(self) -> None:
        with self._cond:
            self._asked = True
            self._cond.notify_all()

    def ask(self, by: str, wait: float = LOOK_WAIT_SECONDS) -> dict[str, Any]:
        """Ask for a look and wait (up to `wait` s) until one that began after this call has ended."""
        with self._cond:
            wanted = self.started + 1
            self.last_asked = {"by": by, "at": time.time()}
            self._asked = True
            self._cond.notify_all()
            looked = self._cond.wait_for(lambda: self.done >= wanted, wait)
            return {"looked": looked, "looks": self.done, "asked_by": by}


def serve(registry: Any, token: str, looks: Looks, report: Callable[[], dict[str, Any]],
          port: int = 0) -> tuple[Any, int]:
    """Serve the endpoint on 127.0.0.1:`port` (0: a free port) in background threads; the server and its port."""
    from wsgiref.simple_server import make_server

    from prometheus_client import make_wsgi_app

    app = _App(make_wsgi_app(registry), token, looks, report)
    server: Any = make_server("127.0.0.1", port, app, _server_class(), handler_class=_handler_class())
    threading.Thread(target=server.serve_forever, name="supervisor-endpoint", daemon=True).start()
    return server, server.server_port


def stop(server: Any) -> None:
    """Stop serving, once the requests being answered (a look asked) have their answer."""
    server.shutdown()
    server.server_close()


def _server_class() -> type:
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIServer

    class Server(ThreadingMixIn, WSGIServer):
        """One thread per request; closing waits for the answers being written (daemon_threads off)."""

    return Server


def _handler_class() -> type:
    from wsgiref.simple_server import WSGIRequestHandler

    class Handler(WSGIRequestHandler):
        """No access log on stderr (the supervisor's log is for what it does); a silent client is dropped."""

        timeout = 10

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

    return Handler


class _App:
    """The WSGI application: /metrics to prometheus_client, /v1/* behind the token."""

    def __init__(self, metrics: Any, token: str, looks: Looks, report: Callable[[], dict[str, Any]]):
        self.metrics, self.token, self.looks, self.report = metrics, token, looks, report

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        if path in ("/", "/metrics"):
            return self.metrics(environ, start_response)
        if not path.startswith("/v1/"):
            return _json(start_response, "404 Not Found", {"error": f"no such path: {path}"})
        if not self._authorized(environ.get("HTTP_AUTHORIZATION", "")):
            return _json(start_response, "401 Unauthorized",
                         {"error": f"send 'Authorization: Bearer TOKEN', TOKEN from the supervisor's {TOKEN_FILE}"},
                         [("WWW-Authenticate", 'Bearer realm="dsflow-supervisor"')])
        routes = {("/v1/look", "POST"): self._look, ("/v1/status", "GET"): lambda _: self.report()}
        handler = routes.get((path, method))
        if handler is None:
            allowed = [m for (p, m) in routes if p == path]
            if allowed:
                return _json(start_response, "405 Method Not Allowed", {"error": f"{path} takes {allowed[0]}"},
                             [("Allow", allowed[0])])
            return _json(start_response, "404 Not Found", {"error": f"no such path: {path}"})
        return _json(start_response, "200 OK", handler(environ))

    def _authorized(self, header: str) -> bool:
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.token.encode())

    def _look(self, environ: dict[str, Any]) -> dict[str, Any]:
        by = (parse_qs(environ.get("QUERY_STRING", "")).get("by") or ["someone"])[0][:100]
        return self.looks.ask(by)


def _json(start_response: Callable, status: str, body: dict[str, Any],
          headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                            *(headers or [])])
    return [data]
