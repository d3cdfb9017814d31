"""A table's change stream read as a changelog (CREATE CHANGELOG t (PRIMARY KEY (id)) AS SELECT ... FROM cdc).

Each change event becomes the changelog row of its key, in commit order (one partition; `explode` keeps the
order): an insert, update or snapshot read (op c, u, r) is an upsert of the key with its `after` image; a delete
(op d) is a delete of the key, its `after` replaced by its `before` image so the key columns are there (with a
table's default replica identity `before` holds the key columns only; that is enough). An update that
changes the primary key is two rows: a delete of the old key (`before`), then an upsert of the new one.

The record key (`__key`) is rebuilt from the image's key fields the way a changelog sink builds it from its
key columns (frames.sink_frame): one column as text, several a JSON object named by the output columns.
The store's change reader checks that those fields are the table's primary key (DSF-E182).
"""

from __future__ import annotations

import json

from dsflow.core.model import Project, Query
from dsflow.sql.cdc import KEY_FIELDS, image_key_fields, is_cdc

RAW_VALUE = "__raw_value"
KEY, DELETED = "__key", "__deleted"  # the source view's columns (frames.py)


def key_option(project: Project, query: Query) -> dict[str, str]:
    """{'key.fields': JSON [[output column, `after` field], ...]} for the change stream a changelog is made of."""
    sink = project.relation(query.sink) if query.sink else None  # none: `dsflow query --follow`
    if sink is None or sink.kind != "changelog" or query.deletes != "emit" or len(query.sources) != 1:
        return {}
    source = project.relation(query.sources[0].relation)
    assert source is not None  # a loaded project's sources name its relations
    if not is_cdc(source):
        return {}
    fields = image_key_fields(query.select_sql, sink.primary_key)
    return {KEY_FIELDS: json.dumps(fields)} if not isinstance(fields, str) else {}


def changelog_rows(parsed, key_fields: list[list[str]]):
    """`parsed` (__key, __v: the event struct, RAW_VALUE: its JSON, ...) as changelog rows with __deleted."""
    from pyspark.sql import functions as F

    image_type = parsed.schema["__v"].dataType["after"].dataType
    op = F.get_json_object(RAW_VALUE, "$.op")
    before = F.from_json(F.get_json_object(RAW_VALUE, "$.before"), image_type)
    after = F.col("__v.after")

    def key(image):
        return F.struct(*[image.getField(f).alias(out) for out, f in key_fields])

    def row(deleted: bool, image):
        return F.struct(F.lit(deleted).alias("d"), image.alias("img"))

    moved = (op == "u") & before.isNotNull() & ~key(before).eqNullSafe(key(after))
    rows = (F.when(moved, F.array(row(True, before), row(False, after)))
            .when(op == "d", F.array(row(True, before)))
            .otherwise(F.array(row(False, after))))
    exploded = parsed.withColumn("__cl", F.explode(rows))
    image = F.col("__cl.img")
    record_key = (image.getField(key_fields[0][1]).cast("string") if len(key_fields) == 1
                  else F.to_json(key(image)))
    return (exploded.withColumn("__v", F.col("__v").withField("after", image))
            .withColumn(KEY, record_key).withColumn(DELETED, F.col("__cl.d")).drop("__cl", RAW_VALUE))
