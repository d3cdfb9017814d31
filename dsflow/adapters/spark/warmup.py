"""The warm-up a standby driver (standby.py) runs once its session is built: one availableNow micro-batch of a
Python data source that reads one row from nowhere and writes it nowhere, with Arrow reads and writes as dsflow's
data sources have them.

A query over a Python data source makes Spark start several Python processes on its first batch: a daemon per
kind of planning (the source's schema and reader, the sink's writer, each batch's commit) and the worker daemon for
the read and write tasks. Spark keeps those daemons for the life of the application, so after this warm-up a
query handed to the standby finds them running. The warm-up touches no store and writes its checkpoint in the
standby's own folder, removed afterwards.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (DataSource, DataSourceStreamArrowWriter, DataSourceStreamReader, InputPartition,
                                    WriterCommitMessage)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

NAME = "dsflow_warmup"


class WarmupSource(DataSource):
    """Reads one row, writes nothing."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "id BIGINT"

    def streamReader(self, schema) -> WarmupReader:
        return WarmupReader()

    def streamWriter(self, schema, overwrite: bool) -> WarmupWriter:
        return WarmupWriter()


class WarmupReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        """One batch: the end is always 1."""

    def latestOffset(self, start: dict, limit) -> dict:
        return {"n": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(n) for n in range(int(start["n"]), int(end["n"]))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow

        yield pyarrow.RecordBatch.from_pydict({"id": pyarrow.array([partition.value], pyarrow.int64())})

    def commit(self, end: dict) -> None:
        """Nothing to do."""


class WarmupWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list, batchId: int) -> None:
        """Nothing to do."""

    def abort(self, messages: list, batchId: int) -> None:
        """Nothing to do."""


def warm(spark, folder: Path, timeout: float = 300.0) -> None:
    """Run the warm-up stream to its end (checkpoint under `folder`, removed after)."""
    checkpoint = folder / "warmup-checkpoint"
    spark.dataSource.register(WarmupSource)
    try:
        query = (spark.readStream.format(NAME).load().writeStream.format(NAME)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        if not query.awaitTermination(timeout):
            query.stop()
        error = query.exception()
        if error is not None:
            raise RuntimeError(str(error))
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
