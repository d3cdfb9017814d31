"""An `iceberg` store's settings (the `settings` rule, load/store_settings.py): a warehouse and pyiceberg's SQL
catalog, with a bucket store's or an Azure account's access settings for a warehouse there."""

from __future__ import annotations

from dsflow.adapters.tables.settings import AwsAccess, AzureAccess


class IcebergSettings(AwsAccess, AzureAccess):
    """A warehouse (a folder, s3:// or abfss:// URI) and its catalog."""

    warehouse: str
    catalog_uri: str | None = None
    catalog_name: str | None = None
