"""Primitive values and keys: string (UTF-8), long/int (big-endian), double (IEEE 754), bytes.

Binary number keys (key.format long, int or double) travel inside a query as their decimal text: `key_texts`
reads them, `serializers.key_encoder` writes them back; `key_problems` names the keys of the wrong size.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

NUMERIC_KEYS = ("long", "int", "double")
"""Key formats whose keys are binary numbers (the others are read and written as text)."""

UNPACK = {"long": (8, ">q"), "int": (4, ">i"), "double": (8, ">d")}
"""Size in bytes and struct format of each binary number format (keys and primitive values)."""


def key_problems(messages: list, key_format: str) -> list[tuple[int, str]]:
    """(index, error) of the keys whose size is not the key format's."""
    size = UNPACK[key_format][0]
    return [(i, f"key: a {key_format} key has {size} bytes, this one has {len(m.key())}")
            for i, m in enumerate(messages) if m.key() is not None and len(m.key()) != size]


def key_texts(keys: list, key_format: str) -> list:
    """Binary number keys as their decimal text (how keys travel inside a query)."""
    fmt = UNPACK[key_format][1]
    return [None if k is None else str(struct.unpack(fmt, k)[0]) for k in keys]


def primitive_serializer(value_format: str) -> Callable[[list], list]:
    """Rows (dicts of one column, or bare values) to primitive record values."""

    def one(row: Any) -> bytes | None:
        value = next(iter(row.values())) if isinstance(row, dict) else row
        if value is None:
            return None
        if value_format == "string":
            return str(value).encode("utf-8")
        if value_format == "bytes":
            return bytes(value)
        return struct.pack(UNPACK[value_format][1], value)

    return lambda rows: [one(r) for r in rows]
