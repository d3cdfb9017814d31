"""Plan time at scale: generated projects of N relations, timed as cold processes.

A project of size N has N relations: N/2 declared streams and N/2 streams defined by a
continuous query (`CREATE STREAM ... AS SELECT`, one query each). Every 4th query reads an
earlier query's output instead of a declared stream, so the graph has depth. Statements are
spread over files of 100. The equivalent dbt project has the N/2 declared streams as dbt
sources and the N/2 queries as models (one .sql file each, `source()` or `ref()`), on dbt-duckdb.

Timed, each as a fresh process (interpreter start and imports included; dsflow's bytecode written first, as an
install writes it), RUNS times (the median is reported), in this order:
`dsflow plan --no-refresh` with DSFLOW_CACHE=0 (no load cache: every SELECT resolved), `dsflow validate`
(the first run with the cache: it resolves everything and fills `.dsflow/cache/`), `dsflow plan --no-refresh`
(empty state: everything is a create; the cache is warm, as on every run after the first), and
`dbt parse --no-partial-parse`. Each run records its wall time and its CPU time (user + system of the process and of
the processes it waited for: dsflow's forked load workers), the steadier figure on a machine shared with other work.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PER_FILE = 100
DBT_VENV = Path(__file__).resolve().parent / ".venv-dbt"
"""A venv of its own for dbt (never the main environment); `ensure_dbt` creates it when missing."""

CONFIG = """\
name: scale{n}
default:
  database: scale
  schema: public
  store: kafka_main
runtime:
  trigger_interval: 1 second
default_environment: dev
environments:
  dev:
    vars:
      bootstrap: 127.0.0.1:9092
"""

STORE = """\
stores:
  - name: kafka_main
    type: kafka
    bootstrap_servers: "{{ var('bootstrap') }}"
databases:
  - name: scale
    schemas: [public]
"""

SOURCE = ("CREATE STREAM s{i} (id BIGINT, ts BIGINT, user_id VARCHAR, amount DOUBLE, kind VARCHAR)\n"
          "  WITH ('topic' = 's{i}', 'value.format' = 'json', 'timestamp' = 'ts', 'topic.partitions' = 2);\n")
QUERY = ("CREATE STREAM q{i} AS\n"
         "SELECT id, ts, UPPER(user_id) AS user_id, amount * 1.1 AS amount, kind\n"
         "FROM {src} WHERE amount > {i} AND kind <> 'test';\n")

DBT_PROJECT = """\
name: scale{n}
version: "1.0"
profile: scale
model-paths: ["models"]
"""
DBT_PROFILES = """\
scale:
  target: dev
  outputs:
    dev:
      type: duckdb
      path: "{path}"
"""
DBT_MODEL = ("select id, ts, upper(user_id) as user_id, amount * 1.1 as amount, kind\n"
             "from {src} where amount > {i} and kind <> 'test'\n")


def query_source(i: int, dbt: bool = False) -> str:
    """Query i reads declared stream i, or (every 4th) the output of query i // 2."""
    if i % 4 == 3 and i // 2 < i:
        return f"{{{{ ref('q{i // 2}') }}}}" if dbt else f"q{i // 2}"
    return f"{{{{ source('raw', 's{i}') }}}}" if dbt else f"s{i}"


def write_dsflow_project(root: Path, n: int) -> Path:
    half = n // 2
    (root / "sql").mkdir(parents=True, exist_ok=True)
    (root / "dsflow.yml").write_text(CONFIG.format(n=n))
    (root / "stores.yml").write_text(STORE)
    for start in range(0, half, PER_FILE):
        stop = min(half, start + PER_FILE)
        (root / "sql" / f"sources_{start:05d}.sql").write_text(
            "\n".join(SOURCE.format(i=i) for i in range(start, stop)))
        (root / "sql" / f"queries_{start:05d}.sql").write_text(
            "\n".join(QUERY.format(i=i, src=query_source(i)) for i in range(start, stop)))
    return root


def write_dbt_project(root: Path, n: int) -> Path:
    half = n // 2
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)
    (root / "dbt_project.yml").write_text(DBT_PROJECT.format(n=n))
    (root / "profiles.yml").write_text(DBT_PROFILES.format(path=root / "scale.duckdb"))
    tables = "\n".join(f"      - name: s{i}" for i in range(half))
    (models / "sources.yml").write_text(f"version: 2\nsources:\n  - name: raw\n    tables:\n{tables}\n")
    for i in range(half):
        (models / f"q{i}.sql").write_text(DBT_MODEL.format(i=i, src=query_source(i, dbt=True)))
    return root


RUNS = 3
"""Runs per tool and size; the median is reported. This machine's speed moves by up to a third from one minute
to the next (other tenants), so one run was often the outlier."""


@dataclass(frozen=True)
class Timing:
    tool: str
    size: int
    seconds: float | None
    """The median of `runs`."""
    ok: bool
    note: str = ""
    runs: tuple[float, ...] = ()
    cpu_seconds: float | None = None
    """The median CPU time (user + system) of the process and the processes it waited for (forked load workers):
    steadier than the wall time on a machine shared with other work."""
    cpu_runs: tuple[float, ...] = ()


