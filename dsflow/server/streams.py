"""Topic records, topic tails and followed continuous queries: the streaming endpoints.

A tail and a followed query are Server-Sent Events (text/event-stream) that run until the client disconnects:
the reading thread is told to stop then, its consumer closed (a followed query's Spark session stopped and its
temporary checkpoint removed). Every event's data is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from dsflow.engine import topics
from dsflow.core.access import Privilege
from dsflow.core.secrets import scrub
from dsflow.errors import DsflowError
from dsflow.server.api_actions import json_value
from dsflow.server.context import API, ApiError, Caller, Server, caller, server_of

router = APIRouter(prefix=API)
TAIL_IDLE = 24 * 3600.0
"""A tail reads until the client leaves: its read ends on `stop`, set on the disconnect (or after this idle
time, when it is read again from where it is)."""
STREAM = {"content": {"text/event-stream": {}}, "description": "Server-Sent Events until the client disconnects"}


class FollowRequest(BaseModel):
    """A continuous query to run over streams and changelogs while the client listens."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sql: str = Field(min_length=1, max_length=100_000)
    from_: Literal["latest", "earliest"] = Field("latest", alias="from", description="where the sources start")


def topic_target(server: Server, me: Caller, name: str) -> topics.Target:
    """The topic behind a deployed stream or changelog the caller may SELECT from (name: an address, a relation
    name of 1 to 3 parts)."""
    project = server.loaded().project
    fqn = name.removeprefix("relation.")
    parts = fqn.split(".")
    if len(parts) < 3:
        fqn = ".".join([project.default_database, project.default_schema, *parts][-3:])
    address = f"relation.{fqn}"
    deployed = me.state.resources.get(address)
    relation = project.relation(fqn)
    if deployed is None or relation is None:
        raise ApiError(404, "DSF-E329", f"no deployed relation {address}", hint="see GET /api/v1/catalog")
    me.require(Privilege.SELECT, address)
    if relation.kind not in ("stream", "changelog"):
        raise ApiError(400, "DSF-E333", f"{address} is a {relation.kind}, not a stream or changelog with a topic",
                       hint="query a materialized view with POST /api/v1/views/query")
    return topics.resolve(project, fqn, relation.store)


@router.get("/topics/{relation}/records", tags=["topics"])
def records(relation: str, from_beginning: bool = True, limit: int = Query(10, ge=1, le=1000),
            timeout: float = Query(5.0, ge=0, le=30), me: Caller = Depends(caller),
            server: Server = Depends(server_of)) -> dict[str, Any]:
    """Records of a stream's or changelog's topic, decoded with the relation's formats (SELECT on it)."""
    target = topic_target(server, me, relation)
    with topics.store_errors(target.store, target.store_type, target.settings):
        found = list(topics.records(target, from_beginning, limit, timeout))
    return {"records": found}


async def events(produce: Callable[[Callable[[str, Any], None], threading.Event], None],
                 stop: threading.Event) -> AsyncIterator[dict[str, str]]:
    """Server-Sent Events of what `produce(emit, stop)` emits in a thread; `stop` is set when the client leaves."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(maxsize=1000)

    def emit(event: str, data: Any) -> None:
        if not stop.is_set():
            asyncio.run_coroutine_threadsafe(queue.put((event, data)), loop).result()

    def run() -> None:
        try:
            produce(emit, stop)
        except DsflowError as err:
            emit("error", {"code": err.code, "message": err.message, "hint": err.hint})
        except Exception as err:  # noqa: BLE001 - an event, never a traceback
            emit("error", {"code": "DSF-E331", "message": f"the stream failed: {type(err).__name__}"})
        finally:
            if not stop.is_set():
                asyncio.run_coroutine_threadsafe(queue.put(None), loop)

    threading.Thread(target=run, name="dsflow-serve-stream", daemon=True).start()
    try:
        while (item := await queue.get()) is not None:
            yield {"event": item[0], "data": scrub(json.dumps(item[1], default=str))}
    finally:
        stop.set()
        while not queue.empty():  # a producer blocked on a full queue goes on and sees `stop`
            queue.get_nowait()


def _sse(produce: Callable, stop: threading.Event):
    from sse_starlette.sse import EventSourceResponse

    return EventSourceResponse(events(produce, stop), ping=15)


@router.get("/topics/{relation}/tail", tags=["topics"], responses={200: STREAM})
def tail(relation: str, from_beginning: bool = False, me: Caller = Depends(caller),
         server: Server = Depends(server_of)):
    """A stream's or changelog's records as they arrive (`record` events) until the client disconnects."""
    target = topic_target(server, me, relation)
    stop = threading.Event()

    def produce(emit: Callable[[str, Any], None], stop: threading.Event) -> None:
        ready = {"topic": target.name, "store": target.store}
        first, started = from_beginning, [False]

        def on_start() -> None:  # a tail that ends on `stop` is ready once positioned: later records are read
            if not started[0]:
                started[0] = True
                emit("ready", ready)

        while not stop.is_set():
            with topics.store_errors(target.store, target.store_type, target.settings):
                for record in topics.records(target, first, None, TAIL_IDLE, stop=stop, on_start=on_start):
                    emit("record", record)
                    if stop.is_set():
                        break
            first = False

    return _sse(produce, stop)


@router.post("/queries/follow", tags=["queries"], responses={200: STREAM})
def follow(body: FollowRequest, me: Caller = Depends(caller), server: Server = Depends(server_of)):
    """Run a continuous query over streams and changelogs (SELECT on each source); its rows arrive as `rows`
    events ({columns, rows}) per micro-batch until the client disconnects. At most four at once (409 DSF-E334
    beyond)."""
    from dsflow.engine import adhoc

    project = server.loaded().project
    query = adhoc.follow_query(project, body.sql, body.from_)
    for source in query.sources:
        me.require(Privilege.SELECT, f"relation.{source.relation}")
    busy = ("DSF-E334", f"{server.follows.limit} continuous queries are being followed on this server already",
            "stop one of them (disconnect its client) and try again")
    if server.follows.full():
        raise ApiError(409, *busy)
    stop = threading.Event()

    def produce(emit: Callable[[str, Any], None], stop: threading.Event) -> None:
        if not server.follows.take():  # taken by the thread only: a stream never run takes none
            raise DsflowError(busy[0], busy[1], hint=busy[2])
        try:
            def on_rows(columns: list[str], rows: list[tuple]) -> None:
                emit("rows", {"columns": columns, "rows": [[json_value(v) for v in row] for row in rows]})

            adhoc.follow(project, body.sql, on_rows, stop, position=body.from_,
                         on_started=lambda _: emit("ready", {"sql": body.sql}))
        finally:
            server.follows.give()

    return _sse(produce, stop)
