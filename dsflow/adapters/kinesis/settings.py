"""A Kinesis store's settings (the `settings` rule, load/store_settings.py): a region and an endpoint, and
credentials through env_var() (else the AWS default chain)."""

from __future__ import annotations

from dsflow.load.store_settings import StoreSettings


class KinesisSettings(StoreSettings):
    """Where the streams are and how to sign requests to them."""

    region: str | None = None
    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
