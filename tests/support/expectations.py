"""Helpers for tests of expectations and source error policies: one availableNow run that returns the finished
Spark query (its progress, or its error), and a dead-letter topic's records with their headers.

    finished = run_to_end(spark, project, "checked", tmp_path)       # the StreamingQuery, terminated
    letters = dead_letters(broker, project.dlq_topic(query))        # [(value dict, {header: text})]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dsflow.adapters.kafka import client
from dsflow.adapters.spark.driver import start_query
from dsflow.adapters.spark.translate import query_spec
from dsflow.core.model import Project


def spec_of(project: Project, name: str, work: Path):
    """The driver spec of query `name` with its checkpoint and status file under `work`."""
    query = next(q for q in project.queries if q.fqn == f"analytics.public.{name}")
    return query_spec(project, query, "test", str(work / "checkpoints" / name), str(work / f"{name}.status"))


def run_to_end(spark, project: Project, name: str, work: Path, timeout: float = 120) -> Any:
    """One availableNow run of the query `name`; the terminated StreamingQuery (its exception not raised)."""
    running = start_query(spark, spec_of(project, name, work), available_now=True)
    try:
        assert running.awaitTermination(timeout), f"{name} did not finish in {timeout} s"
    except Exception:  # noqa: BLE001 - a failed query raises here; the caller reads running.exception()
        pass
    return running


def dead_letters(broker: str, topic: str) -> list[tuple[dict, dict[str, str]]]:
    """Every record of a dead-letter topic: its JSON value and its headers as text."""
    def convert(message: Any) -> tuple[dict, dict[str, str]]:
        headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in (message.headers() or [])}
        return json.loads(message.value()), headers

    try:
        return client.read_to_end(broker, topic, convert=convert)
    except Exception:  # noqa: BLE001 - no dead letter was ever sent: the topic does not exist
        return []
