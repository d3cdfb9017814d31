"""How often `dsflow validate` and Spark's analyzer agree on generated queries (docs/validate.md).

    PYTHONPATH=. python3 bench/type_agreement.py --queries 5000 --seed 1

Each batch is one project of those of `--size` generated queries not compared before (each query is compared once;
tests/support/type_queries.py: the grammar, the two verdicts and how they are compared). Prints the counts by outcome,
dsflow's codes among the refusals, and every disagreement.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=5000, help="distinct queries compared")
    parser.add_argument("--batches", type=int, default=2000, help="batches generated, at most")
    parser.add_argument("--size", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--show", type=int, default=40, help="disagreements printed")
    args = parser.parse_args()

    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    from support import type_queries as tq
    from dsflow.adapters.spark.session import build_session

    spark = build_session("local[2]", app_name="dsflow-type-agreement", conf={})
    spark.sparkContext.setLogLevel("OFF")
    tq.prepare(spark)
    verdicts = tq.Verdicts()
    started = time.monotonic()

    @seed(args.seed)
    @settings(max_examples=args.batches, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(batch=st.lists(tq.queries, min_size=args.size, max_size=args.size))
    def run(batch) -> None:
        fresh = list(dict.fromkeys(q for q in batch if q[1] not in verdicts.distinct))  # each query once
        if verdicts.total >= args.queries or not fresh:
            return
        tq.compare(spark, fresh[:args.queries - verdicts.total], verdicts)
        if verdicts.total % 1000 < args.size:
            print(f"{verdicts.total} queries, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)

    run()
    print(f"queries: {verdicts.total}; agreement {verdicts.agreeing}/{verdicts.total} "
          f"({100 * verdicts.agreeing / max(1, verdicts.total):.2f} %), {len(verdicts.distinct)} distinct, "
          f"in {time.monotonic() - started:.0f} s")
    for outcome, count in sorted(verdicts.counts.items()):
        print(f"  {count:6}  {outcome}")
    print("dsflow's codes among refused queries: " + ", ".join(f"{c} {n}" for c, n in verdicts.codes.most_common()))
    print(f"distinct disagreements: {len(verdicts.disagreements)}")
    for outcome, sql, detail in verdicts.disagreements[:args.show]:
        print(f"- {outcome}\n    {sql}\n    {detail}")
    spark.stop()


if __name__ == "__main__":
    main()
