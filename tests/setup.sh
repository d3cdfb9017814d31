#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine, installed once and idempotent: the README's test command
# runs it before pytest, and .ci/run runs that command. The tests themselves install nothing and change nothing
# on the host: they start their own servers (PostgreSQL, the broker, moto, kinesalite, Azurite, fakesnow) on free
# loopback ports and stop them by PID.
#
# - Debian packages: a JDK 17 runtime (Spark, Apache Kafka), Maven (resolves Kafka's jars), PostgreSQL's server
#   binaries (a private cluster per test run, tests/support/pgserver.py), Chromium (the web page's browser test, driven by
#   Playwright), kcat (a second Kafka client for the interop tests). As root they are installed with apt-get;
#   otherwise the script names what is missing and stops.
# - Python: dsflow with its test extra, and fakesnow without its dependencies (it pins an older sqlglot; its own
#   dependencies are in the test extra; docs/dependencies.md).
# - Maven: Apache Kafka's jars and Spark's Kafka connector, into ~/.cache/dsflow (dsflow/adapters/kafka/kraft.py,
#   bench/spark_kafka.py).
# - npm, into ~/.cache/dsflow/node-* linked as tests/.node: kinesalite (Kinesis) and Azurite (Azure Blob; 3.37.0 or
#   later, docs/dependencies.md).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v kcat >/dev/null || missing+=(kcat)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "tests/setup.sh: install these packages first (Debian names): ${missing[*]}" >&2
    exit 1
  fi
fi

python3 -m pip install -q -e '.[test]'
# dsflow's bytecode, once: an editable install writes none, and where PYTHONDONTWRITEBYTECODE is set (this machine)
# every process of the run (drivers, Spark's Python workers, CLI calls) would compile dsflow's modules again.
python3 -m compileall -q -j 0 dsflow tests/support >/dev/null
python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("fakesnow") is None)' || python3 -m pip install -q --no-deps 'fakesnow==0.12.1'
# Apache Kafka's jars (the test run's broker), resolved by Maven into dsflow's cache (dsflow/adapters/kafka/kraft.py).
python3 -c 'from dsflow.adapters.kafka import kraft; kraft.ensure_jars()'
# Spark's own Kafka connector (bench/kafka_connector.py and its smoke test), resolved the same way (bench/spark_kafka.py).
python3 bench/spark_kafka.py >/dev/null

# Installed once per machine into dsflow's cache (as Kafka's jars are) and linked as tests/.node, so a fresh clone
# does not install them again (~40 s of npm's CPU).
node_home="${XDG_CACHE_HOME:-$HOME/.cache}/dsflow/node-kinesalite-azurite-3.37.0"
[ -e tests/.node ] || { mkdir -p "$node_home" && ln -s "$node_home" tests/.node; }
node_modules=tests/.node/node_modules
[ -d "$node_modules/kinesalite" ] ||
  npm install --no-audit --no-fund --prefix tests/.node kinesalite >/dev/null
grep -qs '"version": "3.37.0"' "$node_modules/azurite/package.json" ||
  npm install --no-audit --no-fund --prefix tests/.node azurite@3.37.0 >/dev/null
# A class-data archive of the Spark driver's classes (~150 MB, once per Java and pyspark): the suite's driver JVMs
# start on a third of the CPU (tests/spark_cds.py).
SPARK_LOCAL_IP=127.0.0.1 python3 tests/spark_cds.py >/dev/null ||
  echo "tests/setup.sh: no Spark class-data archive written; the tests run without it (slower driver starts)" >&2
