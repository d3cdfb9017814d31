"""Building a SparkSession with dsflow's Python data sources registered."""

from __future__ import annotations

import os
from collections.abc import Mapping

BASE_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    "spark.driver.memory": "1g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
}


def build_session(master: str, app_name: str, conf: Mapping[str, str]):
    """A SparkSession for `master` with BASE_CONF, then the project's conf on top."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**BASE_CONF, **conf}.items():
        builder = builder.config(key, str(value))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    register_data_sources(session)
    return session


def register_data_sources(session) -> None:
    from dsflow.adapters.kafka.datasource import KafkaDataSource

    session.dataSource.register(KafkaDataSource)
    from dsflow.adapters.postgres.datasource import PostgresCdcDataSource

    session.dataSource.register(PostgresCdcDataSource)
    from dsflow.adapters.kinesis.datasource import KinesisDataSource

    session.dataSource.register(KinesisDataSource)
