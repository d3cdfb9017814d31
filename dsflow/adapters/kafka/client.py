"""Small helpers on confluent-kafka: offsets, ranged reads, producing JSON lines, printing records.

Written for the Kafka protocol in general and for the dev broker (tansu 0.6) in particular:

- tansu's high watermark is the *base offset of the last batch* + 1, not the end of the log;
  `end_offsets` reads the last batch to find the true end.
- tansu can report a low watermark past records it still holds (after concurrent producers wrote a new
  partition), even equal to its high watermark; `start_offsets` reads from offset 0 where the reported one is
  above 0.
- joining a consumer group takes ~20 s on tansu, so every consumer here uses `assign()`
  and never commits; positions live in the caller (Spark checkpoints, CLI flags).
- confluent-kafka can crash at interpreter exit when a consumer is left open: every
  consumer made here is closed in a `finally`, and `consumer()` is a context manager.

Error codes raised here:

    DSF-E702  the broker cannot be reached
    DSF-E703  a Kafka request failed (metadata, offsets)
    DSF-E704  a ranged read made no progress for `stall_timeout` seconds (ranges.py)
    DSF-E705  records could not be delivered
    DSF-E706  an input line is not valid JSON
    DSF-E708  the topic does not exist
    DSF-E709  a ranged read could not account for every offset (ranges.py)
"""

from __future__ import annotations

import functools
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dsflow.adapters.kafka.ranges import read_range
from dsflow.adapters.kafka.msk import librdkafka_config
from dsflow.adapters.kafka.security import AuthWatch, reason, secured
from dsflow.core.secrets import ScrubFilter
from dsflow.errors import DsflowError

LOG = logging.getLogger("dsflow.kafka")
LOG.addFilter(ScrubFilter())  # librdkafka's log lines (routed here by "logger": LOG) name client.id and brokers


class _Demoted(logging.Filter):
    """Makes INFO the log lines a thread's client serves while `_demoted` holds (its poll or close while a secured
    client's first request fails): the error raised then tells the failure they do."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(self.local, "on", False) and record.levelno > logging.INFO:
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_DEMOTED = _Demoted()
LOG.addFilter(_DEMOTED)


@contextmanager
def _demoted() -> Iterator[None]:
    _DEMOTED.local.on = True
    try:
        yield
    finally:
        _DEMOTED.local.on = False

REQUEST_TIMEOUT = 10.0
"""Seconds to wait for one metadata / offsets request before giving up."""

STALL_TIMEOUT = 60.0
"""Seconds a ranged read may go without progress before it fails."""

CONSUMER_DEFAULTS: dict[str, Any] = {
    "group.id": "dsflow-reader",  # required by the client; never joined (assign only) nor committed
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "fetch.wait.max.ms": 100,
    "isolation.level": "read_committed",  # librdkafka's default, said here: exactly-once sinks' readers rely on it
}

PRODUCER_DEFAULTS: dict[str, Any] = {
    "partitioner": "murmur2_random",  # the Java client's choice: same key -> same partition
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}

_UNREACHABLE = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_RESOLVE", "_WAIT_COORD"}


def client_config(bootstrap: str, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A librdkafka config: `extra` settings (e.g. security.protocol) plus the bootstrap servers."""
    return {**dict(extra or {}), "bootstrap.servers": bootstrap}


# --- connecting -------------------------------------------------------------------------------


def unreachable(bootstrap: str, detail: str) -> DsflowError:
    """The error for a broker we cannot talk to."""
    return DsflowError(
        "DSF-E702",
        f"cannot reach Kafka broker at {bootstrap}: {detail}",
        hint="start it (`dsflow dev up` for the embedded broker) or fix `bootstrap.servers`",
    )


def request_failed(bootstrap: str, what: str, exc: BaseException) -> DsflowError:
    """Wrap a KafkaException: unreachable brokers get DSF-E702, anything else DSF-E703."""
    if _name(exc) in _UNREACHABLE:
        return unreachable(bootstrap, f"{what}: {exc.args[0].str()}")
    return DsflowError("DSF-E703", f"Kafka request failed at {bootstrap}: {what}: {exc}")


