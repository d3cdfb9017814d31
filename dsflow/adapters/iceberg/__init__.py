"""Apache Iceberg tables through pyiceberg and its SQL catalog: what CREATE TABLE ... AS SELECT writes into an
`iceberg` store, and what `dsflow entity` browses there.

    catalog.py   the store's catalog (SQLite file by default, a PostgreSQL URI for teams) and its warehouse
                 (a local folder or s3://), from the store's properties
    tables.py    `IcebergFormat`, the table format (adapters/tables/base.py `TableFormat`): create, add columns,
                 drop, count, write one micro-batch exactly once, describe, list

The table format is named in the table formats' registry (adapters/tables `FORMATS`) and the store type in the
registries that exist (docs/architecture.md, "Adding a store").
"""
