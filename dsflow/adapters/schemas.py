"""A query sink's schemas in the schema registry, registered by apply before the sink's first write (by the
executor of the sink's store, for a store that can use a registry: Capability.REGISTRY, core/stores.py).
"""

from __future__ import annotations

from typing import Any

from dsflow.adapters.spark.translate import sink_format, sink_key_format
from dsflow.core.evolution import DEFAULT_RULE
from dsflow.core.model import Project, Relation
from dsflow.formats.registry import register, set_compatibility


def register_sink_schemas(project: Project, relation: Relation, evolving: bool = False) -> dict[str, Any]:
    """A query's avro/protobuf sink: its value schema (made from the columns) registered under the subject, and
    an avro/protobuf key's schema under <topic>-key, before any write. Columns evolved in place, or a declared
    'value.schema.compatibility': the subject's level is set to the relation's rule first."""
    if not relation.defined_by_query:
        return {}
    settings = sink_format(project, relation)
    outputs: dict[str, Any] = {}
    if relation.value_subject and (evolving or relation.schema_compatibility):
        set_compatibility(settings["registry"], settings["value_subject"],
                          relation.schema_compatibility or DEFAULT_RULE)
    if relation.value_subject:
        schema_id = register(settings["registry"], settings["value_subject"], settings["value_schema"],
                             settings["value_format"].upper())
        outputs |= {"subject": settings["value_subject"], "schema_id": schema_id}
    query = next((q for q in project.queries if q.fqn == relation.defined_by_query), None)
    key = sink_key_format(relation, query) if query is not None else {}
    if key:
        outputs |= {"key_subject": key["key_subject"], "key_schema_id": register(
            settings["registry"], key["key_subject"], key["key_schema"], (relation.key_format or "").upper())}
    return outputs