def assert_reachable(bootstrap: str, timeout: float = 3.0) -> None:
    """Fail fast with DSF-E702 when no bootstrap address accepts a TCP connection.

    librdkafka retries a refused connection until the request timeout; this check turns a
    dead broker into an error in milliseconds instead.
    """
    problems = []
    for host, port in _addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            problems.append(f"{host}:{port} ({exc.strerror or exc})")
    raise unreachable(bootstrap, "; ".join(problems) or "no address given")


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip().split("://", 1)[-1]
        if not item:
            continue
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]") or "localhost", int(port) if port.isdigit() else 9092))
    return out


def new_consumer(config: Mapping[str, Any]) -> Any:
    """A Consumer with dsflow's defaults under `config`, checked to talk to the broker (`connected`); the caller
    must close it."""
    watch = auth_watch(config)
    c = _consumer_type()({**CONSUMER_DEFAULTS, **librdkafka_config(config), "logger": LOG, **error_cb(watch)})
    c.dsflow_bootstrap = servers(config)
    try:
        return connected(c, c.dsflow_bootstrap, watch)
    except BaseException:
        with _demoted():
            c.close()
        raise


@functools.cache
def _consumer_type() -> type:
    from confluent_kafka import Consumer

    class DsflowConsumer(Consumer):
        """A Consumer that remembers its bootstrap servers, for error messages."""

    return DsflowConsumer


class DeliveryErrors(list):
    """A producer's delivery callback that keeps the failures (reported alone: delivery.report.only.error)."""

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.append(err.str())


def new_producer(config: Mapping[str, Any], errors: DeliveryErrors) -> Any:
    """A Producer with batching defaults under `config`, reporting failed deliveries to `errors`; checked to talk
    to the broker (`connected`)."""
    from confluent_kafka import Producer

    watch = auth_watch(config)
    producer = Producer({
        **PRODUCER_DEFAULTS, **librdkafka_config(config), "logger": LOG, **error_cb(watch),
        "on_delivery": errors, "delivery.report.only.error": True,
    })
    return connected(producer, servers(config), watch)


def auth_watch(config: Mapping[str, Any]) -> AuthWatch | None:
    """A new AuthWatch for a client of `config` when it asks for TLS or SASL; None for a plaintext one."""
    return AuthWatch() if secured(config) else None


def error_cb(watch: AuthWatch | None) -> dict[str, Any]:
    """The client setting that reports librdkafka's errors to `watch` (none without one)."""
    return {} if watch is None else {"error_cb": watch}


def connected(client: Any, bootstrap: str, watch: AuthWatch | None, timeout: float = REQUEST_TIMEOUT) -> Any:
    """`client` (admin, consumer or producer), after one metadata request (all topics: naming one creates it on
    tansu) answered when it has a `watch` (it asks for TLS or SASL). A producer sends nothing before its first
    record, so a broker its security settings cannot talk to would show only as records undelivered after
    message.timeout.ms; this fails with DSF-E702/E703 instead (which adapters/kafka/security.py turns into DSF-E255
    naming the store), at the first TLS or SASL failure the watch saw (`_first_metadata`). A plaintext client is
    not asked: the TCP check (`assert_reachable`) covers it, and a producer per task would pay a round trip."""
    if watch is not None:
        _first_metadata(client, bootstrap, watch, timeout)
    return client


AUTH_SLICE = 0.5
"""Seconds of `_first_metadata`'s first wait; each next wait is this much longer."""


