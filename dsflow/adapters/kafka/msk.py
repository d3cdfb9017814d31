"""Amazon MSK IAM authentication: `sasl.mechanism: AWS_MSK_IAM` in a Kafka store's properties.

librdkafka has no AWS_MSK_IAM mechanism; MSK takes IAM identities through SASL/OAUTHBEARER, each token a SigV4
presigned `kafka-cluster:Connect` request made by aws-msk-iam-sasl-signer-python from the AWS credentials of the
process (environment, profile, instance or task role; or a named profile, or a role to assume). So a store's
settings stay what the user wrote, and every client dsflow makes for the store (admin, producer, consumer, on the
driver and the executors alike) gets them through `librdkafka_config`: the mechanism becomes OAUTHBEARER with a
token callback, and dsflow's own `aws.*` settings are taken out.

    security.protocol: SASL_SSL
    sasl.mechanism: AWS_MSK_IAM
    aws.region: eu-west-1            # required: the cluster's region (the token is signed for it)
    aws.profile: analytics           # optional: a profile of ~/.aws/config
    aws.role.arn: arn:aws:iam::...   # optional: a role to assume for the tokens
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsflow.adapters.kafka.acls import is_own

MECHANISM = "AWS_MSK_IAM"
REGION, PROFILE, ROLE = "aws.region", "aws.profile", "aws.role.arn"
SETTINGS = (REGION, PROFILE, ROLE)
"""dsflow's own settings of an MSK IAM store: not librdkafka's, never passed to a client."""


def is_msk_iam(config: Mapping[str, Any]) -> bool:
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms") or ""
    return str(mechanism).strip().upper() == MECHANISM


class TokenSource:
    """librdkafka's `oauth_cb`: a fresh MSK IAM token and its expiry (seconds since the epoch) when asked."""

    def __init__(self, region: str, profile: str = "", role_arn: str = "") -> None:
        self.region, self.profile, self.role_arn = region, profile, role_arn

    def __call__(self, oauthbearer_config: Any = None) -> tuple[str, float]:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

        if self.role_arn:
            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_role_arn(self.region, self.role_arn)
        elif self.profile:
            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_profile(self.region, self.profile)
        else:
            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(self.region)
        return token, expiry_ms / 1000


def librdkafka_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` as librdkafka takes it: without dsflow's own `acl.*` settings (adapters/kafka/acls.py); an
    AWS_MSK_IAM store's settings become OAUTHBEARER with a TokenSource."""
    config = {k: v for k, v in config.items() if not is_own(k)}
    if not is_msk_iam(config):
        return dict(config)
    out = {k: v for k, v in config.items() if k not in (*SETTINGS, "sasl.mechanism", "sasl.mechanisms")}
    out["sasl.mechanism"] = "OAUTHBEARER"
    out["oauth_cb"] = TokenSource(str(config.get(REGION, "")), str(config.get(PROFILE, "")),
                                  str(config.get(ROLE, "")))
    return out
