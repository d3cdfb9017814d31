"""The compatibility rule of schema evolution (core/evolution.py): pure, against Confluent's definitions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsflow.core.evolution import RULES, Evolution, evolution, incompatibility, widens

NAMES = st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), unique=True, min_size=1)
TYPES = st.sampled_from(["INT", "BIGINT", "FLOAT", "DOUBLE", "VARCHAR", "BOOLEAN"])


@st.composite
def schemas(draw) -> list[tuple[str, str]]:
    return [(name, draw(TYPES)) for name in draw(NAMES)]


def test_adding_and_dropping_columns_is_compatible_under_every_rule():
    old = [("id", "BIGINT"), ("name", "VARCHAR")]
    new = [("id", "BIGINT"), ("referrer", "VARCHAR")]
    assert evolution(old, new) == Evolution(added=("referrer",), dropped=("name",))
    assert evolution(old, new).describe() == "column(s) referrer added, name dropped"
    for rule in RULES:
        assert incompatibility([old], new, rule) is None, rule


@pytest.mark.parametrize("was, now, compatible", [
    ("INT", "BIGINT", {"BACKWARD", "NONE"}),
    ("FLOAT", "DOUBLE", {"BACKWARD", "NONE"}),
    ("BIGINT", "INT", {"FORWARD", "NONE"}),
    ("BIGINT", "VARCHAR", {"NONE"}),
])
def test_a_retyped_column_is_compatible_only_where_the_reader_widens_the_writer(was, now, compatible):
    """BACKWARD: the new schema reads old data (INT written, BIGINT read); FORWARD: the old schema reads new data;
    FULL: both, so no retype but to the same type."""
    for rule in RULES:
        why = incompatibility([[("id", was)]], [("id", now)], rule)
        expected = rule.removesuffix("_TRANSITIVE") in compatible
        assert (why is None) == expected, (rule, why)
        if why is not None:
            assert why == f"column id retyped {was} -> {now}: incompatible under {rule}"


def test_transitive_rules_check_every_earlier_schema_the_others_only_the_last():
    history = [[("id", "INT")], [("id", "BIGINT")], [("id", "INT"), ("x", "VARCHAR")]]
    new = [("id", "INT")]  # BIGINT written by version 2 cannot be read as INT
    assert incompatibility(history, new, "FORWARD") is None  # INT -> INT against the last one
    assert incompatibility(history, new, "BACKWARD") is None
    assert incompatibility(history, new, "BACKWARD_TRANSITIVE") == \
        "column id retyped BIGINT -> INT: incompatible under BACKWARD_TRANSITIVE"


def test_a_positional_format_evolves_only_by_columns_appended_at_the_end():
    old = [("id", "BIGINT"), ("name", "VARCHAR")]
    assert incompatibility([old], [*old, ("extra", "VARCHAR")], "BACKWARD", "protobuf") is None
    assert "numbered in column order" in incompatibility([old], [("id", "BIGINT")], "BACKWARD", "protobuf")


def test_type_names_are_compared_by_meaning():
    assert evolution([("a", "INTEGER")], [("a", "int")]) == Evolution()
    assert widens("int", "LONG") and widens("REAL", "DOUBLE") and not widens("DOUBLE", "FLOAT")


@given(schemas(), schemas())
def test_none_accepts_anything_and_full_is_backward_and_forward(old, new):
    assert incompatibility([old], new, "NONE") is None
    full = incompatibility([old], new, "FULL") is None
    backward = incompatibility([old], new, "BACKWARD") is None
    forward = incompatibility([old], new, "FORWARD") is None
    assert full == (backward and forward)


@given(schemas(), schemas())
def test_backward_is_forward_read_the_other_way(old, new):
    """Confluent: FORWARD from old to new is BACKWARD from new to old (who reads whose data swaps)."""
    assert (incompatibility([old], new, "FORWARD") is None) == (incompatibility([new], old, "BACKWARD") is None)


@given(schemas(), schemas(), schemas())
def test_a_transitive_rule_holds_exactly_when_it_holds_against_each_version(first, second, new):
    for rule in ("BACKWARD", "FORWARD", "FULL"):
        each = all(incompatibility([old], new, rule) is None for old in (first, second))
        assert (incompatibility([first, second], new, f"{rule}_TRANSITIVE") is None) == each


@given(schemas())
def test_an_unchanged_schema_is_compatible_with_itself(columns):
    assert evolution(columns, columns) == Evolution()
    for rule in RULES:
        assert incompatibility([columns], columns, rule) is None


def test_an_unknown_rule_is_a_load_error_at_its_property(tmp_path) -> None:
    from dsflow.errors import ProjectError
    from dsflow.load.project import load_project
    from support.projects import make_project
    from support.streaming import CONFIG

    sql = ("CREATE STREAM events (id BIGINT) WITH ('value.format' = 'json',\n"
           "  'value.schema.compatibility' = 'SIDEWAYS');\n"
           "CREATE STREAM copied WITH ('value.schema.compatibility' = 'full') AS SELECT id FROM events;\n")
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix="e_"), "sql/all.sql": sql})
    with pytest.raises(ProjectError) as failed:
        load_project(root, variables={"bootstrap": "127.0.0.1:1"})
    [diagnostic] = failed.value.diagnostics
    assert (diagnostic.code, diagnostic.location.file, diagnostic.location.line) == ("DSF-E840", "sql/all.sql", 2)
    assert "'SIDEWAYS'" in diagnostic.message and "BACKWARD" in diagnostic.message

    (root / "sql" / "all.sql").write_text(sql.replace("SIDEWAYS", "forward_transitive"))
    project = load_project(root, variables={"bootstrap": "127.0.0.1:1"})
    rules = {r.name: r.schema_compatibility for r in project.relations}
    assert rules == {"events": "FORWARD_TRANSITIVE", "copied": "FULL"}


SCALARS = st.sampled_from(["INT", "BIGINT", "VARCHAR", "DOUBLE", "BOOLEAN"])


def _types(depth: int = 2):
    if depth == 0:
        return SCALARS
    inner = _types(depth - 1)
    return st.one_of(SCALARS, st.builds(lambda t: f"ARRAY<{t}>", inner),
                     st.builds(lambda t: f"MAP<VARCHAR, {t}>", inner),
                     st.lists(inner, min_size=1, max_size=3).map(
                         lambda ts: "STRUCT<" + ", ".join(f"f{i} {t}" for i, t in enumerate(ts)) + ">"))


@given(_types(), SCALARS)
def test_a_struct_field_added_or_dropped_reads_both_ways(inner, added):
    """A STRUCT gains or loses a (nullable) field at any depth: compatible under every rule by name (json, avro),
    and appended at the end by position (protobuf); a narrowed field is not."""
    old, new = f"STRUCT<x {inner}>", f"STRUCT<x {inner}, y {added}>"
    for writer, reader in ((old, new), (new, old), (f"ARRAY<{old}>", f"ARRAY<{new}>")):
        assert widens(writer, reader) and widens(writer, reader, by_name=False)
    for rule in RULES:
        assert incompatibility([[("id", "BIGINT"), ("s", old)]], [("id", "BIGINT"), ("s", new)], rule) is None
    assert incompatibility([[("s", old)]], [("s", new)], "FULL", "protobuf") is None
    moved = f"STRUCT<y {added}, x {inner}>"
    assert widens(old, moved) and not widens(old, moved, by_name=False)
    assert "retyped" in incompatibility([[("s", old)]], [("s", moved)], "BACKWARD", "protobuf")
    assert not widens("STRUCT<x BIGINT>", "STRUCT<x INT>") and widens("STRUCT<x INT>", "STRUCT<x BIGINT>")
    assert not widens(f"STRUCT<x {inner}>", f"ARRAY<{inner}>")