def _first_metadata(client: Any, bootstrap: str, watch: AuthWatch, timeout: float) -> None:
    """One metadata request answered within `timeout`, asked in growing slices: between two the client's poll
    serves its `error_cb` (nothing else does during a request), and the first TLS or SASL failure ends the wait
    as DSF-E702. A refused or slow connection is retried until `timeout`, as one long request would be."""
    from confluent_kafka import KafkaException

    deadline, attempt = time.monotonic() + timeout, 0
    while True:
        attempt += 1
        try:
            client.list_topics(timeout=max(0.01, min(AUTH_SLICE * attempt, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            with _demoted():
                client.poll(0)  # a new client: a consumer has no assignment yet, so this takes no record
            if watch.failure is not None:
                raise unreachable(bootstrap, f"connecting: {reason(watch.failure.str())}") from exc
            if time.monotonic() >= deadline or _name(exc) not in _UNREACHABLE:
                raise request_failed(bootstrap, "connecting", exc) from exc


def _name(exc: BaseException) -> str:
    """The KafkaError name of a KafkaException ('' when it has none)."""
    err: Any = exc.args[0] if exc.args else None
    return err.name() if hasattr(err, "name") else ""


@contextmanager
def consumer(config: Mapping[str, Any]) -> Iterator[Any]:
    """A Consumer that is always closed on exit."""
    c = new_consumer(config)
    try:
        yield c
    finally:
        c.close()


# --- offsets ----------------------------------------------------------------------------------


def topic_partitions(client: Any, topic: str, timeout: float = REQUEST_TIMEOUT) -> list[int]:
    """Sorted partition ids of `topic`; DSF-E708 if it does not exist.

    Lists all topics rather than asking for one: a metadata request naming a topic
    makes tansu auto-create it.
    """
    found = partitions_of(client, [topic], timeout).get(topic)
    if found is None:
        raise DsflowError(
            "DSF-E708", f"Kafka topic '{topic}' does not exist",
            hint="create it (`dsflow apply`) or fix the topic name",
        )
    return found


def partitions_of(client: Any, topics: Iterable[str], timeout: float = REQUEST_TIMEOUT) -> dict[str, list[int]]:
    """Sorted partition ids of each of `topics` that exists, from one metadata request (of all topics, as
    `topic_partitions`: on a cluster of thousands of topics each such request costs the client and the broker
    tens of milliseconds, so callers ask once for all the topics they need)."""
    from confluent_kafka import KafkaException

    try:
        metadata = client.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise request_failed(_bootstrap_of(client), "listing topics", exc) from exc
    out = {}
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            out[topic] = sorted(found.partitions)
    return out


PARTITIONS_FRESH_S = 5.0
"""How long a client that asks again and again (a query's offset reader before every micro-batch, a driver's lag
every status write) trusts a topic's partition list: reading it lists every topic of the cluster, which at 2,000
topics cost 20 ms of the client's CPU and 49 ms of the broker's per call (0.9 ms with the list kept; docs/testing.md,
"The suite's time"). Partitions added in place are seen within this."""


class RecentPartitions:
    """Topics' partition lists, each read again once older than PARTITIONS_FRESH_S (or after `forget`)."""

    def __init__(self, fresh_s: float = PARTITIONS_FRESH_S) -> None:
        self.fresh_s = fresh_s
        self._read: dict[str, tuple[float, list[int]]] = {}

    def get(self, client: Any, topic: str) -> list[int]:
        if not self.holds(topic):
            self._read[topic] = (time.monotonic(), topic_partitions(client, topic))
        return self._read[topic][1]

    def holds(self, topic: str) -> bool:
        """Whether `get` would answer from the list kept, without asking the broker."""
        known = self._read.get(topic)
        return known is not None and time.monotonic() - known[0] <= self.fresh_s

    def forget(self, topic: str) -> None:
        self._read.pop(topic, None)


def watermarks(
    consumer: Any, topic: str, partitions: Iterable[int], timeout: float = REQUEST_TIMEOUT,
) -> dict[int, tuple[int, int]]:
    """(low, high) watermarks per partition, as the broker reports them."""
    from confluent_kafka import KafkaException, TopicPartition

    out = {}
    for p in partitions:
        try:
            out[p] = tuple(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout))
        except KafkaException as exc:
            raise request_failed(_bootstrap_of(consumer), f"offsets of {topic}[{p}]", exc) from exc
    return out


def high_watermarks(
    consumer: Any, topic: str, partitions: Iterable[int], timeout: float = REQUEST_TIMEOUT,
) -> dict[int, int]:
    """The high watermark per partition, in one ListOffsets request for all of them (timestamp -1: the latest
    offset). `watermarks` asks per partition and for the low watermark too: four requests for two partitions,
    where this runs before every micro-batch; and the embedded broker answers each in time growing with the
    topic's batches (docs/benchmarks.md, "Fifth pass")."""
    from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

    wanted = [TopicPartition(topic, p, OFFSET_END) for p in partitions]
    if not wanted:
        return {}
    try:
        found = consumer.offsets_for_times(wanted, timeout=timeout)
    except KafkaException as exc:
        raise request_failed(_bootstrap_of(consumer), f"end offsets of {topic}", exc) from exc
    failed = next((tp for tp in found if tp.error is not None or tp.offset < 0), None)
    if failed is not None:
        raise DsflowError("DSF-E703", f"Kafka request failed at {_bootstrap_of(consumer)}: end offset of "
                          f"{topic}[{failed.partition}]: {failed.error or f'offset {failed.offset}'}")
    return {tp.partition: tp.offset for tp in found}


START_PROBE_S = 5.0
"""How long `start_offsets` waits for the first record of a partition read from offset 0."""


def start_offsets(consumer: Any, topic: str, partitions: Iterable[int],
                  first_wait: float = START_PROBE_S) -> dict[int, int]:
    """The first offset still held per partition.

    The broker's low watermark, checked where it is above 0: tansu can report one past records it still holds
    (after several producers wrote a new partition at once, low watermark 2 where offsets 0 and 1 read back), and
    a read starting there would skip them silently. So such a partition is read from offset 0: the first record
    that arrives is the true start. A broker that did delete the records before the watermark (retention) answers
    offset 0 as out of range, and the consumer's reset to the earliest offset brings the record at the watermark.
    Also where the high watermark is no higher: after two producers wrote one record each, tansu reported (1, 1)
    where offsets 0 and 1 read back (its high watermark is the last batch's base + 1 and was wrong too), so a low
    equal to the high is not an empty partition. A partition whose records all expired (real Kafka) costs the
    probe's `first_wait`, as it costs `end_offsets` its own.
    """
    bounds = watermarks(consumer, topic, partitions)
    starts = {p: low for p, (low, _) in bounds.items()}
    suspect = {p: low for p, (low, _) in bounds.items() if low > 0}
    if suspect:
        first = _first_offsets(consumer, topic, list(suspect), first_wait)
        starts.update({p: min(low, first.get(p, low)) for p, low in suspect.items()})
    return starts


def _first_offsets(consumer: Any, topic: str, partitions: list[int], first_wait: float) -> dict[int, int]:
    """The offset of the first record each partition serves from offset 0 (the consumer resets an out-of-range
    offset to the earliest: `auto.offset.reset`); a partition that serves none in `first_wait` s is left out."""
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    first: dict[int, int] = {}
    deadline = time.monotonic() + first_wait
    try:
        while len(first) < len(partitions) and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.1):
                if m.error() is None and m.partition() not in first:
                    first[m.partition()] = m.offset()
    finally:
        consumer.unassign()
    return first


END_SETTLE_S = 0.1
"""How long `end_offsets` keeps reading a partition that is still being written to."""

END_QUIET_S = 0.05
"""A consume this long that brings nothing means the partitions went quiet."""


def end_offsets(consumer: Any, topic: str, partitions: Iterable[int], first_wait: float = 2.0,
                settle: float = END_SETTLE_S, quiet: float = END_QUIET_S) -> dict[int, int]:
    """The true end offset (last offset + 1) per partition.

    tansu reports the high watermark as the last batch's base offset + 1, so for every
    partition with data we read from `high - 1` to the end of that batch:
    end = max(high, last offset seen + 1). On a real Kafka broker this reads one record
    per partition (or, when that offset is a transaction marker, waits `first_wait` for
    nothing). The consumer is left unassigned. Shorter `settle`/`quiet` make the call faster
    and the answer possibly earlier than the true end (still valid: never past it).
    """
    highs = high_watermarks(consumer, topic, partitions)
    probe = {p: high - 1 for p, high in highs.items() if high > 0}
    seen = _last_offsets(consumer, topic, probe, first_wait, settle, quiet) if probe else {}
    return {p: max(high, seen.get(p, -1) + 1) for p, high in highs.items()}


BUSY_FIRST_WAIT_S = 0.1
"""How long `EndTracker` waits for the record before a busy partition's high watermark: it is normally there at
once; where it is a transaction marker (real Kafka, transactional producers) nothing comes, and the watermark
stands as the end."""


class EndTracker:
    """End offsets for a reader that asks again and again (before every micro-batch), cheaply.

    Per partition it remembers the last high watermark and the true end found behind it, and probes (reads the
    last batch, see `end_offsets`) only a partition whose high watermark moved since the previous call or that was
    not probed yet. A busy partition is probed too: tansu's high watermark is its last batch's base offset + 1, and
    leaving the rest of that batch to the next micro-batch made its records late where another partition's event
    times moved the watermark meanwhile. A quiet topic costs one watermark request per partition, and every
    answer is at most the true end.
    """

    def __init__(self, busy_wait: float = BUSY_FIRST_WAIT_S) -> None:
        self._known: dict[int, tuple[int, int, bool]] = {}  # partition -> (high, end, probed)
        self._busy_wait = busy_wait

    def ends(self, consumer: Any, topic: str, partitions: Iterable[int], settle: float = END_SETTLE_S,
             quiet: float = END_QUIET_S) -> dict[int, int]:
        highs = high_watermarks(consumer, topic, partitions)
        probe, result, first_probe = {}, {}, False
        for p, high in highs.items():
            before = self._known.get(p)
            if before is not None and before[0] == high and before[2]:
                result[p] = before[1]
            elif high > 0:
                probe[p] = high - 1
                first_probe = first_probe or before is None or before[0] == high
            else:
                result[p], self._known[p] = high, (high, high, True)
        first_wait = 2.0 if first_probe else self._busy_wait
        seen = _last_offsets(consumer, topic, probe, first_wait, settle, quiet) if probe else {}
        for p, start in probe.items():
            end = max(start + 1, seen.get(p, -1) + 1)
            result[p], self._known[p] = end, (start + 1, end, p in seen or first_probe)
        return result


def _last_offsets(consumer: Any, topic: str, starts: dict[int, int], first_wait: float,
                  settle: float = END_SETTLE_S, quiet: float = END_QUIET_S) -> dict[int, int]:
    """Highest offset seen per partition reading from `starts` until the partitions go quiet.

    A batch arrives whole in one fetch, so once a partition has shown its first record the rest of that batch is
    already local: it is taken at once, without waiting (`_first_records`). Then, on a quiet topic reading stops
    after `quiet` seconds with nothing new; on a busy topic (new batches keep coming) it stops after `settle`
    seconds (0 for both: only what is local already). Either way the end is at or past the end of the batch
    holding `high - 1`, or, if the read was cut short, a valid earlier end whose rest is found by the next call.
    Stopping early matters: this runs before every micro-batch.
    """
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(topic, p, off) for p, off in starts.items()])
    try:
        seen = _first_records(consumer, topic, starts, first_wait)
        deadline = time.monotonic() + settle
        while _note_offsets(consumer.consume(10_000, quiet), seen) and time.monotonic() < deadline:
            pass
    finally:
        consumer.unassign()
    return seen


