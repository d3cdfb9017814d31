"""Helpers for changelog tests: producing keyed changes with tombstones, and reading a changelog topic back
as its final content (the last record of each key; a tombstone deletes the key).

    produce_changes(broker, project, "users", [("u1", {...}), ("u2", None)])
    changelog_content(broker, project, "active_users")    # {key: value dict}
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from dsflow.adapters.kafka.client import DeliveryErrors, client_config, flush_or_raise, new_producer, produce_one
from dsflow.core.model import Project
from support.streaming import records, topic


def produce_changes(broker: str, project: Project, relation: str, changes: list[tuple[str, dict | None]],
                    timestamps: list[int] | None = None) -> None:
    """Produce (key, value) in order; a None value is a tombstone. `timestamps` sets the records' timestamps
    (epoch ms), which are the event time of a tombstone."""
    errors = DeliveryErrors()
    producer = new_producer(client_config(broker, None), errors)
    name = topic(project, relation)
    for index, (key, value) in enumerate(changes):
        payload = None if value is None else json.dumps(value)
        if timestamps is None:
            produce_one(producer, name, payload, key)
        else:
            producer.produce(name, payload, key, timestamp=timestamps[index])
            producer.poll(0)
    flush_or_raise(producer, name, len(changes), errors)


def changelog_content(broker: str, project: Project, relation: str) -> tuple[dict[str, dict], int]:
    """The topic read as a changelog: ({key: last value}, number of tombstones seen)."""
    latest: dict[str, tuple[int, str | None]] = {}
    tombstones = 0
    for record in records(broker, project, relation):
        tombstones += record["value"] is None
        if record["key"] not in latest or record["offset"] > latest[record["key"]][0]:
            latest[record["key"]] = (record["offset"], record["value"])
    return {k: json.loads(v) for k, (_, v) in latest.items() if v is not None}, tombstones


def keyed_rows(rows, keys: tuple[str, ...], value=lambda v: v) -> dict[tuple, dict]:
    """{key: row} of rows (dicts) with null fields left out and `value` applied to the others; two rows under one
    key is a failure, not an overwrite."""
    out: dict[tuple, dict] = {}
    for found in rows:
        key = tuple(found.get(k) for k in keys)
        assert key not in out, f"two rows keyed {key}"
        out[key] = {k: value(v) for k, v in found.items() if v is not None}
    return out


def duckdb_answer(tables: dict[str, str], snapshots: dict[str, Iterable[dict]], select: str, keys: tuple[str, ...],
                  value=lambda v: v) -> dict[tuple, dict]:
    """DuckDB's answer to `select` over the final snapshots of the inputs, keyed as `keyed_rows` keys it.
    `tables`: {name: its columns as DDL ("userid VARCHAR, score BIGINT")}; each snapshot row gives every column."""
    import duckdb

    con = duckdb.connect()
    for name, columns in tables.items():
        con.execute(f"CREATE TABLE {name} ({columns})")
        names = [c.split()[0] for c in columns.split(",")]
        for row in snapshots[name]:  # a loop: executemany refuses an empty list (an emptied input)
            con.execute(f"INSERT INTO {name} VALUES ({', '.join('?' * len(names))})", [row[n] for n in names])
    cursor = con.execute(select)
    found = [d[0] for d in cursor.description]
    return keyed_rows([dict(zip(found, r, strict=False)) for r in cursor.fetchall()], keys, value)
