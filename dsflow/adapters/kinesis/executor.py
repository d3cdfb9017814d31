"""Apply, destroy and refresh for relations in a kinesis store: the relation's Kinesis stream.

apply creates the stream with its shards (waiting until it is ACTIVE); destroy deletes it only if dsflow
created it; refresh reports drift when the stream is missing or has another number of open shards.
"""

from __future__ import annotations

from typing import Any

from dsflow.adapters.schemas import register_sink_schemas
from dsflow.core.address import Address

MARK = "kinesis_stream"
"""The output key that marks a deployed relation as a Kinesis stream."""


def _settings(project, name: str) -> dict[str, str]:
    from dsflow.errors import DsflowError

    store = project.store(name) if project is not None else None
    if store is None:
        raise DsflowError("DSF-E766", f"cannot reach the Kinesis stream: the kinesis store '{name}' is no longer in "
                          "the project", hint="put the store back for one apply or destroy, then remove it")
    return dict(store.properties)


class StreamExecutor:
    """A relation's Kinesis stream."""

    def create(self, ctx, change) -> dict[str, Any]:
        from dsflow.adapters.kinesis import admin

        relation = ctx.project.relation(Address.parse(change.address).name)
        settings = _settings(ctx.project, relation.store)
        existed = ctx.resumed.get("stream_existed")
        if existed is None:
            existed = admin.describe_stream(settings, relation.topic) is not None
            ctx.note({"stream_existed": existed})
        shards = (change.after or {}).get("partitions", relation.partitions)  # the plan's: an adopted stream's own
        created = admin.ensure_stream(settings, relation.topic, shards)
        info = admin.describe_stream(settings, relation.topic)
        if info is not None and info.open_shards != shards:
            from dsflow.errors import DsflowError

            raise DsflowError("DSF-E769", f"Kinesis stream '{relation.topic}' has {info.open_shards} open shards; "
                              f"the plan gives it {shards} ('topic.shards', or its shards when the plan was made)",
                              hint="declare the stream's shard count, or reshard the stream (UpdateShardCount); "
                                   "dsflow does not reshard streams by itself")
        return {MARK: relation.topic, "topic": relation.topic, "store": relation.store,
                "created_by_dsflow": created or not existed, **register_sink_schemas(ctx.project, relation)}

    def update(self, ctx, change, deployed) -> dict[str, Any]:
        outputs = self.create(ctx, change)
        outputs["created_by_dsflow"] = outputs["created_by_dsflow"] or deployed.outputs.get("created_by_dsflow", False)
        return outputs

    def delete(self, ctx, deployed) -> None:
        from dsflow.adapters.kinesis import admin

        if not deployed.outputs.get("created_by_dsflow"):
            return
        admin.delete_stream(_settings(ctx.project, deployed.outputs.get("store", "")), deployed.outputs[MARK])


def observe(project, deployed):
    """Refresh: drift when the stream is missing or its open shards differ from the declared topic.shards."""
    from dsflow.adapters.kinesis import admin
    from dsflow.core.plan import Observation
    from dsflow.errors import DsflowError

    try:
        info = admin.describe_stream(_settings(project, deployed.outputs.get("store", "")), deployed.outputs[MARK])
    except DsflowError as err:
        return Observation(address=deployed.address, healthy=False, detail=err.message)
    if info is None:
        return Observation(address=deployed.address, healthy=False, detail="Kinesis stream is missing")
    expected = deployed.data.get("partitions")
    if expected and info.open_shards != expected:
        return Observation(address=deployed.address, healthy=False,
                           detail=f"stream has {info.open_shards} open shards, the project declares {expected}")
    return Observation(address=deployed.address, healthy=True, detail="stream exists")