FIRST_POLL_S = 0.01
"""The longest single wait of `_first_records` between two looks at the partitions' positions."""


def _first_records(consumer: Any, topic: str, starts: dict[int, int], first_wait: float) -> dict[int, int]:
    """Highest offset seen per partition once each partition has delivered its first record with the rest of its
    fetch (local already: taken without waiting), or moved its position past its start without delivering one (a
    transaction marker at `high - 1`), or `first_wait` s passed. `poll` returns as soon as a record is there, where
    a `consume` of many waits its whole timeout unless they all come."""
    from confluent_kafka import TopicPartition

    seen: dict[int, int] = {}
    waiting = set(starts)
    deadline = time.monotonic() + first_wait
    while waiting and (left := deadline - time.monotonic()) > 0:
        message = consumer.poll(min(left, FIRST_POLL_S))
        if message is not None:
            _note_offsets([message, *consumer.consume(10_000, 0)], seen)
        waiting -= set(seen)
        if waiting and message is None:
            moved = consumer.position([TopicPartition(topic, p) for p in waiting])
            waiting -= {tp.partition for tp in moved if tp.offset > starts[tp.partition]}
    return seen


def _note_offsets(messages: list, seen: dict[int, int]) -> int:
    count = 0
    for m in messages:
        if m.error() is None:
            seen[m.partition()] = max(seen.get(m.partition(), -1), m.offset())
            count += 1
    return count


