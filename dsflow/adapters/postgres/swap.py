"""PostgreSQL's side of a blue/green deployment of a query writing a table or a materialized view kept here (the
`swap` facet, core/stores.py Capability.SWAP; engine/bluegreen_tables.py walks it).

The new version writes `<table>_v<N>` beside the production table. Readers switch in ONE transaction:

    LOCK    the views over the production table, then both tables (ACCESS EXCLUSIVE, in the order a reader of a
            view takes them: view first, so a reader holding a view never waits on us while we wait on it)
    RENAME  production -> `<table>_v<N-1>` (kept), new -> production; the batch ledger's rows follow each
    VIEWS   PostgreSQL binds a view to a table's OID, not its name: after a rename a view would read the KEPT
            table. Each view over the production table is therefore defined again (CREATE OR REPLACE VIEW, its
            text as pg_get_viewdef gave it before the renames, its options kept): it now reads the new table.
            Its OID, grants and owner stay, so views over it keep working too.
    GRANTS  the kept table's privileges granted on the new one

A reader blocked on the lock resolves the name again once it gets it (PostgreSQL retries a lookup whose
relation was renamed meanwhile): it reads the new table whole, never an empty or half-renamed one.

Refused (DSF-E965, before anything is built): a materialized view of PostgreSQL's own over the production table (it
holds rows computed from the old table and cannot be re-pointed without being rebuilt), and a foreign key of another
table referencing it (it would go on referencing the kept table).
"""

from __future__ import annotations

from typing import Any

from dsflow.adapters.postgres.mv import LEDGER, connect, qualified, quote
from dsflow.adapters.postgres.rules import DB, SCHEMA, TABLE
from dsflow.errors import DsflowError

Place = tuple[str | None, str, str]
"""(database or None for the store's, schema, table)."""

_DEPENDENT_VIEWS = """
SELECT DISTINCT c.oid, n.nspname, c.relname, c.relkind, c.reloptions
FROM pg_depend d
JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND r.oid = d.objid
JOIN pg_class c ON c.oid = r.ev_class
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = %s::regclass AND c.oid <> d.refobjid
ORDER BY c.oid"""
_REFERENCING = """
SELECT conrelid::regclass::text, conname FROM pg_constraint WHERE contype = 'f' AND confrelid = %s::regclass
AND conrelid <> confrelid"""


def place(relation: Any) -> Place:
    """Where a table or a view's table is (both carry their place in their table options)."""
    opts = relation.table_options
    return opts.get(DB) or None, opts.get(SCHEMA) or "public", opts[TABLE]


def versioned(relation: Any, table: str) -> Any:
    """The relation writing `table` (same database and schema) instead of its own: its location and options."""
    old = place(relation)[2]
    topic = relation.topic[: -len(old)] + table if relation.topic.endswith(old) else table
    return relation.model_copy(update={"topic": topic, "table_options": {**relation.table_options, TABLE: table}})


def refusal(settings: dict[str, str], where: Place) -> str | None:
    """Why the production table cannot be swapped (its dependents that cannot follow a rename); None if it can."""
    database, schema, table = where
    conn = connect(settings, database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (qualified(schema, table),))
            if cur.fetchone()[0] is None:
                return None
            return _refused(cur, qualified(schema, table))
    finally:
        conn.close()


def _refused(cur: Any, name: str) -> str | None:
    cur.execute(_DEPENDENT_VIEWS, (name,))
    held = [f"{s}.{v}" for _, s, v, kind, _ in cur.fetchall() if kind != "v"]
    cur.execute(_REFERENCING, (name,))
    keys = [f"{t} ({c})" for t, c in cur.fetchall()]
    found = ([f"materialized view(s) {', '.join(held)} (they hold rows of the old table)"] if held else []) + \
        ([f"foreign key(s) of {', '.join(keys)} (they would go on referencing the old table)"] if keys else [])
    return "; ".join(found) or None


def exists(settings: dict[str, str], where: Place) -> bool:
    """Whether the catalog holds a table (or view) by that name."""
    from dsflow.adapters.postgres.mv import table_exists

    return table_exists(settings, *where)


