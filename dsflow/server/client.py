"""The CLI's side of `dsflow serve`: `dsflow --server URL plan|apply PLANFILE|status|query|topic print` send their
request to a server instead of working on a local checkout; the token comes from DSFLOW_TOKEN.

    client = Client.from_env("http://127.0.0.1:8765")
    client.plan(destroy=False) -> {"plan": ..., "authorization": [...]}

A server's error answer is raised as the DsflowError it carries (same code, message and hint), so the CLI reports
it as it would a local one.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from dsflow.errors import DsflowError

TOKEN_ENV = "DSFLOW_TOKEN"
SERVER_ENV = "DSFLOW_SERVER"
API = "/api/v1"


def _http():
    """httpx2: httpx's API, already a base dependency for the schema registry client (docs/dependencies.md)."""
    import httpx2

    return httpx2


class Client:
    """Requests to one `dsflow serve` with a bearer token."""

    def __init__(self, url: str, token: str, timeout: float = 300.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    @classmethod
    def from_env(cls, url: str) -> Client:
        token = os.environ.get(TOKEN_ENV, "")
        if not token:
            raise DsflowError("DSF-E336", f"--server needs a token in {TOKEN_ENV}",
                              hint=f"create one on the server's machine with 'dsflow tokens create USER' and "
                                   f"export {TOKEN_ENV}=...")
        return cls(url, token)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        httpx = _http()
        try:
            answer = httpx.request(method, self.url + API + path, json=body, params=params, headers=self._headers(),
                                   timeout=self.timeout)
        except httpx.HTTPError as err:
            raise DsflowError("DSF-E335", f"cannot reach the dsflow server at {self.url}: {type(err).__name__}",
                              hint=f"start it with 'dsflow serve', or fix --server / {SERVER_ENV}") from None
        if answer.status_code >= 400:
            raise _error(answer.status_code, answer.text)
        return answer.text if answer.headers.get("content-type", "").startswith("text/plain") else answer.json()

    def plan(self, destroy: bool = False, refresh: bool = True) -> dict[str, Any]:
        return self.request("POST", "/plan", {"destroy": destroy, "refresh": refresh})

    def apply(self, plan: dict[str, Any], allow_data_loss: bool = False,
              allow_destroy: tuple[str, ...] = (), start_runtime: bool = True) -> dict[str, Any]:
        return self.request("POST", "/apply", {"plan": plan, "allow_data_loss": allow_data_loss,
                                               "allow_destroy": list(allow_destroy), "start_runtime": start_runtime})

    def status(self) -> list[dict[str, Any]]:
        return self.request("GET", "/status")

    def events(self, since: str | None = None, object: str | None = None) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("since", since), ("object", object)) if v}
        return self.request("GET", "/events", params=params)

    def view_query(self, sql: str) -> tuple[list[str], list[tuple]]:
        answer = self.request("POST", "/views/query", {"sql": sql})
        return answer["columns"], [tuple(row) for row in answer["rows"]]

    def records(self, relation: str, from_beginning: bool, limit: int | None, timeout: float) -> list[dict]:
        params = {"from_beginning": str(from_beginning).lower(), "limit": min(limit or 1000, 1000),
                  "timeout": min(timeout, 30.0)}
        return self.request("GET", f"/topics/{relation}/records", params=params)["records"]

    def follow(self, sql: str, position: str, on_rows: Callable[[list[str], list[tuple]], None],
               stop: threading.Event) -> None:
        """Follow a continuous query on the server: each `rows` event to `on_rows` until `stop` is set."""
        for event, data in self._events("POST", "/queries/follow", {"sql": sql, "from": position}, stop):
            if event == "rows":
                on_rows(data["columns"], [tuple(row) for row in data["rows"]])
            elif event == "error":
                raise DsflowError(data.get("code", "DSF-E337"), data.get("message", "the query failed"),
                                  hint=data.get("hint"))

    def _events(self, method: str, path: str, body: Any, stop: threading.Event) -> Iterator[tuple[str, Any]]:
        httpx = _http()
        headers = {**self._headers(), "Accept": "text/event-stream"}
        try:
            with httpx.stream(method, self.url + API + path, json=body, headers=headers,
                              timeout=httpx.Timeout(self.timeout, read=None)) as answer:
                if answer.status_code >= 400:
                    raise _error(answer.status_code, answer.read().decode("utf-8", "replace"))
                yield from _parse_events(answer.iter_lines(), stop)
        except httpx.HTTPError as err:
            if stop.is_set():
                return
            raise DsflowError("DSF-E335", f"lost the dsflow server at {self.url}: {type(err).__name__}",
                              hint="check that it still runs") from None


def _parse_events(lines: Iterator[str], stop: threading.Event) -> Iterator[tuple[str, Any]]:
    event = "message"
    for line in lines:
        if stop.is_set():
            return
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            yield event, json.loads(line[5:].strip() or "null")
            event = "message"


def _error(status: int, text: str) -> DsflowError:
    """The DsflowError a server's error answer carries."""
    try:
        error = json.loads(text)["error"]
        return DsflowError(error["code"], error["message"], hint=error.get("hint"))
    except (ValueError, KeyError, TypeError):
        return DsflowError("DSF-E337", f"the dsflow server answered {status}: {text[:200]}",
                           hint="check --server: it should be the URL of 'dsflow serve'")
