"""Iceberg's entity commands (the `commands` facet, core/stores.py): `dsflow entity` lists the namespaces and
tables of the store's catalog, and describes and prints a table `NAMESPACE.TABLE`, as for every table format
(adapters/tables/commands.py)."""

from dsflow.adapters.tables.commands import TableCommands


class IcebergCommands(TableCommands):
    entity_paths = {"Iceberg": "[NAMESPACE]"}


COMMANDS = IcebergCommands()