def rows(settings: dict[str, str], where: Place) -> list[tuple]:
    """Every row of a table, its columns in name order (two versions compared as multisets)."""
    database, schema, table = where
    conn = connect(settings, database)
    try:
        conn.set_session(readonly=True)
        with conn.cursor() as cur:
            cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT "
                        "attisdropped ORDER BY attname", (qualified(schema, table),))
            names = [quote(r[0]) for r in cur.fetchall()]
            cur.execute(f"SELECT {', '.join(names)} FROM {qualified(schema, table)}")
            return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.rollback()
        conn.close()


def swap(settings: dict[str, str], where: Place, new: str, kept: str) -> list[str]:
    """One transaction of renames: production -> `kept`, `new` -> production, views over it defined again on the
    new table and its grants carried; the views re-pointed. Nothing changes if any step fails (DSF-E965 if a
    dependent that cannot follow appeared since the build)."""
    import psycopg2

    database, schema, table = where
    conn = connect(settings, database)
    try:
        conn.autocommit = False
        with conn.cursor() as cur:
            views = _lock(cur, schema, table, new)
            refused = _refused(cur, qualified(schema, table))
            if refused:
                raise DsflowError("DSF-E965", f"{schema}.{table} cannot be swapped: {refused}",
                                  hint=REFUSED_HINT)
            definitions = [(s, v, opts, _definition(cur, oid)) for oid, s, v, _, opts in views]
            _rename(cur, schema, table, kept)
            _rename(cur, schema, new, table)
            for view_schema, view, options, text in definitions:
                with_ = f" WITH ({', '.join(options)})" if options else ""
                cur.execute(f"CREATE OR REPLACE VIEW {qualified(view_schema, view)}{with_} AS {text}")
            _grant_as(cur, schema, kept, table)
        conn.commit()
        return [f"{s}.{v}" for s, v, _, _ in definitions]
    except psycopg2.Error as err:
        conn.rollback()
        raise DsflowError("DSF-E965", f"the transaction of renames on {schema}.{table} failed and was rolled back: "
                          f"{str(err).strip()}", hint=REFUSED_HINT) from err
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


REFUSED_HINT = ("drop or redefine what depends on the table (a materialized view: over a plain view of the table; "
                "a foreign key: without it), or apply without --blue-green")


def _lock(cur: Any, schema: str, table: str, new: str) -> list[tuple]:
    """The views over the production table, locked first, then both tables."""
    cur.execute(_DEPENDENT_VIEWS, (qualified(schema, table),))
    views = [v for v in cur.fetchall() if v[3] == "v"]
    names = [qualified(s, v) for _, s, v, _, _ in views] + [qualified(schema, table), qualified(schema, new)]
    cur.execute(f"LOCK TABLE {', '.join(names)} IN ACCESS EXCLUSIVE MODE")
    return views


def _definition(cur: Any, oid: int) -> str:
    cur.execute("SELECT pg_get_viewdef(%s::oid)", (oid,))
    return str(cur.fetchone()[0]).rstrip().rstrip(";")


def _rename(cur: Any, schema: str, old: str, new: str) -> None:
    cur.execute(f"ALTER TABLE {qualified(schema, old)} RENAME TO {quote(new)}")
    cur.execute("SELECT to_regclass(%s)", (qualified(schema, LEDGER),))
    if cur.fetchone()[0] is not None:
        cur.execute(f"UPDATE {qualified(schema, LEDGER)} SET view = %s WHERE view = %s", (new, old))


def _grant_as(cur: Any, schema: str, source: str, target: str) -> None:
    """The privileges granted on `source` granted on `target` too (the owner's own are its anyway)."""
    cur.execute("SELECT a.privilege_type, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END "
                "FROM pg_class c, aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee "
                "WHERE c.oid = %s::regclass AND a.grantee <> c.relowner", (qualified(schema, source),))
    for privilege, grantee in cur.fetchall():
        cur.execute(f"GRANT {privilege} ON {qualified(schema, target)} TO {grantee}")


def drop(settings: dict[str, str], where: Place) -> None:
    """A kept old version's table dropped, its ledger rows with it."""
    from dsflow.adapters.postgres.mv import drop_table

    drop_table(settings, *where)


class PostgresSwap:
    """The `swap` facet: blue/green of a table in one transaction of renames."""

    REFUSED_HINT = REFUSED_HINT
    place = staticmethod(place)
    versioned = staticmethod(versioned)
    refusal = staticmethod(refusal)
    exists = staticmethod(exists)
    rows = staticmethod(rows)
    swap = staticmethod(swap)
    drop = staticmethod(drop)


SWAP = PostgresSwap()