# --- reading ----------------------------------------------------------------------------------


def _bootstrap_of(client: Any) -> str:
    """Best-effort broker address for messages (the client does not expose its config)."""
    return getattr(client, "dsflow_bootstrap", "the configured broker")


def servers(config: Mapping[str, Any]) -> str:
    """A client config's bootstrap servers, for messages."""
    return str(config.get("bootstrap.servers", "the configured broker"))


# --- producing JSON lines / printing records -------------------------------------------------


def produce_json_lines(
    bootstrap: str, topic: str, lines: Iterable[str], key_field: str | None = None,
    extra: Mapping[str, str] | None = None, timeout: float = 30.0,
) -> int:
    """Produce one record per non-blank JSON line; returns how many were delivered.

    Every line is validated before anything is sent: a bad line raises DSF-E706 naming
    its 1-based line number and nothing is produced. With `key_field`, the record key is
    that field of the JSON object (strings as-is, other values JSON-encoded; absent -> no key).
    """
    records = _parse_json_lines(lines, key_field)
    assert_reachable(bootstrap)
    errors = DeliveryErrors()
    producer = new_producer(client_config(bootstrap, extra), errors)
    for key, value in records:
        produce_one(producer, topic, value, key)
    flush_or_raise(producer, topic, len(records), errors, timeout)
    return len(records)


