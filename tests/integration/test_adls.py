"""Azure Data Lake Storage on Azurite (the Azure storage emulator, tests/conftest.py `azurite_endpoint`): an `adls`
store's Delta tables and an Iceberg warehouse on abfss://, written from a Kafka stream, equal to a Python reference
and read back with deltalake / azure-storage-blob directly and as a stream by a query (each row once, then only
the rows appended since); a replayed batch is skipped; apply creates the table,
destroy deletes its blobs; an unreachable store is DSF-E393 naming it; settings errors are DSF-E390..E395."""

from __future__ import annotations

import json
import os
import random
import uuid
from pathlib import Path

import pytest

from conftest import AZURITE_ACCOUNT
from dsflow.engine import operations
from dsflow.adapters.tables import table_format, table_ref
from dsflow.adapters.tables.executor import reach_store
from dsflow.core.plan import Action
from dsflow.errors import ProjectError
from dsflow.load.project import load_project
from support.lake import lake_project
from support.projects import make_project
from support.streaming import CONFIG, produce, records, run
from test_lake_sinks import _uncommit_last_batch

ACCOUNT, KEY = AZURITE_ACCOUNT
PAGEVIEWS = """\
CREATE STREAM pageviews (id BIGINT, viewtime BIGINT, userid VARCHAR, pageid VARCHAR)
  WITH ('value.format' = 'json', 'timestamp' = 'viewtime', 'topic.partitions' = 2);
"""


def stores(endpoint: str, container: str, key_var: str = "AZ_TEST_KEY", account: str = ACCOUNT) -> str:
    return (f"stores:\n  - name: azlake\n    type: adls\n    properties:\n      account: {account}\n"
            f"      container: {container}\n      prefix: tables\n      endpoint: {endpoint}\n"
            f"      account_key: \"{{{{ env_var('{key_var}') }}}}\"\n"
            f"  - name: azice\n    type: iceberg\n    properties:\n"
            f"      warehouse: abfss://{container}@{account}.dfs.core.windows.net/iceberg\n"
            f"      catalog_uri: \"sqlite:///{{{{ env_var('AZ_TEST_CATALOG') }}}}\"\n      endpoint: {endpoint}\n"
            f"      account_key: \"{{{{ env_var('{key_var}') }}}}\"\n")


@pytest.fixture
def az_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AZ_TEST_KEY", KEY)
    monkeypatch.setenv("AZ_TEST_CATALOG", str(tmp_path / "catalog.db"))


def container(endpoint: str) -> str:
    """A new container in Azurite (dsflow creates tables, never containers)."""
    from azure.storage.blob import BlobServiceClient

    name = f"c{uuid.uuid4().hex[:12]}"
    BlobServiceClient(endpoint, credential={"account_name": ACCOUNT, "account_key": KEY}).create_container(name)
    return name


def blobs(endpoint: str, name: str, prefix: str = "") -> list[str]:
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient(endpoint, credential={"account_name": ACCOUNT, "account_key": KEY})
    return [b.name for b in client.get_container_client(name).list_blobs(name_starts_with=prefix or None)]


def delta_rows(uri: str, endpoint: str) -> list[dict]:
    """The table read by delta-rs straight from Azurite (its own options, not dsflow's)."""
    from deltalake import DeltaTable

    options = {"account_name": ACCOUNT, "account_key": KEY, "endpoint": endpoint, "allow_http": "true"}
    return DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()


def events(first: int, count: int, rng: random.Random) -> list[dict]:
    return [{"id": i, "viewtime": 1_700_000_000_000 + i, "userid": f"User_{rng.randrange(1, 30)}",
             "pageid": f"Page_{rng.randrange(0, 6)}"} for i in range(first, first + count)]


def codes(tmp_path: Path, store_yaml: str, sql: str = "") -> list[str]:
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=""), "sql/all.sql": PAGEVIEWS + sql,
                                   "stores/lake.yml": store_yaml})
    with pytest.raises(ProjectError) as err:
        load_project(root, variables={"bootstrap": "127.0.0.1:1"})
    return sorted(d.code for d in err.value.diagnostics)


