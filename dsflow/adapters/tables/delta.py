"""Delta Lake tables with delta-rs (the `deltalake` package): local folders and s3://.

Appends for streams, MERGE on the primary key for changelogs and aggregations (a row whose __keep is
false deletes its key: a changelog's delete). Each micro-batch is one
Delta commit that also carries a transaction action (app id = the query and its checkpoint, version =
the batch id): a batch whose id the table already holds for that app id is skipped, so a batch replayed
after a crash between the Delta commit and Spark's checkpoint commit is not written twice.

On S3 and Azure Data Lake Storage (adls.py) the store's settings become delta-rs storage options. Concurrent
writers to one S3 table would need a locking provider; dsflow runs one writer per table, so renames are allowed
without one (AWS_S3_ALLOW_UNSAFE_RENAME). Azure's object store commits with put-if-absent and needs none.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from dsflow.adapters.tables import adls
from dsflow.adapters.tables.base import TableRef
from dsflow.errors import DsflowError

KEEP = "__keep"
"""A changelog's batch column: false deletes the row's key (spark/frames.py)."""

_TYPES = [(r"^BIGINT|^LONG", "int64"), (r"^INT|^INTEGER", "int32"), (r"^SMALLINT|^SHORT", "int16"),
          (r"^TINYINT|^BYTE", "int8"), (r"^DOUBLE", "float64"), (r"^FLOAT|^REAL", "float32"),
          (r"^BOOL", "bool"), (r"^DATE$", "date32"), (r"^TIMESTAMP", "timestamp"), (r"^DECIMAL|^NUMERIC", "decimal"),
          (r"^BINARY|^BYTES|^VARBINARY", "binary")]


def arrow_type(sql_type: str):
    """The Arrow (and so Delta) type of a dsflow column type: an ARRAY, MAP or STRUCT as one of its element types
    (formats/arrow.py: the shape Spark's toArrow gives a batch); anything unknown is stored as text."""
    import pyarrow as pa

    upper = sql_type.strip().upper()
    if upper.startswith(("ARRAY", "MAP", "STRUCT")):
        from dsflow.formats.arrow import arrow_type as nested

        return nested(sql_type)
    name = next((t for pattern, t in _TYPES if re.match(pattern, upper)), "string")
    if name == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if name == "decimal":
        found = re.search(r"\((\d+)\s*,\s*(\d+)\)", upper)
        return pa.decimal128(int(found.group(1)), int(found.group(2))) if found else pa.decimal128(38, 18)
    return getattr(pa, name)() if name != "bool" else pa.bool_()


def storage_options(ref: TableRef) -> dict[str, str] | None:
    """delta-rs options for an s3://, abfss:// or az:// table from the store's settings (None for a local table)."""
    if adls.is_azure(ref.location):
        return adls.storage_options(ref.location, ref.settings)
    if not ref.location.startswith("s3://"):
        return None
    settings = ref.settings
    options = {"AWS_S3_ALLOW_UNSAFE_RENAME": "true", "AWS_REGION": settings.get("region") or "us-east-1"}
    endpoint = settings.get("endpoint_url")
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    for key, option in (("access_key_id", "AWS_ACCESS_KEY_ID"), ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
                        ("session_token", "AWS_SESSION_TOKEN")):
        if settings.get(key):
            options[option] = settings[key]
    return options


def _table(ref: TableRef):
    from deltalake import DeltaTable

    try:
        return DeltaTable(ref.location, storage_options=storage_options(ref))
    except Exception as err:  # noqa: BLE001 - delta-rs raises several kinds for a missing or unreadable table
        raise DsflowError("DSF-E751", f"cannot open the Delta table at {ref.location}: {err}",
                          hint="check the store's settings; 'dsflow apply' creates the table") from err


class DeltaFormat:
    """The Delta Lake table format."""

    def exists(self, ref: TableRef) -> bool:
        from deltalake import DeltaTable

        try:
            return DeltaTable.is_deltatable(ref.location, storage_options=storage_options(ref))
        except Exception:  # noqa: BLE001 - an unreachable bucket reads as "not there" here; create reports it
            return False

    def create(self, ref: TableRef, columns: list[tuple[str, str]], key: list[str]) -> None:
        """Create the table with the query's output columns unless it exists."""
        import pyarrow as pa
        from deltalake import DeltaTable

        schema = pa.schema([pa.field(name, arrow_type(type_)) for name, type_ in columns])
        if "://" not in ref.location:
            Path(ref.location).mkdir(parents=True, exist_ok=True)
        try:
            DeltaTable.create(ref.location, schema, mode="ignore", name=ref.location.rstrip("/").rsplit("/", 1)[-1],
                              description="written by dsflow" + (f"; merged on ({', '.join(key)})" if key else ""),
                              storage_options=storage_options(ref))
        except Exception as err:  # noqa: BLE001
            raise DsflowError("DSF-E752", f"cannot create the Delta table at {ref.location}: {err}",
                              hint="check the store's bucket, endpoint and credentials (or folder)") from err

    def add_columns(self, ref: TableRef, columns: list[tuple[str, str]]) -> None:
        """Add the nullable columns the table lacks (one schema commit; no data file is rewritten)."""
        import pyarrow as pa
        from deltalake import Field

        table = _table(ref)
        present = set(pa.schema(table.schema().to_arrow()).names)
        fields = [Field.from_arrow(pa.field(n, arrow_type(t))) for n, t in columns if n not in present]
        if not fields:
            return
        try:
            table.alter.add_columns(fields)
        except Exception as err:  # noqa: BLE001
            raise DsflowError("DSF-E842", f"cannot add column(s) {', '.join(n for n, _ in columns)} to the Delta "
                              f"table at {ref.location}: {err}", hint="check the store's settings") from err

    def drop(self, ref: TableRef) -> None:
        """Delete the table's files (its log and data)."""
        if adls.is_azure(ref.location):
            return adls.drop(ref.location, ref.settings)
        if not ref.location.startswith("s3://"):
            shutil.rmtree(ref.location, ignore_errors=True)
            return
        s3 = s3_client(ref.settings)
        bucket, _, prefix = ref.location[len("s3://"):].partition("/")
        prefix = prefix.rstrip("/") + "/"
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})

    def write_batch(self, ref: TableRef, data: Any, key: list[str], app_id: str, batch_id: int) -> bool:
        """One micro-batch as one commit; False if the table already holds this batch (a replay)."""
        import pyarrow as pa
        from deltalake import CommitProperties, Transaction, write_deltalake

        from dsflow.adapters.tables.base import latest_per_key

        table = _table(ref)
        done = table.transaction_version(app_id)
        if done is not None and done >= batch_id:
            return False
        schema = pa.schema(table.schema().to_arrow())
        if KEEP in data.column_names:  # a changelog's rows: __keep false deletes the key
            return _merge_with_deletes(table, latest_per_key(data, key), schema, key, app_id, batch_id)
        data = data.select(schema.names).cast(schema)
        commit = CommitProperties(app_transactions=[Transaction(app_id, batch_id)],
                                  custom_metadata={"dsflow.app_id": app_id, "dsflow.batch_id": str(batch_id)})
        if not key:
            write_deltalake(table, data, mode="append", commit_properties=commit)
            return True
        predicate = " AND ".join(f"t.`{k}` = s.`{k}`" for k in key)
        (table.merge(latest_per_key(data, key), predicate, source_alias="s", target_alias="t",
                     commit_properties=commit)
         .when_matched_update_all().when_not_matched_insert_all().execute())
        return True

    # entities

    def describe(self, ref: TableRef) -> dict[str, Any]:
        table = _table(ref)
        schema = table.schema().to_arrow()
        import pyarrow as pa

        fields = [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in pa.schema(schema)]
        metadata = table.metadata()
        return {"location": ref.location, "format": "delta", "version": table.version(), "name": metadata.name,
                "files": len(table.file_uris()), "columns": fields,
                "configuration": dict(metadata.configuration or {})}

    def count_rows(self, ref: TableRef) -> int:
        return _table(ref).to_pyarrow_dataset().count_rows()

    def position(self, ref: TableRef) -> dict[str, int]:
        """Where a stream of the table's appended rows stands once it read every commit so far: the offset of
        the `dsflow_delta` source (reading.py), {"version": the table's latest version}."""
        return {"version": _table(ref).version()}

    def rows(self, ref: TableRef, limit: int) -> tuple[list[str], list[tuple]]:
        data = _table(ref).to_pyarrow_dataset().head(limit)
        columns = data.column_names
        return columns, list(zip(*(data.column(i).to_pylist() for i in range(data.num_columns)), strict=True))


