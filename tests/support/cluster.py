"""A real Spark standalone cluster on 127.0.0.1 for tests and benchmarks: a master and workers started from the
installed pyspark's own `bin/spark-class`, each on free ports with its own work folder, stopped by PID.

    with standalone_cluster(tmp, workers=2) as cluster:
        cluster.master                      # spark://127.0.0.1:PORT, for runtime.spark_master
        cluster.state()                     # the master's JSON (workers, apps)
        cluster.kill_worker(0)              # kill -9 of a worker and of its executors (its descendants)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from support.servers import free_port

WORKER_CORES = 2
"""Cores each worker offers (slots, not CPUs): two query applications of 1 core per worker fit on each."""
WORKER_MEMORY = "1g"
START_SECONDS = 90.0


def spark_home() -> Path:
    """The installed pyspark package: it holds Spark's jars and bin/spark-class."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class Cluster:
    """A running standalone cluster: the master's URL and web UI port, each worker's process."""

    master: str
    web_port: int
    workers: list[subprocess.Popen] = field(default_factory=list)

    def state(self) -> dict:
        """The master's JSON view: workers (state, cores used), active and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=5) as answer:
            return json.load(answer)

    def worker_state(self, index: int) -> dict:
        """A worker's own JSON view (its executors), through its web UI address in the master's JSON."""
        address = self.worker_addresses()[index]
        with urllib.request.urlopen(f"{address}/json/", timeout=5) as answer:
            return json.load(answer)

    def worker_addresses(self) -> list[str]:
        """Each alive worker's web UI address, in the order the workers were started (by their web UI port)."""
        alive = [w for w in self.state()["workers"] if w["state"] == "ALIVE"]
        ports = {w["webuiaddress"].rsplit(":", 1)[1]: w["webuiaddress"] for w in alive}
        return [ports[port] for port in (self._ui_port(p) for p in self.workers) if port in ports]

    def kill_worker(self, index: int) -> list[int]:
        """kill -9 of worker `index` and every process under it (its executor JVMs and their Python workers);
        returns the PIDs killed."""
        root = psutil.Process(self.workers[index].pid)
        victims = [root, *root.children(recursive=True)]
        for proc in victims:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        self.workers[index].wait(timeout=10)
        psutil.wait_procs(victims, timeout=10)
        return [p.pid for p in victims]

    @staticmethod
    def _ui_port(proc: subprocess.Popen) -> str:
        args = proc.args
        return str(args[args.index("--webui-port") + 1])


def _environment(folder: Path) -> dict[str, str]:
    home = spark_home()
    return {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(folder),
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false", "SPARK_WORKER_DIR": str(folder / "work")}


def _start(name: str, args: list[str], folder: Path, env: dict[str, str]) -> subprocess.Popen:
    log = open(folder / f"{name}.log", "ab")  # noqa: SIM115 - the process writes it until it is stopped
    command = [str(spark_home() / "bin" / "spark-class"), *args]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)


def _wait(cluster: Cluster, workers: int, folder: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            if sum(w["state"] == "ALIVE" for w in cluster.state()["workers"]) >= workers:
                return
        except (OSError, ValueError):  # not listening yet, or its web UI up before its JSON: an empty answer
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the standalone cluster did not start in {START_SECONDS:.0f} s; see {folder}")
        time.sleep(0.5)


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        try:
            root = psutil.Process(proc.pid)
            tree = [root, *root.children(recursive=True)] if proc.poll() is None else []
        except psutil.NoSuchProcess:
            tree = []
        if tree:
            for member in tree:
                try:
                    member.terminate()
                except psutil.NoSuchProcess:
                    pass
            _, alive = psutil.wait_procs(tree, timeout=15)
            for member in alive:
                member.kill()
        proc.wait(timeout=10)


@contextmanager
def standalone_cluster(folder: Path, workers: int = 2, cores: int = WORKER_CORES,
                       memory: str = WORKER_MEMORY) -> Iterator[Cluster]:
    """A master and `workers` workers on 127.0.0.1 (their logs and work folders under `folder`), stopped by PID
    (each with the processes under it) at the end."""
    folder.mkdir(parents=True, exist_ok=True)
    env = _environment(folder)
    port, web_port = free_port(), free_port()
    master = _start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                               "--webui-port", str(web_port)], folder, env)
    cluster = Cluster(f"spark://127.0.0.1:{port}", web_port)
    try:
        for index in range(workers):
            work = folder / f"worker{index}"
            work.mkdir(exist_ok=True)
            cluster.workers.append(_start(f"worker{index}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0", "--webui-port",
                str(free_port()), "--cores", str(cores), "--memory", memory, "--work-dir", str(work),
                cluster.master], folder, env))
        _wait(cluster, workers, folder)
        yield cluster
    finally:
        _stop([*cluster.workers, master])
