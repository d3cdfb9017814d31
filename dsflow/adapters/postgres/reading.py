"""The query driver's side of a CDC source: the streaming DataFrame of a SourceSpec of kind postgres_cdc."""

from __future__ import annotations

import json
from pathlib import Path

from dsflow.adapters.spark.gate import gate_options


def cdc_stream(spark, spec, source):
    """Rows (key, value, timestamp) of the table's change events; the spool lives in the query's checkpoint."""
    reader = (spark.readStream.format("dsflow_postgres_cdc")
              .option("spool.dir", str(Path(spec.checkpoint) / "postgres_cdc" / source.view))
              .option("starting.position", source.starting_position))
    for key, value in source.options.items():
        reader = reader.option(key, value)
    for key, value in source.client_config.items():
        reader = reader.option(f"pg.{key}", value)
    reader = reader.options(**gate_options(spec.name))
    if source.starting_offsets:
        reader = reader.option("starting.offsets", json.dumps(source.starting_offsets))
    return reader.load()
