"""PostgreSQL as a change-data-capture source: logical replication with the built-in pgoutput plugin.

    admin.py       connection settings, slot and publication names, creating and dropping them (apply/destroy)
    pgoutput.py    a decoder of the pgoutput protocol (version 1): Begin, Relation, Insert, Update, Delete,
                   Truncate, Commit
    values.py      pgoutput's text values as JSON fragments (numeric stays exact, timestamptz in UTC ISO), and
                   which declared types a column's type fits (schema changes, values.fits)
    changes.py     the change reader: an initial snapshot consistent with the slot, then the slot's
                   transactions as change events (op c/u/d/r, before/after images, source LSN, commit time)
    datasource.py  the Spark Python data source `dsflow_postgres_cdc` (one partition, LSN offsets, the slot
                   acknowledged in commit(end), SupportsTriggerAvailableNow)

psycopg2 is imported inside functions only; replication connections are made where they are used.
"""
