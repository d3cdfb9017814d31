"""The source of `dsflow test` (adapters/spark/unittest_run.py): a test's input records, fed batch by batch.

A folder holds one file per source relation, `<n>.json`: the arrival batches of its raw records
[key, value (JSON text or null), record time (epoch ms), offset], and a file `released` with how many batches the
test has let arrive. The streaming reader's offset is that count (`{"batch": n}`), so each micro-batch reads the
batches released since the last one: the test releases one, waits for the query to process all available data
(`processAllAvailable`, which also runs the watermark's batch without data), and the watermark moves as it would
in production, once per arrival batch.

Its rows are those of a log (key, value, timestamp, partition, offset): the query's source view parses them as it
parses a topic's (frames.source_view, TEXT layout). DEAD LETTER rows are appended to `dead_letters.jsonl` in the
folder (`send_rows`), where the test reads them back.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit

KIND = "dsflow_test"
SCHEMA = "key string, value string, timestamp timestamp, partition int, offset long"
RELEASED = "released"
DEAD_LETTERS = "dead_letters.jsonl"


class TestInputSource(DataSource):
    """Options: `dir` (the test's folder), `input` (the file of this source's batches in it)."""

    @classmethod
    def name(cls) -> str:
        return KIND

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _Reader(Path(self.options["dir"]), self.options["input"])


class _Batches(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


class _Reader(DataSourceStreamReader):
    def __init__(self, folder: Path, name: str) -> None:
        self.folder, self.name = folder, name

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        released = int((self.folder / RELEASED).read_text())  # replaced whole (`release`), never read half-written
        return {"batch": max(released, int((start or {}).get("batch", 0)))}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_Batches(int(start["batch"]), int(end["batch"]))]

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, _Batches)
        batches = json.loads((self.folder / self.name).read_text())
        for batch in batches[partition.start:partition.end]:
            for key, value, time_ms, offset in batch:
                yield key, value, dt.datetime.fromtimestamp(time_ms / 1000, tz=dt.timezone.utc), 0, offset

    def commit(self, end: dict) -> None:
        pass


def release(folder: Path, batches: int) -> None:
    """Let `batches` arrival batches be read: the count file replaced at once, so a reader never sees it empty."""
    partial = folder / f"{RELEASED}.tmp"
    partial.write_text(str(batches))
    os.replace(partial, folder / RELEASED)


class TestSpark:
    """The `spark` facet of the test source (facets.py registers it beside the stores' facets)."""

    kinds: tuple[str, ...] = (KIND,)

    def client_option(self, setting: str) -> str:
        return setting

    def data_sources(self) -> list[type]:
        return [TestInputSource]

    def stream(self, spark: Any, spec: Any, source: Any) -> Any:
        return spark.readStream.format(KIND).options(**source.client_config).load()

    def value_layout(self, source: Any) -> str:
        from dsflow.formats.decoding import TEXT

        return TEXT

    def send_rows(self, config: dict[str, str], topic: str, records: list) -> None:
        """DEAD LETTER rows: (key, value, headers), one JSON line each in the test's folder."""
        lines = [json.dumps({"key": key.decode() if key else None, "value": value.decode(), "headers": dict(headers)})
                 for key, value, headers in records]
        with open(Path(config["dir"]) / DEAD_LETTERS, "a", encoding="utf-8") as out:
            out.write("".join(f"{line}\n" for line in lines))


SPARK = TestSpark()
