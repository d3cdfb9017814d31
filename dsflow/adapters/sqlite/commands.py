"""The `commands` facet of the views dsflow keeps itself (core/stores.py LOCAL_VIEWS): `dsflow query` over their
snapshot tables, run by SQLite on the environment's file."""

from __future__ import annotations

from typing import Any


class LocalViewCommands:
    def view_place(self, relation: Any) -> tuple[str, str | None]:
        """A view's database and schema: none, one SQLite file."""
        return "", None

    def query_views(self, project: Any, store: str, database: str, select: Any) -> tuple[list[str], list[tuple]]:
        from dsflow.adapters.sqlite import mv

        path = mv.database_path(project.root, project.state_path, project.environment)
        return mv.run_query(path, select.sql(dialect="sqlite"))


COMMANDS = LocalViewCommands()
