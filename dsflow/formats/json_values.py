"""JSON values in the readers: the dead-letter check, and the parse that stands in for Spark's from_json.

A JSON source with a dead-letter topic has every value parsed in the read task anyway, to find the records that
do not decode. When all its columns are of types pyarrow's JSON reader converts like from_json
(decoding.JSON_STRUCT_TYPES, layout "both" in decoding.value_layout), that parse is kept: the read task hands Spark
the values as the `__value` struct, and the source view takes it instead of calling from_json
(adapters/spark/frames.py). Per chunk of values (`parse_chunk`):

    1. one pyarrow parse of the whole chunk with the columns' types (`parsed`). It stands in for from_json only
       when nothing in the chunk can read differently there: every record one JSON object on a line of its own,
       valid UTF-8, no key that differs from a column name only in case, no NaN, infinity or -0 in a float
       (`_object_lines`, `_reads_like_from_json`); a value pyarrow does not convert exactly (a number in a
       VARCHAR, an INT out of range, 1.0 for a BIGINT, a duplicate key) makes the parse fail. Tombstones (no
       value) stay null structs at their places.
    2. otherwise the exact dead-letter check (`json_problems`). The records kept are parsed once more without
       the bad ones; where that is not exact either, they go to Spark as text and from_json reads them, so a
       record pyarrow would read differently gets exactly what from_json gives it.

Where pyarrow and from_json differ (checked against Spark 4.3 and pyarrow 26 in tests/integration/test_json_values.py):
from_json turns a JSON number, boolean, object or array in a STRING column into its text and reads an integer
that does not fit its column as null, pyarrow refuses both; from_json keeps the last of duplicate keys, pyarrow
refuses them; pyarrow reads `-0` as -0.0 where from_json gives 0.0, and accepts `-NaN` and `Inf`, which Python's
json (the dead-letter check) does not. Field names match exactly in both, while the dead-letter check ignores
case; a lone `null` value crashes pyarrow's reader, which the object-per-line test keeps from it.
"""

from __future__ import annotations

import io
import json
from typing import Any

from dsflow.core.formats import base_type
from dsflow.formats.arrow import Bad, value_struct

Columns = tuple[tuple[str, str], ...]


def parse_chunk(values: list, columns: Columns) -> tuple[list[int], Any, Bad]:
    """(indexes of the records kept, their `__value` struct array or None when they go to from_json as text,
    the records that do not decode)."""
    array = parsed(values, columns)
    if array is not None:
        return list(range(len(values))), array, []
    bad = json_problems(values, columns)
    failed = {i for i, _ in bad}
    keep = [i for i in range(len(values)) if i not in failed]
    return keep, parsed([values[i] for i in keep], columns) if bad and keep else None, bad


def parsed(values: list, columns: Columns) -> Any:
    """The values (bytes, None = tombstone) as one struct array of the columns, or None when pyarrow's parse
    of the chunk could differ from what from_json gives or the dead-letter check finds (see the module doc)."""
    import pyarrow as pa
    import pyarrow.json as pj

    kind = value_struct(columns)
    present = values if None not in values else [v for v in values if v is not None]
    if not present:
        return pa.nulls(len(values), kind)
    data = _object_lines(present)
    if data is None:
        return None
    try:
        table = pj.read_json(io.BytesIO(data), read_options=_read_options(len(data)), parse_options=pj.ParseOptions(
            explicit_schema=pa.schema(list(kind)), unexpected_field_behavior="infer"))
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != len(present) or not _reads_like_from_json(table, columns):
        return None
    array = pa.StructArray.from_arrays([table.column(n).combine_chunks() for n, _ in columns], fields=list(kind))
    if len(present) == len(values):
        return array
    places, row = [], 0
    for value in values:
        places.append(None if value is None else row)
        row += value is not None
    return array.take(pa.array(places, pa.int64()))  # a null index gives a null struct


def _read_options(size: int) -> Any:
    import pyarrow.json as pj

    # one block for the chunk; a Spark task has its core, so one thread (1.3 vs 2.1 µs/record with threads)
    return pj.ReadOptions(block_size=max(1 << 20, size + 1), use_threads=False)


def _object_lines(present: list) -> bytes | None:
    """The values joined one per line, or None unless each is one line that starts with `{` and ends with `}`
    and the whole is valid UTF-8. Then pyarrow gives exactly one row per value or fails: an empty, blank or
    multi-line value, two objects in one, or `null` (which crashes pyarrow 26's reader when alone) cannot shift
    the rows, and invalid UTF-8, which pyarrow lets through, goes to the exact check."""
    data = b"\n".join(present)
    if data.count(b"\n") != len(present) - 1 or b"\r" in data:
        return None
    if not all(v[:1] == b"{" and v[-1:] == b"}" for v in present):  # ~0.06 µs/record, cheaper than counting
        return None
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return data