def timed(tool: str, size: int, argv: list[str], cwd: Path, env: dict | None = None, timeout: float = 900,
          before: Callable[[], None] | None = None) -> Timing:
    """RUNS cold processes of `argv` (`before` runs before each); the first failure stops them."""
    runs, cpu = [], []
    for _ in range(RUNS):
        if before is not None:
            before()
        started, used = time.monotonic(), _children_cpu()
        try:
            done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Timing(tool, size, None, False, f"timed out after {timeout:.0f}s")
        if done.returncode not in (0, 3):
            note = (done.stderr or done.stdout).strip().splitlines()[-1:][0][:200]
            return Timing(tool, size, time.monotonic() - started, False, note)
        runs.append(round(time.monotonic() - started, 3))
        cpu.append(round(_children_cpu() - used, 3))
    return Timing(tool, size, statistics.median(runs), True, runs=tuple(runs), cpu_seconds=statistics.median(cpu),
                  cpu_runs=tuple(cpu))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compile_sources() -> None:
    """Write the bytecode of dsflow's modules, as `pip install` does for an installed package. The editable install
    here runs from the source tree, and this machine sets PYTHONDONTWRITEBYTECODE=1, so without it every timed
    process compiled ~40 modules again (~0.07 s of a 1,000-relation plan)."""
    import compileall

    import dsflow

    compileall.compile_dir(str(Path(dsflow.__file__).parent), quiet=1)


NO_PYC = ", no .pyc"


def _no_bytecode(env: dict[str, str]) -> dict[str, str]:
    """`env` for a run that compiles dsflow's modules from source: their bytecode removed, none written."""
    import dsflow

    for cached in Path(dsflow.__file__).parent.rglob("__pycache__"):
        shutil.rmtree(cached, ignore_errors=True)
    return {**env, "PYTHONDONTWRITEBYTECODE": "1"}


def dbt_available() -> str | None:
    """The dbt executable of the side venv, or None."""
    exe = DBT_VENV / "bin" / "dbt"
    return str(exe) if exe.exists() else None


def dbt_version() -> str | None:
    exe = dbt_available()
    if exe is None:
        return None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    core = next((line.split(":")[-1].strip() for line in out.splitlines() if "installed" in line), "?")
    duck = next((line.split(":")[1].strip().split()[0] for line in out.splitlines() if "duckdb" in line), "?")
    return f"dbt-core {core}, dbt-duckdb {duck}"


def run_scale(sizes: list[int], work: Path, with_dbt: bool = True, without_bytecode: bool = False) -> list[Timing]:
    """Generate and time every size; returns one Timing per tool and size. `without_bytecode`: also time the cold
    and the cached plan with no bytecode of dsflow's modules (a source checkout where PYTHONDONTWRITEBYTECODE is
    set, as on this machine), each beside the same run with it."""
    results = []
    compile_sources()
    script = Path(sys.executable).parent / "dsflow"  # the installed entry point, not a version manager's shim
    dsflow = [str(script)] if script.exists() else [sys.executable, "-m", "dsflow.cli"]
    for n in sizes:
        project = write_dsflow_project(work / f"dsflow_{n}", n)
        shutil.rmtree(project / ".dsflow", ignore_errors=True)  # no cache left from an earlier run
        plan = [*dsflow, "-C", str(project), "plan", "--no-refresh"]
        no_cache = {**os.environ, "DSFLOW_CACHE": "0"}
        if without_bytecode:
            results.append(timed(f"dsflow plan, no cache{NO_PYC}", n, plan, project, _no_bytecode(no_cache)))
            compile_sources()
        results.append(timed("dsflow plan, no cache", n, plan, project, no_cache))
        results.append(timed("dsflow validate", n, [*dsflow, "-C", str(project), "validate"], project,
                             before=lambda project=project: shutil.rmtree(project / ".dsflow", ignore_errors=True)))
        results.append(timed("dsflow plan --no-refresh", n, plan, project))
        if without_bytecode:
            results.append(timed(f"dsflow plan --no-refresh{NO_PYC}", n, plan, project, _no_bytecode(dict(os.environ))))
            compile_sources()
        exe = ensure_dbt() if with_dbt else None
        if exe is not None:
            dbt_root = write_dbt_project(work / f"dbt_{n}", n)
            env = {**os.environ, "DBT_PROFILES_DIR": str(dbt_root), "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
            results.append(timed("dbt parse", n, [exe, "parse", "--no-partial-parse"], dbt_root, env))
        for r in (r for r in results if r.size == n):
            print(f"  {r.tool:<36} {r.size:>6}: {r.seconds if r.seconds is None else round(r.seconds, 2)} s"
                  f" ({r.cpu_seconds} CPU s){'' if r.ok else ' FAILED ' + r.note}", flush=True)
    return results


def ensure_dbt() -> str | None:
    """Install dbt-core 1.10 + dbt-duckdb 1.10 into DBT_VENV if missing (the newest dbt does not
    install on this machine: it downloads a binary). Not a dsflow dependency. None if it fails."""
    if dbt_available():
        return dbt_available()
    try:
        subprocess.run([sys.executable, "-m", "venv", str(DBT_VENV)], check=True, capture_output=True, timeout=300)
        subprocess.run([str(DBT_VENV / "bin" / "pip"), "install", "-q", "dbt-core==1.10.*", "dbt-duckdb==1.10.*"],
                       check=True, capture_output=True, timeout=900)
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"  dbt could not be installed: {exc}", flush=True)
        return None
    return dbt_available()
