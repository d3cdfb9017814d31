"""Iceberg's physical-object operations (the `objects` facet, core/stores.py): a table's rows, as for every table
format (adapters/tables/objects.py)."""

from dsflow.adapters.tables.objects import OBJECTS

__all__ = ["OBJECTS"]