def _reads_like_from_json(table: Any, columns: Columns) -> bool:
    """False if a key differs from a column name only in case (from_json matches names exactly, the dead-letter
    check ignores case), or a float anywhere in the parse is NaN, infinite or -0 (pyarrow reads `-NaN` and
    `Inf`, which Python's json refuses, and `-0` as -0.0 where from_json gives 0.0)."""
    names = {n for n, _ in columns}
    lowered = {n.lower() for n in names}
    if any(f.name not in names and f.name.lower() in lowered for f in table.schema):
        return False
    return not _odd_floats(table, negative_zero=True)


def _odd_floats(table: Any, negative_zero: bool) -> bool:
    """True if a float anywhere in the parsed table (nested too) is NaN or infinite, or -0 with `negative_zero`."""
    return any(_odd(chunk, negative_zero) for column in table.columns for chunk in column.chunks)


def _odd(array: Any, negative_zero: bool) -> bool:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as t

    kind = array.type
    if t.is_floating(kind):
        if array.null_count == len(array):
            return False
        if pc.any(pc.invert(pc.is_finite(array))).as_py():
            return True
        if not negative_zero:
            return False
        width = kind.bit_width  # -0.0 is the sign bit alone: the smallest integer of the same width
        bits = array.view(pa.int64() if width == 64 else pa.int32())
        return bool(pc.any(pc.equal(bits, -(1 << (width - 1)))).as_py())
    if t.is_struct(kind):
        return any(_odd(child, negative_zero) for child in array.flatten())
    if t.is_list(kind) or t.is_large_list(kind):
        return _odd(array.flatten(), negative_zero)
    return False


# --- the dead-letter check ---------------------------------------------------------------------------


def json_problems(values: list, columns: Columns) -> Bad:
    """Records that from_json could not read into the columns: not JSON, not an object, a wrong type."""
    if _chunk_fits(values, columns):
        return []
    bad = []
    for i, value in enumerate(values):
        problem = None if value is None else _json_problem(value, columns)
        if problem:
            bad.append((i, problem))
    return bad


def _chunk_fits(values: list, columns: Columns) -> bool:
    """One pyarrow parse of the whole chunk: True if every record (None = tombstone, skipped) is a JSON object on
    one line whose fields fit. No per-record Python beyond `_object_lines` (docs/benchmarks.md, "Latency and
    overhead"); any doubt returns False and the caller checks record by record."""
    import pyarrow as pa
    import pyarrow.json as pj

    present = values if None not in values else [v for v in values if v is not None]
    if not present:
        return True
    data = _object_lines(present)
    if data is None:
        return False
    try:
        table = pj.read_json(io.BytesIO(data), read_options=_read_options(len(data)))
    except (pa.ArrowException, ValueError):
        return False
    if table.num_rows != len(present) or _odd_floats(table, negative_zero=False):
        return False  # NaN or infinity: pyarrow also reads -NaN and Inf, which Python's json refuses
    found = {f.name.lower(): f.type for f in table.schema}
    if len(found) != len(table.schema):
        return False  # keys that differ only in case: the record-by-record check looks at the one it keeps
    return all(_arrow_fits(found[n.lower()], t) for n, t in columns if n.lower() in found)


def _arrow_fits(kind: Any, sql_type: str) -> bool:
    import pyarrow.types as t

    if t.is_null(kind):
        return True
    expect = _expected(sql_type)
    if expect == "int":
        return t.is_integer(kind)
    if expect == "number":
        return t.is_integer(kind) or t.is_floating(kind)
    if expect == "bool":
        return t.is_boolean(kind)
    return True


def _expected(sql_type: str) -> str:
    name = base_type(sql_type)
    if name in ("BIGINT", "INT", "INTEGER", "SMALLINT", "TINYINT"):
        return "int"
    if name in ("DOUBLE", "FLOAT", "DECIMAL"):
        return "number"
    return "bool" if name == "BOOLEAN" else "any"


def _json_problem(value: bytes, columns: Columns) -> str | None:
    try:
        parsed_value = json.loads(value)
    except (ValueError, UnicodeDecodeError) as err:
        return f"bad JSON: {err}"
    if not isinstance(parsed_value, dict):
        return f"bad JSON: expected an object, got {type(parsed_value).__name__}"
    lowered = {k.lower(): v for k, v in parsed_value.items()}
    for name, sql_type in columns:
        field_value = lowered.get(name.lower())
        if field_value is None:
            continue
        expect = _expected(sql_type)
        is_bool = isinstance(field_value, bool)
        fits = {"int": isinstance(field_value, int) and not is_bool,
                "number": isinstance(field_value, (int, float)) and not is_bool,
                "bool": is_bool}.get(expect, True)
        if not fits:
            return f"schema mismatch: column '{name}' is {sql_type}, the record has {json.dumps(field_value)[:100]}"
    return None