ADLS = "stores:\n  - name: az\n    type: adls\n    properties:\n{props}"
KEYED = "      account_key: \"{{ env_var('AZ_TEST_KEY') }}\"\n"


def test_adls_settings_and_paths_are_checked_at_load(tmp_path, az_env):
    good = ADLS.format(props="      account: acct1\n      container: lake\n      prefix: /t/\n" + KEYED)
    root = make_project(tmp_path / "ok", {"dsflow.yml": CONFIG.format(prefix=""), "stores/lake.yml": good,
                                          "sql/all.sql": PAGEVIEWS + """
        CREATE TABLE a WITH ('store' = 'az') AS SELECT id FROM pageviews;
        CREATE TABLE b WITH ('store' = 'az', 'delta.path' = 'az://other/x') AS SELECT id FROM pageviews;
        CREATE TABLE c WITH ('store' = 'az', 'delta.path' = 'abfss://lake@acct1.dfs.core.windows.net/y')
          AS SELECT id FROM pageviews;"""})
    project = load_project(root, variables={"bootstrap": "127.0.0.1:1"})
    where = {n: table_ref(root, project.store("az"), project.relation(f"analytics.public.{n}")).location
             for n in "abc"}
    assert where == {"a": "abfss://lake@acct1.dfs.core.windows.net/t/a", "b": "az://other/x",
                     "c": "abfss://lake@acct1.dfs.core.windows.net/y"}

    assert codes(tmp_path / "1", ADLS.format(props="      account: Bad_Account\n      container: x\n" + KEYED)) \
        == ["DSF-E390", "DSF-E390"]
    assert codes(tmp_path / "2", ADLS.format(props="      account: acct1\n      container: lake\n")) == ["DSF-E391"]
    assert codes(tmp_path / "3", ADLS.format(props="      account: acct1\n      container: lake\n" + KEYED
                                             + "      sas_token: \"{{ env_var('AZ_TEST_KEY') }}\"\n")) == ["DSF-E391"]
    assert codes(tmp_path / "4", ADLS.format(props="      account: acct1\n      container: lake\n"
                                             "      client_id: app\n")) == ["DSF-E391"]
    assert codes(tmp_path / "5", ADLS.format(props="      account: acct1\n      container: lake\n"
                                             "      account_key: abc\n")) == ["DSF-E060"]
    assert codes(tmp_path / "6", ADLS.format(props="      account: acct1\n      container: lake\n"
                                             "      endpoint: 127.0.0.1:10000\n" + KEYED)) == ["DSF-E390"]
    on_az = ADLS.format(props="      account: acct1\n      container: lake\n" + KEYED)
    assert codes(tmp_path / "7", on_az, "CREATE TABLE t WITH ('store' = 'az', 'delta.path' = "
                 "'abfss://lake@acct2.dfs.core.windows.net/t') AS SELECT id FROM pageviews;") == ["DSF-E392"]
    assert codes(tmp_path / "8", on_az, "CREATE TABLE t WITH ('store' = 'az', 'delta.path' = 's3://b/t') "
                 "AS SELECT id FROM pageviews;") == ["DSF-E250"]
    local = "stores:\n  - name: lake\n    type: filesystem\n    properties: {path: lake}\n"
    assert codes(tmp_path / "9", local, "CREATE TABLE t WITH ('store' = 'lake', 'delta.path' = 'az://c/t') "
                 "AS SELECT id FROM pageviews;") == ["DSF-E250"]
    ice = "stores:\n  - name: ice\n    type: iceberg\n    properties:\n      catalog_uri: sqlite:////tmp/c.db\n"
    assert codes(tmp_path / "10", ice + "      warehouse: az://lake/wh\n" + KEYED) == ["DSF-E394"]
    assert codes(tmp_path / "11", ice + "      warehouse: s3://b/wh\n" + KEYED) == ["DSF-E395"]
    assert codes(tmp_path / "12", ice + "      warehouse: abfss://lake@acct1.dfs.core.windows.net/wh\n") \
        == ["DSF-E391"]


