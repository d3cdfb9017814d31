"""A PostgreSQL store's settings (the `settings` rule, load/store_settings.py): libpq's connection settings, or one
dsn; the password through env_var()."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dsflow.load.store_settings import StoreSettings


class PostgresSettings(StoreSettings):
    """How to connect to the server (libpq's defaults where a setting is absent)."""

    dsn: str | None = None
    host: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    database: str | None = None
    dbname: str | None = None
    user: str | None = None
    username: str | None = None
    password: str | None = None
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = None
