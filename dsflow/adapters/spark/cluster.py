"""What a query's Spark application needs beyond BASE_CONF when `runtime.spark_master` is a cluster.

Pure: a master URL and the project's `runtime.spark_conf` in, Spark settings out (no Spark import), so the
options a Kubernetes or standalone master gets are unit-tested without either. docs/runtime.md explains them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from dsflow.errors import DsflowError

MasterKind = Literal["local", "standalone", "kubernetes", "other"]

STANDALONE_DEFAULTS: dict[str, str] = {
    "spark.executor.memory": "1g",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
}
"""A query's application on a standalone master: executors of 1 core and 1 GiB, at most 2 cores in all. Without a
cap a standalone master gives the first application every free core and the next query waits for one."""

KUBERNETES_DEFAULTS: dict[str, str] = {
    "spark.kubernetes.namespace": "default",
    "spark.kubernetes.authenticate.driver.serviceAccountName": "spark",
    "spark.kubernetes.authenticate.executor.serviceAccountName": "spark",
    "spark.executor.instances": "2",
    "spark.executor.memory": "1g",
    "spark.executor.cores": "1",
    "spark.kubernetes.executor.request.cores": "500m",
}
"""A query's application on Kubernetes: two executor pods of 1 core (requesting half a CPU) and 1 GiB, in the
namespace `default`, created under the service account `spark` (which needs the right to create pods there)."""

KUBERNETES_REQUIRED = ("spark.kubernetes.container.image",)
"""Kubernetes settings with no default: the image the executor pods run (Spark, Python and dsflow in it)."""

KUBERNETES_PYTHON = "python3"
"""The interpreter executor pods run the data sources with, unless `spark.pyspark.python` names another."""


def master_kind(master: str) -> MasterKind:
    """Which kind of Spark master a `runtime.spark_master` URL names."""
    if master == "local" or master.startswith("local["):
        return "local"
    if master.startswith("spark://"):
        return "standalone"
    if master.startswith("k8s://"):
        return "kubernetes"
    return "other"


def cluster_conf(master: str, conf: Mapping[str, str], python: str) -> dict[str, str]:
    """The settings dsflow adds under the project's `conf` (which wins) for `master`; empty for a local master.

    `python` is the interpreter the executors of a standalone master run (the driver's own, by default: the
    workers need it at the same path). DSF-E271 when a `k8s://` master lacks a required setting, DSF-E272 when a
    cluster master's URL names no host.
    """
    kind = master_kind(master)
    if kind in ("local", "other"):
        return {}
    if not master.split("://", 1)[1].strip("/"):
        raise DsflowError("DSF-E272", f"runtime.spark_master {master!r} names no host",
                          hint="write spark://HOST:7077 for a standalone master or k8s://https://HOST:443 for "
                               "Kubernetes")
    if kind == "standalone":
        return {**STANDALONE_DEFAULTS, "spark.pyspark.python": python}
    missing = [key for key in KUBERNETES_REQUIRED if not conf.get(key)]
    if missing:
        raise DsflowError("DSF-E271", f"runtime.spark_master {master!r} is a Kubernetes master, and "
                                      f"runtime.spark_conf has no {', '.join(missing)}",
                          hint="set spark.kubernetes.container.image to an image with Spark, Python and dsflow "
                               "installed (docs/runtime.md, Kubernetes)")
    return {**KUBERNETES_DEFAULTS, "spark.pyspark.python": KUBERNETES_PYTHON}


def submit_conf(master: str, conf: Mapping[str, str], python: str) -> dict[str, str]:
    """`cluster_conf` with the project's `conf` on top: every setting a query on `master` is submitted with,
    beside BASE_CONF."""
    return {**cluster_conf(master, conf, python), **conf}
