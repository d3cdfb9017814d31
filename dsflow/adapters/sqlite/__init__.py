"""SQLite: the embedded store of materialized view snapshots."""
