"""A store's properties are checked by its kind's settings model (load/store_settings.py): an unknown property is
DSF-E095 at its own line with a guess, a missing one names it, and a value of the wrong type (a port, a libpq
sslmode, Snowflake's protocol) is DSF-E095 naming the property and the value; a good store loads unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsflow.core import stores
from dsflow.errors import ProjectError
from dsflow.load.project import load_project
from dsflow.load.store_settings import keys
from dsflow.load.tables import STORE_SETTINGS
from support.projects import make_project
from support.streaming import CONFIG

SQL = "CREATE STREAM s (id BIGINT) WITH ('value.format' = 'json');\n"


def _store(type_: str, properties: dict[str, str]) -> str:
    lines = "".join(f"      {k}: {v!r}\n" for k, v in properties.items())
    bootstrap = "    bootstrap_servers: 127.0.0.1:1\n" if type_ == "kafka" else ""
    return f"stores:\n  - name: st\n    type: {type_}\n{bootstrap}    properties:\n{lines}"


def _diagnostics(tmp_path: Path, type_: str, properties: dict[str, str], code: str = "DSF-E095") -> list:
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=""), "sql/all.sql": SQL,
                                   "stores/st.yml": _store(type_, properties)})
    try:
        load_project(root, variables={"bootstrap": "127.0.0.1:1"})
    except ProjectError as err:
        return [d for d in err.diagnostics if d.code == code]
    return []


def test_an_unknown_property_is_reported_at_its_own_line_with_a_guess(tmp_path):
    [found] = _diagnostics(tmp_path, "postgresql", {"host": "127.0.0.1", "pasword": "x"})
    assert "unknown property 'pasword' of the postgresql store 'st'" in found.message
    assert "password" in found.hint
    assert (found.location.file, found.location.line) == ("stores/st.yml", 6)


@pytest.mark.parametrize("type_, properties, key, words", [
    ("postgresql", {"host": "h", "port": "54x2"}, "port", "valid integer"),
    ("postgresql", {"host": "h", "port": "70000"}, "port", "less than or equal to 65535"),
    ("postgresql", {"host": "h", "sslmode": "required"}, "sslmode", "'verify-full'"),
    ("snowflake", {"account": "a", "protocol": "ftp"}, "protocol", "'http' or 'https'"),
])
def test_a_value_of_the_wrong_type_names_the_property_and_the_value(tmp_path, type_, properties, key, words):
    [found] = _diagnostics(tmp_path, type_, properties)
    assert f"property '{key}' of the {type_} store 'st' is {properties[key]!r}" in found.message
    assert words in found.message
    line = 5 + list(properties).index(key)
    assert (found.location.file, found.location.line) == ("stores/st.yml", line)


def test_a_missing_property_is_named(tmp_path):
    [found] = _diagnostics(tmp_path, "adls", {"account": "acct", "account_key": "k"})
    assert found.message == "the adls store 'st' needs the property 'container'"


@pytest.mark.parametrize("type_", sorted(STORE_SETTINGS))
def test_each_kind_with_a_model_takes_every_property_it_declares(tmp_path, type_):
    """Every declared property at once (text values) raises nothing from the model itself."""
    model = STORE_SETTINGS[type_]
    required, allowed = keys(model)
    assert required <= allowed
    values = {"port": "5432", "sslmode": "require", "protocol": "https"}
    model.model_validate({k: values.get(k, "x") for k in allowed})


def test_every_store_kind_that_checks_settings_declares_a_model():
    """The kinds whose properties are not their client library's own settings have a model; the rest pass through."""
    assert set(STORE_SETTINGS) == set(stores.REGISTRY) - {"kafka"}


def test_librdkafka_checks_each_kafka_setting_at_its_line(tmp_path):
    """A Kafka store's properties are librdkafka's: a name or a value it refuses is DSF-E256 at the property's line,
    a typo with a guess; settings it takes, including ones that only make sense together, pass."""
    found = _diagnostics(tmp_path / "a", "kafka", {"client.id": "c", "sasl.mechansim": "PLAIN", "linger.ms": "soon"},
                         "DSF-E256")
    by_key = {d.message.split(" ")[0]: d for d in found}
    assert sorted(by_key) == ["linger.ms", "sasl.mechansim"]
    assert "No such configuration property" in by_key["sasl.mechansim"].message
    assert by_key["sasl.mechansim"].hint == "did you mean 'sasl.mechanism'?"
    assert "Invalid value" in by_key["linger.ms"].message
    assert [(d.location.file, d.location.line) for d in (by_key["sasl.mechansim"], by_key["linger.ms"])] == \
        [("stores/st.yml", 7), ("stores/st.yml", 8)]
    good = {"client.id": "c", "acks": "all", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": "u", "sasl.password": "{{ env_var('ST_PASSWORD', 'p') }}",
            "ssl.ca.location": "/nowhere/ca.pem"}
    assert _diagnostics(tmp_path / "b", "kafka", good, "DSF-E256") == []
