"""The options of the `dsflow_kafka` data source (datasource.py reads with them, writing.py writes), parsed and
checked once; datasource.py's docstring lists them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsflow.adapters.kafka import client
from dsflow.core.secrets import register
from dsflow.errors import DsflowError
from dsflow.formats.decoding import Decoding

KAFKA_PREFIX = "kafka."


@dataclass(frozen=True)
class KafkaOptions:
    """The data source options, parsed and checked once."""

    bootstrap: str
    topic: str
    starting_position: str = "earliest"
    starting_offsets: dict[int, int] | None = None
    """Per-partition start offsets (carried from a previous query version); others start at `starting_position`."""
    starting_timestamp: int | None = None
    """Epoch ms: start each partition at the first record at or after it (a replay)."""
    ending_offsets: dict[int, int] | None = None
    """Per-partition offsets a streaming read goes no further than (a blue/green deployment's run to a cut)."""
    ending_offsets_file: str | None = None
    """A JSON file {topic: {partition: offset}}: once written, its offsets for this topic replace `ending_offsets`."""
    max_records_per_batch: int | None = None
    stall_timeout: float = client.STALL_TIMEOUT
    allow_gaps: bool = False
    """`gaps` = count: offsets the broker confirms empty are counted (compaction, transaction markers), not fatal."""
    gap_log: str | None = None
    """Where counted gaps are appended (JSON lines)."""
    settings: dict[str, str] = field(default_factory=dict)
    """librdkafka settings from the `kafka.` options, prefix removed."""
    decoding: Decoding = field(default_factory=Decoding)
    """value.format, value.columns, schema.registry.*, dlq.topic: how values are read (formats/decoding.py)."""
    value_schema: str | None = None
    """Writing avro: the schema (value.schema) registered under value.subject (default <topic>-value)."""
    value_subject: str | None = None
    key_schema: str | None = None
    """Writing avro/protobuf keys: the key schema (key.schema) registered under key.subject (default <topic>-key)."""
    key_subject: str | None = None
    ends_at_read: bool = False
    """A batch read: each task finds its partition's offsets when it runs, not when the read is planned (a table a
    streaming query re-reads at every micro-batch, whose plan Spark makes once: a processing-time join)."""
    secret_values: tuple[str, ...] = field(default=(), repr=False)
    """The values of the options named by `secret.options`: scrubbed from the log lines of the process that makes
    clients with `config` (a task runs in another process than the driver that parsed the options)."""
    run: str = ""
    """A streaming query run's own id: its tasks' pooled clients are never handed to another run (pool.py)."""
    ledger: str | None = None
    """Writing exactly-once (`transaction.ledger`): each task writes in a transaction recording the batch id in this
    ledger (transactions.py)."""
    batch_id: int = -1
    """Writing exactly-once (`transaction.batch`): the micro-batch the records belong to."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaOptions:
        """Options as Spark hands them over (keys possibly lower-cased)."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        secrets = tuple(opts[k] for k in opts.get("secret.options", "").lower().split(",") if k in opts)
        extra = {k[len(KAFKA_PREFIX):]: v for k, v in opts.items() if k.startswith(KAFKA_PREFIX)}
        start = opts.get("starting.position", "earliest").strip().lower()
        if start not in ("earliest", "latest"):
            raise _bad_option("starting.position", start, "earliest or latest")
        gaps = opts.get("gaps", "fail").strip().lower()
        if gaps not in ("fail", "count"):
            raise _bad_option("gaps", gaps, "fail or count")
        return cls(
            bootstrap=_required(opts, "bootstrap.servers"),
            topic=_required(opts, "topic"),
            starting_position=start,
            starting_offsets=_offsets_option(opts.get("starting.offsets")),
            starting_timestamp=_positive(opts, "starting.timestamp", int),
            ending_offsets=_offsets_option(opts.get("ending.offsets"), "ending.offsets"),
            ending_offsets_file=opts.get("ending.offsets.file") or None,
            max_records_per_batch=_positive(opts, "max.records.per.batch", int),
            stall_timeout=_positive(opts, "stall.timeout.seconds", float) or client.STALL_TIMEOUT,
            allow_gaps=gaps == "count",
            gap_log=opts.get("gap.log") or None,
            settings=extra,
            decoding=Decoding.parse(opts),
            value_schema=opts.get("value.schema") or None,
            value_subject=opts.get("value.subject") or None,
            key_schema=opts.get("key.schema") or None,
            key_subject=opts.get("key.subject") or None,
            ends_at_read=opts.get("ends.at.read", "false").strip().lower() == "true",
            secret_values=secrets,
            ledger=opts.get("transaction.ledger") or None,
            batch_id=_batch_id(opts),
        )

    @property
    def config(self) -> dict[str, Any]:
        """The librdkafka config for clients of this source or sink."""
        register(self.secret_values)
        return client.client_config(self.bootstrap, self.settings)


def _offsets_option(text: str | None, name: str = "starting.offsets") -> dict[int, int] | None:
    if not text:
        return None
    try:
        return {int(p): int(o) for p, o in json.loads(text).items()}
    except (ValueError, AttributeError) as err:
        raise _bad_option(name, text, 'JSON like {"0": 42, "1": 17}') from err


def moved_ending_offsets(options: KafkaOptions) -> dict[int, int] | None:
    """The offsets `ending.offsets.file` holds for the options' topic; None until it is written (or without one)."""
    if not options.ending_offsets_file:
        return None
    try:
        moved = json.loads(Path(options.ending_offsets_file).read_text()).get(options.topic)
    except FileNotFoundError:
        return None
    return {int(p): int(o) for p, o in moved.items()} if moved is not None else None


def _batch_id(opts: dict[str, str]) -> int:
    """`transaction.batch`, required with `transaction.ledger`."""
    if not opts.get("transaction.ledger"):
        return -1
    text = _required(opts, "transaction.batch")
    if not text.isdigit():
        raise _bad_option("transaction.batch", text, "a micro-batch id (0, 1, ...)")
    return int(text)


def _required(opts: dict[str, str], key: str) -> str:
    value = opts.get(key, "").strip()
    if not value:
        raise DsflowError("DSF-E707", f"dsflow_kafka: option '{key}' is required", hint=f'add .option("{key}", ...)')
    return value


def _positive(opts: dict[str, str], key: str, kind: type) -> Any:
    if key not in opts:
        return None
    try:
        value = kind(opts[key])
    except ValueError:
        value = 0
    if value <= 0:
        raise _bad_option(key, opts[key], "a positive number")
    return value


def _bad_option(key: str, value: str, expected: str) -> DsflowError:
    return DsflowError("DSF-E707", f"dsflow_kafka: option '{key}' is '{value}'; expected {expected}")
