"""How far a query is behind a PostgreSQL change stream: the bytes of write-ahead log written since the end of the
last transaction the query read (its offset's LSN). The log also holds the changes of tables the stream does not
read, so a caught-up query on a busy database shows some lag; its growth is what tells that the query falls
behind."""

from __future__ import annotations

import json
from typing import Any

from dsflow.adapters.postgres import admin

CURRENT_WAL = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
WAL = "wal"
"""The one 'partition' of a change stream's lag."""


class WalBehind:
    """The write-ahead log past a change stream's offset, through one connection per database, kept until `close`."""

    unit = "wal_bytes"

    def __init__(self) -> None:
        self._connections: dict[str, Any] = {}

    def behind(self, source: Any, offsets: dict[str, int]) -> dict[str, int]:
        lsn = int(offsets.get("lsn", 0))
        if lsn <= 0:
            return {}  # nothing read yet (the snapshot first)
        with self._connection(source.client_config, source.options.get("database")).cursor() as cursor:
            cursor.execute(CURRENT_WAL)
            return {WAL: int(cursor.fetchone()[0]) - lsn}

    def _connection(self, settings: dict[str, str], database: str | None) -> Any:
        key = json.dumps([settings, database], sort_keys=True)
        if key not in self._connections or self._connections[key].closed:
            self._connections[key] = admin.connect(settings, database)
        return self._connections[key]

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
