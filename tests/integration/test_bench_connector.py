"""bench/kafka_connector.py (dsflow beside Spark's own Kafka connector) in smoke mode: correctness, not speed.

The benchmark runs on the test run's Spark session, which has Spark's connector jars on its class path from its start
(tests/conftest.py, as the benchmark's own session has them when run by hand), and on the run's Apache Kafka (topics
under a prefix of this test's own), with the configuration its command line makes of `--smoke --queries q2,q5
--latency-seconds 4 --latency-queries q5`, and two queries: q2 (every bid read through each source, the selected
ones written through each sink) and q5 (a sliding-window count, watermarked, written in update mode: the stateful
path, ~840 window keys of 3,000 events). Every system's sink must hold exactly the records the plain-Python reference
makes of the preload, values compared (q5: its final value per window key); its report is then written by the
command (`--render`), as a run by hand writes it. tests/integration/test_bench_smoke.py checks every query on the
`dsflow_kafka` path.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import kafka_connector, report, spark_kafka  # noqa: E402
from dsflow.adapters.kafka import connector  # noqa: E402


@pytest.mark.integration
def test_dsflow_and_both_hand_written_queries_write_what_the_preload_makes(kafka_broker, spark, tmp_path: Path) -> None:
    results_file, section_file = tmp_path / "results.json", tmp_path / "section.md"
    cfg = kafka_connector.config_from(kafka_connector.arguments().parse_args(
        ["--smoke", "--queries", "q2,q5", "--latency-seconds", "4", "--latency-queries", "q5",
         "--prefix", f"connector_{os.getpid()}_"]))
    results = kafka_connector.run_all(cfg, kafka_broker.bootstrap, spark, tmp_path)
    results["versions"] = spark_kafka.jars().versions
    results_file.write_text(json.dumps(results, default=str))
    assert kafka_connector.main(["--render", str(results_file), "--out", str(section_file)]) == 0
    rows = results["rows"]
    assert {(r["query"], r["system"]) for r in rows} == {(q, s) for q in ("q2", "q5") for s in kafka_connector.SYSTEMS}
    preloaded = results["preload"]
    assert 0 < preloaded["q2_matches"] < preloaded["counts"]["bid"]
    for r in rows:
        assert r["expected_in"] == preloaded["counts"]["bid"] and r["records_in"] == [r["expected_in"]], r
        assert r["values_ok"] and r["counts_ok"] and r["rss_peak_mib"] > 100, r
        if r["query"] == "q2":
            assert r["expected_out"] == preloaded["q2_matches"] and r["records_out"] == [r["expected_out"]], r
        else:  # a changelog: at least one record per window key, the final values compared by values_ok
            assert r["expected_out"] is None and r["expected_records"] > 100, r
            assert r["records_out"][0] >= r["expected_records"], r
    assert results["versions"][spark_kafka.CONNECTOR_ARTIFACT] == spark_kafka.CONNECTOR_VERSION
    section = section_file.read_text()
    assert section.startswith(kafka_connector.BEGIN) and section.rstrip().endswith(kafka_connector.END)
    assert "| q2 selection |" in section and "| q5 hot items (HOP window) |" in section
    assert section.count("values checked") == 2 and "MISMATCH" not in section and "DIFFER" not in section
    probes = {r["system"]: r for r in results["latency"]}  # q5 at 200 events/s, dsflow beside the connector
    assert set(probes) == {"dsflow", "spark"} and all(r["query"] == "q5" for r in results["latency"]), probes
    for r in probes.values():
        assert "error" not in r and r["arrived"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"], r
    assert "| q5 | " in section and "latency target" in section


def test_the_section_is_replaced_in_place_or_put_under_the_hand_written_marker() -> None:
    first = f"{kafka_connector.BEGIN}\n\n## run one\n\n{kafka_connector.END}\n"
    second = f"{kafka_connector.BEGIN}\n\n## run two\n\n{kafka_connector.END}\n"
    doc = f"# Benchmarks\n\ngenerated\n\n{report.HAND_WRITTEN}\n\n## older notes\n"
    once = kafka_connector.replace_section(doc, first)
    assert once.index(report.HAND_WRITTEN) < once.index("## run one") < once.index("## older notes")
    assert f"{report.HAND_WRITTEN}\n\n{kafka_connector.BEGIN}" in once and f"{kafka_connector.END}\n\n## older" in once
    twice = kafka_connector.replace_section(once, second)
    assert "## run one" not in twice and twice.count(kafka_connector.BEGIN) == 1
    assert twice == once.replace("## run one", "## run two")
    assert kafka_connector.replace_section("", first) == first


def test_only_the_jars_spark_lacks_are_kept() -> None:
    spark_jars = {"spark-tags_2.13-4.3.0.jar", "slf4j-api-2.0.17.jar", "lz4-java-1.11.0.jar", "commons-pool-1.5.4.jar",
                  "hadoop-client-api-3.5.0.jar", "spark-sql_2.13-4.3.0.jar"}
    resolved = [(artifact, version, Path(f"{artifact}-{version}.jar")) for artifact, version in (
        ("spark-sql-kafka-0-10_2.13", "4.2.0"), ("spark-token-provider-kafka-0-10_2.13", "4.2.0"),
        ("kafka-clients", "3.9.2"), ("commons-pool2", "2.13.1"), ("spark-tags_2.13", "4.2.0"),
        ("slf4j-api", "1.7.36"), ("lz4-java", "1.10.1"), ("hadoop-client-api", "3.5.0"))]
    kept = [artifact for artifact, _, _ in connector.keep(resolved, spark_jars)]
    assert kept == ["spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "kafka-clients",
                    "commons-pool2"]


def test_an_offline_folder_without_the_connector_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "kafka-clients-3.9.2.jar").write_bytes(b"")
    monkeypatch.setenv(spark_kafka.OFFLINE_ENV, str(tmp_path))
    with pytest.raises(spark_kafka.ResolveError, match="holds no spark-sql-kafka-0-10_2.13 jar"):
        spark_kafka.jars()


def test_the_first_query_and_every_stateful_one_are_warmed_up_untimed_unless_smoke() -> None:
    cfg = kafka_connector.Config(queries=("q1", "q0", "q3", "q5", "q7", "q8", "q2"))
    warmed = [q for index, q in enumerate(cfg.queries) if kafka_connector.warms_up(cfg, index, q)]
    assert warmed == ["q1", "q3", "q5", "q7", "q8"]
    smoke = kafka_connector.Config.smoke_config()
    assert not any(kafka_connector.warms_up(smoke, index, q) for index, q in enumerate(smoke.queries))