def _parse_json_lines(lines: Iterable[str], key_field: str | None) -> list[tuple[str | None, str]]:
    records = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DsflowError(
                "DSF-E706", f"line {number}: invalid JSON: {exc.msg} at column {exc.colno}",
                hint="each line must be one JSON document; nothing was produced",
            ) from exc
        records.append((_key_of(parsed, key_field, number), text))
    return records


def _key_of(parsed: Any, key_field: str | None, number: int) -> str | None:
    if key_field is None:
        return None
    if not isinstance(parsed, dict):
        raise DsflowError(
            "DSF-E706", f"line {number}: a key field '{key_field}' was asked for but the line is not a JSON object",
            hint="drop the key option or produce JSON objects",
        )
    value = parsed.get(key_field)
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def produce_one(
    producer: Any, topic: str, value: str | bytes | None, key: str | bytes | None, partition: int | None = None,
    headers: Any = None,
) -> None:
    """produce(), waiting for room in the local queue whenever it is full."""
    extra = {"headers": headers} if headers is not None else {}
    while True:
        try:
            if partition is None:
                producer.produce(topic, value, key, **extra)
            else:
                producer.produce(topic, value, key, partition, **extra)
            return
        except BufferError:
            producer.poll(0.1)


def flush_or_raise(producer: Any, topic: str, count: int, errors: list[str], timeout: float = 60.0) -> None:
    """Flush and raise DSF-E705 if anything was not delivered."""
    left = producer.flush(timeout)
    if left:
        errors.append(f"{left} record(s) still queued after {timeout:.0f}s")
    if errors:
        raise DsflowError(
            "DSF-E705", f"{len(errors)} of {count} record(s) not delivered to topic '{topic}': {errors[0]}",
            hint="check that the topic exists and the broker is healthy",
        )


