"""PostgreSQL's physical-object operations (the `objects` facet, core/stores.py): apply's executors for what a
postgresql store holds (a CDC stream's slot and publication, a view's snapshot table, a CREATE TABLE ... AS SELECT's
table, pushed-down grants, roles and users' logins) and refresh's look at them. Its objects have no identity to
compare; a table's rows are counted, and a missing table observed, as every table format's
(adapters/tables/objects.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FORMAT = "postgresql"
"""The table format of its tables (core/stores.py), recorded in a table's outputs."""


class PostgresObjects:
    def __init__(self) -> None:
        from dsflow.adapters.postgres.executor import GrantExecutor, LoginExecutor, RoleExecutor

        self.grants = GrantExecutor()
        """Grants on its views and tables, pushed down as PostgreSQL GRANTs (every other grant: recorded only)."""
        self.roles = RoleExecutor()
        """Roles, mapped to PostgreSQL roles where grants are pushed down."""
        self.logins = LoginExecutor()
        """User bindings: the users' PostgreSQL logins, members of their roles' mapped roles."""

    def identities(self, store: Any, names: list[str]) -> dict[str, str]:
        return {}

    def held_records(self, store: Any, outputs: Mapping[str, Any], data: Mapping[str, Any],
                     since: str | None = None) -> int | None:
        """The rows of a table (its format counts them); None for anything else."""
        if data.get("kind") != "table":
            return None
        from dsflow.adapters.tables.objects import OBJECTS as TABLE_OBJECTS

        return TABLE_OBJECTS.held_records(store, outputs, data, since)

    def tables_seen(self, store: Any, relation: Any) -> tuple[list[list[str]] | None, str | None]:
        """An existing table an import adopts, read from the catalog (adopting.py): its columns, and why it cannot
        take the relation's rows as it is."""
        from dsflow.adapters.postgres.adopting import table_seen

        return table_seen(store, relation)

    def executor(self, data: Mapping[str, Any], outputs: Mapping[str, Any], store_type: str | None) -> Any:
        """A CDC stream (its slot and publication), a view kept in a store (its snapshot table), or a table
        (adapters/tables/executor.py, as every table format's)."""
        from dsflow.adapters.postgres.executor import CdcExecutor, ViewTableExecutor, is_cdc

        if is_cdc(dict(data)):
            return CdcExecutor()
        if data.get("kind") == "table":
            from dsflow.adapters.tables.executor import TableExecutor

            return TableExecutor()
        return ViewTableExecutor() if data.get("kind") == "materialized_view" and data.get("store") else None

    def observe(self, project: Any, deployed: Any, cache: dict[str, Any]) -> Any:
        """Refresh of a view's table, a table (a missing one is drift, as a view's), a pushed-down grant, or a CDC
        stream's slot; None for anything else."""
        from dsflow.core.address import Address, Kind

        kind = Address.parse(deployed.address).kind
        if kind is Kind.RELATION and deployed.data.get("kind") == "materialized_view" and deployed.data.get("store"):
            from dsflow.adapters.postgres.views import observe_view

            return observe_view(project, deployed)
        if kind is Kind.RELATION and deployed.data.get("kind") == "table" and deployed.outputs.get("format") == FORMAT:
            from dsflow.adapters.tables.objects import observe_table

            return observe_table(project, deployed)
        if kind is Kind.GRANT and deployed.outputs.get("postgresql"):
            from dsflow.adapters.postgres.grants import observe_grant

            return observe_grant(project, deployed)
        if kind is Kind.BINDING and deployed.outputs.get("postgresql"):
            from dsflow.adapters.postgres.logins import observe_login

            return observe_login(project, deployed)
        if kind is Kind.RELATION and deployed.outputs.get("slot"):
            from dsflow.adapters.postgres.executor import observe

            return observe(project, deployed)
        return None


OBJECTS = PostgresObjects()
