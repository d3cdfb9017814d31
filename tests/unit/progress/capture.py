"""How spark_progress.json's micro-batch progress was captured (run by hand, not by the tests: it starts Spark).

    python3 tests/unit/progress/capture.py > /tmp/progress.json

Two queries on the rate source (200 rows/s), 500 ms trigger, noop sink, for 45 s: a 1 s tumbling-window count with a
2 s watermark (its progress has `eventTime`) and a stateless one (none). The fixture keeps some of their batches."""

from __future__ import annotations

import json
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    spark = (SparkSession.builder.master("local[1]").appName("progress-capture")
             .config("spark.sql.shuffle.partitions", "1").config("spark.ui.enabled", "false").getOrCreate())
    rate = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
    windowed = rate.withWatermark("timestamp", "2 seconds").groupBy(F.window("timestamp", "1 second")).count()
    watermarked = (windowed.writeStream.format("noop").outputMode("append")
                   .trigger(processingTime="500 milliseconds")
                   .option("checkpointLocation", "/tmp/progress-capture/watermarked").start())
    stateless = (rate.select("value").writeStream.format("noop").trigger(processingTime="500 milliseconds")
                 .option("checkpointLocation", "/tmp/progress-capture/stateless").start())
    time.sleep(45)
    out = {name: [json.loads(p.json) for p in query.recentProgress]
           for name, query in (("watermarked", watermarked), ("stateless", stateless))}
    watermarked.stop()
    stateless.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
