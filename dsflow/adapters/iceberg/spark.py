"""Iceberg's side of the query driver (the `spark` facet, adapters/spark/facets.py): a table of the store's
catalog read as the stream of its appended snapshots (`dsflow_iceberg`, reading.py), named NAMESPACE.TABLE;
written like every table format, one commit per micro-batch (adapters/tables/spark.py, tables.py here)."""

from __future__ import annotations

from dsflow.adapters.tables.spark import TableSpark

SPARK = TableSpark(kinds=("iceberg",), reader="dsflow.adapters.iceberg.reading:IcebergDataSource",
                   location_option="table")