def _read_back_as_a_stream(spark, broker, project, tmp_path, expected: list[dict], rng) -> list[dict]:
    """The ADLS Delta table read as a stream (its versions are the offsets): every row once, then on the next run
    only the rows a later batch appended; returns the events it produced for that batch."""
    run(spark, project, "pv_back", tmp_path)
    assert sorted(_ids_and_users(broker, project)) == sorted((e["id"], e["userid"]) for e in expected)
    more = events(800, 200, rng)
    produce(broker, project, "pageviews", more, "userid")
    run(spark, project, "pv_az", tmp_path)
    run(spark, project, "pv_back", tmp_path)
    expected = expected + [e for e in more if e["pageid"] != "Page_0"]
    assert sorted(_ids_and_users(broker, project)) == sorted((e["id"], e["userid"]) for e in expected)
    return more


def _ids_and_users(broker, project) -> list[tuple[int, str]]:
    return [(v["id"], v["userid"]) for v in (json.loads(r["value"]) for r in records(broker, project, "pv_back"))]


@pytest.mark.integration
def test_stream_into_delta_and_iceberg_on_azurite_equals_reference(tmp_path, broker, spark, azurite_endpoint,
                                                                   az_env, capfd):
    name = container(azurite_endpoint)
    project = lake_project(tmp_path, broker, PAGEVIEWS + """
        CREATE TABLE pv_az WITH ('store' = 'azlake', 'delta.path' = 'web/pageviews') AS
          SELECT id, userid, pageid, viewtime FROM pageviews WHERE pageid <> 'Page_0';
        CREATE TABLE pv_ice WITH ('store' = 'azice') AS SELECT id, userid FROM pageviews;
        CREATE STREAM pv_back AS SELECT id, userid FROM pv_az;
    """, stores(azurite_endpoint, name))
    for relation in ("pv_az", "pv_ice"):  # what apply does before the query starts
        table = project.relation(f"analytics.public.{relation}")
        ref = table_ref(project.root, project.store(table.store), table)
        reach_store(table.store, project.store(table.store).type, ref)
        table_format(ref.format).create(ref, [(c.name, c.type) for c in table.columns], [])
    rng = random.Random(24)
    sent = []
    for first in (0, 400):
        batch = events(first, 400, rng)
        produce(broker, project, "pageviews", batch, "userid")
        sent += batch
        run(spark, project, "pv_az", tmp_path)
    uri = f"abfss://{name}@{ACCOUNT}.dfs.core.windows.net/tables/web/pageviews"
    expected = [{k: e[k] for k in ("id", "userid", "pageid", "viewtime")} for e in sent if e["pageid"] != "Page_0"]
    assert sorted(delta_rows(uri, azurite_endpoint), key=lambda r: r["id"]) == expected
    assert "tables/web/pageviews/_delta_log/00000000000000000000.json" in blobs(azurite_endpoint, name)

    last = _uncommit_last_batch(tmp_path / "checkpoints" / "pv_az")  # a crash after the commit, before Spark's
    run(spark, project, "pv_az", tmp_path)
    assert f"batch {last} is already in" in capfd.readouterr().err
    assert sorted(delta_rows(uri, azurite_endpoint), key=lambda r: r["id"]) == expected
    sent += _read_back_as_a_stream(spark, broker, project, tmp_path, expected, rng)

    run(spark, project, "pv_ice", tmp_path)
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("dsflow", uri=f"sqlite:///{tmp_path / 'catalog.db'}", **{
        "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO", "adls.connection-string":
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={azurite_endpoint};"})
    read = catalog.load_table(("public", "pv_ice")).scan().to_arrow().to_pylist()
    assert sorted(read, key=lambda r: r["id"]) == [{"id": e["id"], "userid": e["userid"]} for e in sent]
    assert any(b.endswith(".parquet") for b in blobs(azurite_endpoint, name, "iceberg/public/pv_ice/data/"))

    from dsflow.engine import entities  # what `dsflow entity list --store azlake` prints

    assert entities.list_entities(project, entities.resolve(project, "", "azlake")) == ["web/pageviews"]
    described = entities.describe_entity(project, entities.resolve(project, "web/pageviews", "azlake"))
    assert described["location"] == uri and [c["name"] for c in described["columns"]] == \
        ["id", "userid", "pageid", "viewtime"]


@pytest.mark.integration
def test_apply_creates_the_table_on_azurite_and_destroy_deletes_it(tmp_path, broker, azurite_endpoint, az_env):
    name = container(azurite_endpoint)
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"az{os.getpid()}_"),
                                   "stores/lake.yml": stores(azurite_endpoint, name), "sql/all.sql": PAGEVIEWS + """
        CREATE TABLE pv_apply WITH ('store' = 'azlake', 'trigger.interval' = '500 ms') AS
          SELECT id, userid FROM pageviews;"""})
    options = operations.Options(root, None, {"bootstrap": broker})
    loaded = operations.load(options)
    plan = operations.plan(loaded)
    assert ("relation.analytics.public.pv_apply", Action.CREATE) in [(c.address, c.action) for c in plan.actionable]
    result = operations.apply(loaded, plan)
    assert result.ok, result.failed
    uri = f"abfss://{name}@{ACCOUNT}.dfs.core.windows.net/tables/pv_apply"
    assert delta_rows(uri, azurite_endpoint) == []  # created before any data (rows: the test above)
    assert "tables/pv_apply/_delta_log/00000000000000000000.json" in blobs(azurite_endpoint, name)
    state = operations.load(options).workspace.state_backend().read()
    assert state.resources["relation.analytics.public.pv_apply"].outputs["table"] == uri
    assert state.resources["query.analytics.public.pv_apply"].outputs["pid"]  # its driver started
    assert not list(root.rglob("_delta_log"))  # nothing in a local folder

    loaded = operations.load(options)
    destroy = operations.plan(loaded, destroy=True)
    assert ("relation.analytics.public.pv_apply", Action.DELETE) in [(c.address, c.action) for c in destroy.actionable]
    assert operations.apply(loaded, destroy).ok
    assert blobs(azurite_endpoint, name) == []


