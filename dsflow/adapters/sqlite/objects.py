"""The `objects` facet of the views dsflow keeps itself (a materialized view without a store; core/stores.py
LOCAL_VIEWS): apply's executor of a view's snapshot table in the environment's SQLite file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsflow.core.address import Address


class ViewExecutor:
    """A materialized view's snapshot table in the environment's SQLite file; deleting it drops the table."""

    def create(self, ctx: Any, change: Any) -> dict[str, Any]:
        from dsflow.adapters.sqlite import mv

        relation = ctx.project.relation(Address.parse(change.address).name)
        assert relation is not None  # the change is of one of the project's relations
        database = mv.database_path(ctx.project.root, ctx.project.state_path, ctx.project.environment)
        mv.ensure_table(database, relation.topic, [(c.name, c.type) for c in relation.columns], relation.primary_key)
        return {"database": str(database), "table": relation.topic}

    def update(self, ctx: Any, change: Any, deployed: Any) -> dict[str, Any]:
        """Ensured, and the columns the change adds added in place (ALTER TABLE ADD COLUMN: rows kept, NULL)."""
        from dsflow.adapters.sqlite import mv
        from dsflow.adapters.tables import added_columns

        outputs = self.create(ctx, change)
        added = added_columns(change.before, change.after)
        if added:
            mv.add_columns(outputs["database"], outputs["table"], added)
        return outputs

    def delete(self, ctx: Any, deployed: Any) -> None:
        from dsflow.adapters.sqlite import mv

        if deployed.outputs.get("database") and deployed.outputs.get("table"):
            mv.drop_table(deployed.outputs["database"], deployed.outputs["table"])


class LocalViews:
    """Views without a store: every one is a snapshot table of the environment's SQLite file."""

    def __init__(self) -> None:
        self.views = ViewExecutor()

    def executor(self, data: Mapping[str, Any], outputs: Mapping[str, Any], store_type: str | None) -> Any:
        return self.views if data.get("kind") == "materialized_view" else None


OBJECTS = LocalViews()
