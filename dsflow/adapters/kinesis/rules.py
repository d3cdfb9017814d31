"""The load rules of a Kinesis store (the `rules` facet, core/stores.py): its settings, the names its streams may
take (DSF-E207), how a stream is sized (shards: DSF-E110, DSF-E112) and the key formats it takes (DSF-E114).

A stream name is the `StreamName` of the Kinesis API: letters, digits, `_`, `.` and `-`; 1 to 128 characters.
A stream made by a query takes 'topic.shards' from its left-most Kinesis source; with none it is required.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dsflow.adapters.kinesis.settings import KinesisSettings
from dsflow.core import stores
from dsflow.errors import Diagnostic, Location
from dsflow.load.names import why_invalid
from dsflow.load.sizing import report_foreign, size_property

Report = Callable[[Diagnostic], None]
STREAM = re.compile(r"[a-zA-Z0-9_.-]{1,128}")


class KinesisRules:
    """The `rules` facet of a Kinesis store."""

    partitions_key = "topic.shards"
    sizing_keys = ("topic.shards",)

    def settings(self, store_type: str) -> type[KinesisSettings]:
        return KinesisSettings

    def check_log_name(self, name: str, fqn: str, where: Location | None, report: Report) -> bool:
        """DSF-E207: a stream name the Kinesis API would refuse."""
        if STREAM.fullmatch(name):
            return True
        report(Diagnostic("DSF-E207", f"the Kinesis stream name {name!r} of '{fqn}' is not valid: "
                          f"{why_invalid(name, 128, 'letters, digits, _, . and -')}", where,
                          hint="set 'topic' to 1-128 letters, digits, '_', '.' or '-' (the environment's "
                               "topic_prefix counts too)"))
        return False

    def log_size(self, st: Any, fqn: str, store: Any, sources: list[Any], stores_: dict[str, Any],
                 report: Report) -> tuple[int, int]:
        """(shards, 1): declared, else the left-most Kinesis source's (DSF-E112 when there is none)."""
        others = [stores.REGISTRY[t] for t in stores.kinds_that(stores.Capability.LOGS) if t != store.type]
        titles = " and ".join(f"{k.title}'s" for k in others)
        report_foreign(st, store, f"'topic.shards' sizes a Kinesis stream; partitions, replicas and topic configs "
                                  f"are {titles}", report)
        if st.prop("topic.shards") is not None or not sources:
            return size_property(st, "topic.shards", 1, report), 1
        source = next((r for r in sources if getattr(stores_.get(r.store), "type", "") == store.type), None)
        if source is None:
            report(Diagnostic("DSF-E112", f"'{fqn}' goes to a Kinesis stream but reads no Kinesis stream, so "
                              "'topic.shards' cannot be inferred", st.location,
                              hint="add 'topic.shards' = N to its WITH clause"))
            return 1, 1
        return source.partitions, 1

    def check_formats(self, st: Any, fqn: str, store: Any, value_format: str, report: Report) -> bool:
        """Every value format fits a Kinesis stream; a declared binary 'key.format' does not (partition keys are
        text): DSF-E114."""
        prop = st.prop("key.format")
        key_format = str(prop.value).lower() if prop is not None else None
        if key_format in (None, "json", "string"):
            return True
        report(Diagnostic("DSF-E114", f"key.format '{key_format}' is not available on the Kinesis stream '{fqn}': "
                          "partition keys are text", prop.location or st.location,
                          hint="remove 'key.format' (or use 'string'): a Kinesis partition key is a Unicode string"))
        return False


RULES = KinesisRules()
