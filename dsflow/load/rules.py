"""The `rules` facet of the store protocol (core/stores.py): what the loader asks a store kind.

Each store kind's package may have a `rules` module whose `RULES` object answers the loader; every rule is
optional, and a kind without the module, or a `RULES` without the rule, has no such rule (the loader then checks
nothing, or takes the default said here). The loader asks `rule(store.type, name)`, never a store type.

Store settings (load/tables.py, load/objects.py):
    store_settings(type) -> (required, allowed) | None       the properties it requires and allows (DSF-E095)
    store_diagnostics(name, type, bootstrap, properties, location, where) -> [Diagnostic]
                                                              its own checks of its settings
Logs (load/names.py, load/sizing.py, load/queries.py; kinds with Capability.LOGS):
    check_log_name(name, fqn, where, report) -> bool          the names its logs may take
    check_dead_letter_topic(name, what, where, report)        the names a query's 'dlq.topic' may take
    log_size(st, fqn, store, sources, stores, report) -> (partitions, replicas)
                                                              default: 'topic.partitions', 'topic.replicas' as declared
    sizing_keys, config_prefix, partitions_key                the WITH properties sizing its logs (another kind's
                                                              are DSF-E110), the prefix of its log configs
    check_formats(st, fqn, store, value_format, report) -> bool   the formats its logs take
    transactions_why                                          why its transactions would not make a stream sink
                                                              exactly-once (DSF-E047's hint)
Tables (load/tables.py, load/names.py; kinds with Capability.TABLES):
    table_props(type) -> set                                  the WITH properties of a table in it
    table_options(fqn, props, store, location, prop_location, report) -> (name, options) | None
                                                              where the table is (default: its name, no options)
    check_table(type, relation, report)                       its table identifiers (DSF-E208)
    merging_sinks                                             how DSF-E157 names it (Capability.MERGE)
Views (load/views.py; Capability.VIEWS):
    view_props, view_table_key                                the WITH properties placing a view's table
    view_options(fqn, props, store, location, prop_location, report) -> (name, options) | None
Change streams (load/cdc.py, load/queries.py; Capability.CHANGE_STREAM):
    change_props, slot_key, publication_key, object_name(project, environment, fqn), change_tables(options),
    captures_several(options), several_tables_hint,
    change_stream_relation(fqn, kind, columns, props, store, slot_name, location, prop_location, report)
Settings table (core/settings.py):
    setting_names                                             (object, WITH property) rows it adds (identity)
"""

from __future__ import annotations

from typing import Any

from dsflow.core import stores


def rules_of(store_type: str | None) -> Any | None:
    """The `rules` facet of a store type (core/stores.py); None for an unknown type or a kind without one."""
    return stores.facet(store_type, "rules") if store_type else None


def rule(store_type: str | None, name: str) -> Any | None:
    """One rule (a method or a value) of a store type's rules facet; None where it has none ("no rule")."""
    return getattr(rules_of(store_type), name, None)
