"""The settings of the lake and warehouse table stores (the `settings` rule, load/store_settings.py): an `s3`,
`filesystem`, `adls`, `databricks` or `snowflake` store's properties, one model per kind."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dsflow.load.store_settings import AwsCredentials, StoreSettings



class AwsAccess(AwsCredentials):
    """An S3-compatible endpoint and AWS credentials."""

    endpoint_url: str | None = None


class AzureAccess(StoreSettings):
    """An Azure storage account's credential (one of: key, SAS token, service principal) and endpoint."""

    account_key: str | None = None
    sas_token: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    tenant_id: str | None = None
    endpoint: str | None = None


class S3Settings(AwsAccess):
    """Delta tables under s3://bucket/prefix."""

    bucket: str
    prefix: str | None = None


class FilesystemSettings(StoreSettings):
    """Delta tables under a local folder (relative to the project, or absolute)."""

    path: str


class AdlsSettings(AzureAccess):
    """Delta tables under abfss://container@account.dfs.core.windows.net/prefix."""

    account: str
    container: str
    prefix: str | None = None


class DatabricksSettings(AwsAccess):
    """Delta tables in a bucket or a local folder, registered in a workspace's catalog."""

    bucket: str | None = None
    prefix: str | None = None
    path: str | None = None
    host: str | None = None
    token: str | None = None
    warehouse_id: str | None = None
    catalog: str | None = None


class SnowflakeSettings(StoreSettings):
    """A Snowflake account and how to connect to it."""

    account: str
    user: str | None = None
    password: str | None = None
    warehouse: str | None = None
    role: str | None = None
    database: str | None = None
    schema_: str | None = Field(None, alias="schema")
    host: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    protocol: Literal["http", "https"] | None = None
    authenticator: str | None = None
    token: str | None = None


SETTINGS: dict[str, type[StoreSettings]] = {
    "s3": S3Settings, "filesystem": FilesystemSettings, "adls": AdlsSettings, "databricks": DatabricksSettings,
    "snowflake": SnowflakeSettings,
}
