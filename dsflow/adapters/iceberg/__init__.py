"""Apache Iceberg tables through pyiceberg and its SQL catalog: what CREATE TABLE ... AS SELECT writes into an
`iceberg` store, and what `dsflow entity` browses there.

    catalog.py   the store's catalog (SQLite file by default, a PostgreSQL URI for teams) and its warehouse
                 (a local folder or s3://), from the store's properties
    tables.py    `IcebergFormat`, the table format (adapters/tables/base.py `TableFormat`): create, add columns,
                 drop, count, write one micro-batch exactly once, describe, list

The store kind (core/stores.py) names `iceberg` as its table format, and `tables.TABLES` is the format's
implementation, found through the kind (docs/architecture.md, "The store protocol and adding a store").
"""