@pytest.mark.integration
@pytest.mark.parametrize("case", ["wrong key", "no container", "endpoint down"])
def test_apply_to_an_unreachable_store_fails_naming_it(tmp_path, broker, azurite_endpoint, az_env, monkeypatch, case):
    name = container(azurite_endpoint)
    endpoint = azurite_endpoint
    if case == "wrong key":
        monkeypatch.setenv("AZ_TEST_KEY", KEY[:-12] + "AAAAAAAAAAA=")
    elif case == "no container":
        name = "missing-" + name
    else:
        endpoint = "http://127.0.0.1:9/" + ACCOUNT
    root = make_project(tmp_path, {"dsflow.yml": CONFIG.format(prefix=f"az{uuid.uuid4().hex[:6]}_"),
                                   "stores/lake.yml": stores(endpoint, name), "sql/all.sql": PAGEVIEWS
                                   + "CREATE TABLE pv_bad WITH ('store' = 'azlake') AS SELECT id FROM pageviews;"})
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker}))
    result = operations.apply(loaded, operations.plan(loaded))
    assert result.failed is not None
    change, err = result.failed
    assert change.address == "relation.analytics.public.pv_bad"
    assert getattr(err, "code", None) == "DSF-E393" and "adls store 'azlake'" in str(err), err
    why = {"wrong key": "credentials were refused", "no container": "container does not exist",
           "endpoint down": "endpoint cannot be reached"}[case]
    assert why in str(err) and endpoint in str(err)
    assert [c.address for c in result.skipped] == ["query.analytics.public.pv_bad"]
    assert not list(root.rglob("_delta_log"))  # never a local folder
    loaded = operations.load(operations.Options(root, None, {"bootstrap": broker}))
    assert operations.apply(loaded, operations.plan(loaded, destroy=True)).ok  # the topic it made
