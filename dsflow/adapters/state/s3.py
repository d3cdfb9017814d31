"""The S3 state backend: the object <prefix>/<env>.json, and a lock object <prefix>/<env>.lock.

Every write is one PUT, so the state object is never half written. A compare-and-swap write reads the
object (body and ETag), compares its serial and lineage, and PUTs with `If-Match: <ETag>` (or
`If-None-Match: *` when there is no object yet): a writer that raced in between makes S3 answer 412,
reported as DSF-E804. The lock is an object created with `If-None-Match: *` holding the LockInfo JSON;
it is deleted with `If-Match` on its own ETag, so a lock taken over after a force-unlock is left alone.
The redaction key of the secret markers is the object <prefix>/<env>.key, created once with `If-None-Match: *`.
The event log is one object per event under <prefix>/<env>.events/, named by its time and id so that a listing
is in time order and `since` is a `StartAfter`.

Credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, an instance role, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsflow.adapters.state.base import (
    LockInfo,
    check_current,
    check_lineage,
    check_unlock,
    check_writable,
    locked_error,
    new_redaction_key,
    parse_redaction_key,
    stale_error,
)
from dsflow.core.events import Event
from dsflow.core.model import StateSettings
from dsflow.core.state import State
from dsflow.errors import DsflowError


class S3StateBackend:
    """State of one environment as an S3 object."""

    def __init__(self, bucket: str, prefix: str, environment: str, endpoint_url: str | None = None,
                 region: str | None = None):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.environment = environment
        self.endpoint_url = endpoint_url
        self.region = region
        self._s3: Any = None

    @property
    def key(self) -> str:
        return f"{self.prefix}/{self.environment}.json" if self.prefix else f"{self.environment}.json"

    @property
    def lock_key(self) -> str:
        return self.key.removesuffix(".json") + ".lock"

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def _client(self) -> Any:
        if self._s3 is None:
            import boto3

            self._s3 = boto3.client("s3", endpoint_url=self.endpoint_url, region_name=self.region)
        return self._s3

    def _get(self, key: str) -> tuple[bytes, str] | None:
        """The object's body and ETag, or None if there is none."""
        try:
            found = self._client().get_object(Bucket=self.bucket, Key=key)
            return found["Body"].read(), found["ETag"]
        except Exception as err:  # noqa: BLE001 - botocore's errors are classified by code
            if _code(err) in ("NoSuchKey", "404"):
                return None
            raise self._unreachable(err) from err

    def _put(self, key: str, body: str, **condition: str) -> None:
        self._client().put_object(Bucket=self.bucket, Key=key, Body=body.encode(),
                                  ContentType="application/json", **condition)

    def _unreachable(self, err: Exception) -> DsflowError:
        return DsflowError("DSF-E805", f"state backend {self.where} failed: {err}",
                           hint="check state.bucket, state.endpoint_url, state.region and the AWS credentials "
                                "in the environment (the bucket must exist)")

    def peek(self) -> State:
        """`read`: a GET of the object changes nothing."""
        return self.read()

    def read(self) -> State:
        found = self._get(self.key)
        return self._parse(found[0]) if found else State(environment=self.environment)

    def _parse(self, body: bytes) -> State:
        try:
            state = State.model_validate_json(body)
        except ValueError as err:
            raise DsflowError("DSF-E801", f"state object {self.where} is unreadable: {err}",
                              hint="restore an earlier version of the object (enable bucket versioning)") from err
        return check_lineage(state, self.where)

    @property
    def events_prefix(self) -> str:
        return self.key.removesuffix(".json") + ".events/"

    def append_events(self, events: list[Event]) -> None:
        for e in events:
            try:
                self._put(f"{self.events_prefix}{e.time}_{e.id}.json", e.model_dump_json())
            except Exception as err:  # noqa: BLE001
                raise self._unreachable(err) from err

    def read_events(self, since: str | None = None) -> list[Event]:
        extra = {"StartAfter": f"{self.events_prefix}{since}_~"} if since else {}  # '~' sorts after any id
        found = []
        try:
            pages = self._client().get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.events_prefix, **extra)
            keys = [item["Key"] for page in pages for item in page.get("Contents", ())]
        except Exception as err:  # noqa: BLE001
            raise self._unreachable(err) from err
        for key in sorted(keys):
            body = self._get(key)
            if body is not None:
                found.append(Event.model_validate_json(body[0]))
        return found

    @property
    def key_key(self) -> str:
        return self.key.removesuffix(".json") + ".key"

    def redaction_key(self) -> bytes:
        where = f"s3://{self.bucket}/{self.key_key}"
        found = self._get(self.key_key)
        if found is None:
            try:
                self._put(self.key_key, new_redaction_key(), IfNoneMatch="*")
            except Exception as err:  # noqa: BLE001
                if _code(err) not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    raise self._unreachable(err) from err
            found = self._get(self.key_key)  # ours, or the one another process made first
        if found is None:
            raise DsflowError("DSF-E912", f"the redaction key {where} vanished while it was being made",
                              hint="run the command again")
        return parse_redaction_key(found[0].strip(), where)

    def write(self, state: State, *, expected_serial: int | None = None) -> None:
        check_writable(state, self.where)
        body = state.model_dump_json(indent=2)
        condition: dict[str, str] = {}
        if expected_serial is not None:
            found = self._get(self.key)
            stored = self._parse(found[0]) if found else None
            check_current((stored.serial, stored.lineage) if stored else None, state, expected_serial, self.where)
            condition = {"IfMatch": found[1]} if found else {"IfNoneMatch": "*"}
        try:
            self._put(self.key, body, **condition)
        except Exception as err:  # noqa: BLE001
            if _code(err) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey"):
                raise stale_error(self.where, "another writer replaced it at the same time") from err
            raise self._unreachable(err) from err

    @contextmanager
    def lock(self, operation: str) -> Iterator[LockInfo]:
        info = LockInfo.new(operation)
        try:
            self._put(self.lock_key, info.to_json(), IfNoneMatch="*")
        except Exception as err:  # noqa: BLE001
            if _code(err) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                raise locked_error(self.lock_holder(), f"s3://{self.bucket}/{self.lock_key}") from None
            raise self._unreachable(err) from err
        try:
            yield info
        finally:
            self._release(info)

    def _release(self, info: LockInfo) -> None:
        found = self._get(self.lock_key)
        if found is None or LockInfo.from_json(found[0]) != info:
            return  # force-unlocked, and maybe taken by someone else since
        try:
            self._client().delete_object(Bucket=self.bucket, Key=self.lock_key, IfMatch=found[1])
        except Exception as err:  # noqa: BLE001
            if _code(err) not in ("PreconditionFailed", "412", "NoSuchKey", "404"):
                raise self._unreachable(err) from err

    def lock_holder(self) -> LockInfo | None:
        found = self._get(self.lock_key)
        return LockInfo.from_json(found[0]) if found else None

    def force_unlock(self, lock_id: str) -> None:
        found = self._get(self.lock_key)
        check_unlock(LockInfo.from_json(found[0]) if found else None, lock_id)
        assert found is not None  # check_unlock: there is a lock
        try:
            self._client().delete_object(Bucket=self.bucket, Key=self.lock_key, IfMatch=found[1])
        except Exception as err:  # noqa: BLE001
            if _code(err) in ("PreconditionFailed", "412"):
                raise DsflowError(
                    "DSF-E803", "the lock changed hands while it was being removed",
                    hint="run 'dsflow force-unlock' again with the new holder's id if it is stale") from err
            raise self._unreachable(err) from err


def _code(err: Exception) -> str:
    """The S3 error code of a botocore ClientError ('' for anything else)."""
    response = getattr(err, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def from_settings(settings: StateSettings, root: Path, environment: str) -> S3StateBackend:
    if not settings.bucket:
        raise DsflowError("DSF-E805", "the s3 state backend needs state.bucket", hint="set it in dsflow.yml")
    return S3StateBackend(settings.bucket, settings.prefix or settings.project, environment,
                          endpoint_url=settings.endpoint_url, region=settings.region)