def _merge_with_deletes(table, latest, schema, key: list[str], app_id: str, batch_id: int) -> bool:
    """One MERGE of a batch's last row per key: deleted where __keep is false, else updated or inserted."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction

    source = latest.select(schema.names).cast(schema).append_column(KEEP, latest.column(KEEP).cast(pa.bool_()))
    commit = CommitProperties(app_transactions=[Transaction(app_id, batch_id)],
                              custom_metadata={"dsflow.app_id": app_id, "dsflow.batch_id": str(batch_id)})
    columns = {f"`{n}`": f"s.`{n}`" for n in schema.names}
    predicate = " AND ".join(f"t.`{k}` IS NOT DISTINCT FROM s.`{k}`" for k in key)  # a group may be NULL
    (table.merge(source, predicate, source_alias="s", target_alias="t", commit_properties=commit)
     .when_matched_delete(f"NOT s.`{KEEP}`").when_matched_update(columns, f"s.`{KEEP}`")
     .when_not_matched_insert(columns, f"s.`{KEEP}`").execute())
    return True


def s3_client(settings: dict[str, str]):
    import boto3

    return boto3.client("s3", endpoint_url=settings.get("endpoint_url") or None,
                        region_name=settings.get("region") or "us-east-1",
                        aws_access_key_id=settings.get("access_key_id") or None,
                        aws_secret_access_key=settings.get("secret_access_key") or None,
                        aws_session_token=settings.get("session_token") or None)


def list_tables(root: str, settings: dict[str, str], under: str = "") -> list[str]:
    """Paths (relative to the store's root) of the Delta tables under `root`/`under`."""
    base = root.rstrip("/") + ("/" + under.strip("/") if under.strip("/") else "")
    if adls.is_azure(root):
        return adls.list_tables(root, settings, under)
    if not base.startswith("s3://"):
        start = Path(base)
        found = {str(p.parent.relative_to(root)) for p in start.rglob("_delta_log") if p.is_dir()} \
            if start.is_dir() else set()
        return sorted(found)
    bucket, _, prefix = base[len("s3://"):].partition("/")
    root_prefix = root[len("s3://"):].partition("/")[2].strip("/")
    found = set()
    s3 = s3_client(settings)
    listing = {"Bucket": bucket, "Prefix": (prefix.strip("/") + "/") if prefix.strip("/") else ""}
    for page in s3.get_paginator("list_objects_v2").paginate(**listing):
        for obj in page.get("Contents", []):
            head, sep, _ = obj["Key"].partition("/_delta_log/")
            if sep:
                found.add(head[len(root_prefix):].strip("/") if root_prefix else head)
    return sorted(found)
