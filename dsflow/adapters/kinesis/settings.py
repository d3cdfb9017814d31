"""A Kinesis store's settings (the `settings` rule, load/store_settings.py): a region and an endpoint, and
credentials through env_var() (else the AWS default chain)."""

from __future__ import annotations

from dsflow.load.store_settings import AwsCredentials


class KinesisSettings(AwsCredentials):
    """Where the streams are (a region, or an endpoint such as kinesalite's) and how to sign requests to them."""

    endpoint: str | None = None
