"""Spark's own Kafka connector for the benchmarks: dsflow/adapters/kafka/connector.py, where real-time queries
get it too.

    python bench/spark_kafka.py          # resolve (first time) and print the jars, one a line
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsflow.adapters.kafka.connector import (  # noqa: E402,F401
    CONNECTOR_ARTIFACT, CONNECTOR_VERSION, OFFLINE_ENV, Connector, ResolveError, jars)

if __name__ == "__main__":
    try:
        connector = jars()
    except ResolveError as err:
        print(f"error: {err.message}", file=sys.stderr)
        sys.exit(1)
    print("\n".join(str(j) for j in connector.jars))
