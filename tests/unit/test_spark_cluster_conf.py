"""The Spark settings a query's application is submitted with on each kind of master (dsflow/adapters/spark/cluster.py;
pure: no Spark, no cluster)."""

from __future__ import annotations

import json

import pytest

from dsflow.adapters.spark.cluster import KUBERNETES_DEFAULTS, STANDALONE_DEFAULTS, master_kind, submit_conf
from dsflow.errors import DsflowError

IMAGE = {"spark.kubernetes.container.image": "registry.example.com/dsflow-spark:4.3.0"}


@pytest.mark.parametrize("master, kind", [
    ("local[2]", "local"), ("local", "local"), ("local[*]", "local"), ("spark://10.0.0.5:7077", "standalone"),
    ("k8s://https://kubernetes.default.svc:443", "kubernetes"), ("yarn", "other"), ("localhost", "other"),
])
def test_master_kind(master, kind):
    assert master_kind(master) == kind


def test_a_local_master_gets_only_the_projects_conf():
    conf = {"spark.sql.shuffle.partitions": "4"}
    assert submit_conf("local[2]", conf, "/usr/bin/python3") == conf
    assert submit_conf("local[2]", {}, "/usr/bin/python3") == {}


def test_a_standalone_master_gets_small_executors_a_core_cap_and_the_drivers_python():
    conf = submit_conf("spark://10.0.0.5:7077", {}, "/opt/venv/bin/python")
    assert conf == {"spark.executor.memory": "1g", "spark.executor.cores": "1", "spark.cores.max": "2",
                    "spark.pyspark.python": "/opt/venv/bin/python"}


def test_the_projects_conf_wins_over_the_cluster_defaults():
    conf = submit_conf("spark://10.0.0.5:7077", {"spark.cores.max": "4", "spark.pyspark.python": "python3"}, "/p")
    assert conf == {**STANDALONE_DEFAULTS, "spark.cores.max": "4", "spark.pyspark.python": "python3"}


def test_a_kubernetes_master_gets_image_namespace_service_account_and_executor_instances():
    conf = submit_conf("k8s://https://kubernetes.default.svc:443", {**IMAGE, "spark.kubernetes.namespace": "streams",
                                                                    "spark.executor.instances": "3"}, "/p")
    assert conf == {**KUBERNETES_DEFAULTS, **IMAGE, "spark.kubernetes.namespace": "streams",
                    "spark.executor.instances": "3", "spark.pyspark.python": "python3"}
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "spark"
    assert conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == "spark"


def test_a_kubernetes_master_without_an_image_is_dsf_e271():
    with pytest.raises(DsflowError) as raised:
        submit_conf("k8s://https://kubernetes.default.svc:443", {"spark.kubernetes.namespace": "streams"}, "/p")
    assert raised.value.code == "DSF-E271"
    assert "spark.kubernetes.container.image" in raised.value.message


@pytest.mark.parametrize("master", ["spark://", "k8s://", "spark:///"])
def test_a_cluster_master_without_a_host_is_dsf_e272(master):
    with pytest.raises(DsflowError) as raised:
        submit_conf(master, IMAGE, "/p")
    assert raised.value.code == "DSF-E272"


def test_a_driver_on_a_kubernetes_master_without_an_image_fails_with_its_status_saying_why(tmp_path):
    from dsflow.adapters.spark.driver import run
    from dsflow.adapters.spark.translate import query_spec
    from dsflow.load.project import load_project
    from support.projects import DEFAULT_CONFIG, make_project

    config = DEFAULT_CONFIG.replace("runtime:\n", "runtime:\n  spark_master: k8s://https://kubernetes.default.svc:443\n")
    sql = ("CREATE STREAM pageviews (id BIGINT, pageid VARCHAR) WITH ('value.format' = 'json');\n"
           "CREATE STREAM page_one AS SELECT id FROM pageviews WHERE pageid = 'Page_1';\n")
    project = load_project(make_project(tmp_path, {"dsflow.yml": config, "sql/all.sql": sql}))
    status = tmp_path / "status.json"
    spec = query_spec(project, project.queries[0], "v1", str(tmp_path / "checkpoint"), str(status))
    assert spec.master.startswith("k8s://")
    assert run(spec) == 1
    written = json.loads(status.read_text())
    assert written["state"] == "failed" and written["error"].startswith("DSF-E271")
