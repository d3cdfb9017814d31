"""The protobuf schema a sink registers is the same bytes in every process: its field options hold maps
(`field_meta.params`), whose serialized order otherwise follows the process's hash seed, so a restart could
register a schema text the registry takes for a new version."""

from __future__ import annotations

import os
import subprocess
import sys

COLUMNS = [("a", "MAP<VARCHAR, BIGINT>"), ("b", "ARRAY<STRUCT<x INT, y VARCHAR>>"), ("c", "DECIMAL(10,2)"),
           ("d", "TIMESTAMP"), ("e", "DECIMAL(38,10)"), ("f", "VARCHAR")]
PRINT = ("from dsflow.formats.proto_schemas import schema_text; "
         f"print(schema_text('r', 'db.s', {COLUMNS!r}))")


def test_the_schema_text_does_not_depend_on_the_hash_seed() -> None:
    texts = {subprocess.run([sys.executable, "-c", PRINT], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2, 3)}
    assert len(texts) == 1 and texts.pop().strip()