def print_records(
    bootstrap: str, topic: str, from_beginning: bool = True, limit: int | None = None,
    timeout: float = 5.0, extra: Mapping[str, str] | None = None, convert: Callable[[Any], dict] | None = None,
    stop: Any = None, on_start: Callable[[], None] | None = None,
) -> Iterator[dict]:
    """Records of every partition as dicts (key, value, partition, offset, timestamp in ms; `convert` makes
    the dict of a message, default record_dict).

    Starts at the earliest offsets or at the true end (`end_offsets`), stops after `limit`
    records or when nothing arrives for `timeout` seconds, or once `stop` (a threading.Event) is set. Uses
    assign(), never a group. `on_start` is called once the consumer is assigned its start offsets: a record
    produced after it is read.
    """
    assert_reachable(bootstrap)
    with consumer(client_config(bootstrap, extra)) as c:
        parts = topic_partitions(c, topic)
        starts = start_offsets(c, topic, parts) if from_beginning else end_offsets(c, topic, parts)
        yield from _follow(c, topic, starts, limit, timeout, convert or record_dict, stop, on_start)


def read_to_end(bootstrap: str, topic: str, extra: Mapping[str, str] | None = None,
                convert: Callable[[Any], Any] | None = None, stall_timeout: float = STALL_TIMEOUT,
                allow_gaps: bool = False) -> list[Any]:
    """Every record the topic holds now, in partition and offset order, as `convert` makes it (default
    `record_dict`): from the first offset still held to the true end found at the call (`end_offsets`).
    Unlike `print_records`, it never stops early because records are slow to arrive; DSF-E704 if a
    partition makes no progress for `stall_timeout` seconds. `allow_gaps`: offsets without records (transaction
    markers, aborted records, compaction) are counted, not DSF-E709 (ranges.py)."""
    assert_reachable(bootstrap)
    make = convert or record_dict
    with consumer(client_config(bootstrap, extra)) as c:
        parts = topic_partitions(c, topic)
        starts, ends = start_offsets(c, topic, parts), end_offsets(c, topic, parts)
        return [make(m) for p in parts
                for batch in read_range(c, topic, p, starts[p], ends[p], stall_timeout=stall_timeout,
                                        allow_gaps=allow_gaps)
                for m in batch]


def _follow(c: Any, topic: str, starts: dict[int, int], limit: int | None, timeout: float,
            convert: Callable[[Any], dict], stop: Any = None,
            on_start: Callable[[], None] | None = None) -> Iterator[dict]:
    from confluent_kafka import TopicPartition

    c.assign([TopicPartition(topic, p, off) for p, off in starts.items()])
    if on_start is not None:
        on_start()
    count, idle_since = 0, time.monotonic()
    while (limit is None or count < limit) and time.monotonic() - idle_since < timeout and not (stop and stop.is_set()):
        m = c.poll(0.2)
        if m is None or m.error() is not None:
            continue
        idle_since, count = time.monotonic(), count + 1
        yield convert(m)


def record_dict(m: Any) -> dict:
    """A consumed message as a plain dict; key and value decoded as UTF-8."""
    _, ts = m.timestamp()
    return {
        "key": decode(m.key()),
        "value": decode(m.value()),
        "partition": m.partition(),
        "offset": m.offset(),
        "timestamp": ts if ts >= 0 else None,
    }


def decode(raw: bytes | None) -> str | None:
    """UTF-8 text of a key or value; invalid bytes become U+FFFD."""
    return None if raw is None else raw.decode("utf-8", "replace")
