"""How often `dsflow validate` and Spark's analyzer agree on generated queries (docs/validate.md).

    PYTHONPATH=. python3 bench/type_agreement.py --queries 5000 --seed 1 [--minutes 40]

Each batch is one project of those of `--size` generated queries not compared before (each query is compared once;
tests/support/type_queries.py: the grammar, the two verdicts and how they are compared). Prints the counts by outcome,
dsflow's codes among the refusals, and every disagreement. It stops at `--queries`, or after `--minutes` (on a loaded
machine: the figures are then those of the queries compared so far, and say so).
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
    parser.add_argument("--minutes", type=float, default=0, help="stop comparing after this long (0: no limit)")
    args = parser.parse_args()

    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st

    from support import type_queries as tq
    from dsflow.adapters.spark.session import build_session

    spark = build_session("local[2]", app_name="dsflow-type-agreement", conf={})
    spark.sparkContext.setLogLevel("OFF")
    tq.prepare(spark)
    verdicts = tq.Verdicts()
    started = time.monotonic()

    @seed(args.seed)
    @settings(max_examples=args.batches, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(batch=st.lists(tq.queries, min_size=args.size, max_size=args.size))
    def run(batch) -> None:
        elapsed = time.monotonic() - started
        if verdicts.total >= args.queries or (args.minutes and elapsed > 60 * args.minutes):
            raise Done  # not drawing the batches left: on a loaded machine that took longer than comparing
        fresh = list(dict.fromkeys(q for q in batch if tq.shown(*q) not in verdicts.distinct))  # each query once
        if not fresh:
            return
        tq.compare(spark, fresh[:args.queries - verdicts.total], verdicts)
        if verdicts.total % 200 < len(fresh):
            print(f"{verdicts.total} queries, {verdicts.agreeing} agreeing, {elapsed:.0f} s", file=sys.stderr,
                  flush=True)

    try:
        run()
    except Done:
        pass
    stopped = " (stopped by --minutes)" if verdicts.total < args.queries else ""
    print(f"queries: {verdicts.total}{stopped}; agreement {verdicts.agreeing}/{verdicts.total} "
          f"({100 * verdicts.agreeing / max(1, verdicts.total):.2f} %), {len(verdicts.distinct)} distinct, "
          f"in {time.monotonic() - started:.0f} s")
    for outcome, count in sorted(verdicts.counts.items()):
        print(f"  {count:6}  {outcome}")
    for kind in sorted({k for k, _ in verdicts.by_kind}):
        agreeing = verdicts.by_kind[(kind, True)]
        print(f"  {kind}: {agreeing}/{agreeing + verdicts.by_kind[(kind, False)]} agreeing")
    print("dsflow's codes among refused queries: " + ", ".join(f"{c} {n}" for c, n in verdicts.codes.most_common()))
    same = verdicts.result_types["same"]
    print(f"result column types of the queries both accept: {same}/{sum(verdicts.result_types.values())} as Spark's")
    for difference, count in verdicts.result_types.most_common():
        if difference != "same":
            print(f"  {count:6}  {difference}")
    for sql, declared, computed in verdicts.type_examples[:args.show]:
        print(f"    {declared} vs {computed}: {sql}")
    print(f"distinct disagreements: {len(verdicts.disagreements)}")
    for outcome, sql, detail in verdicts.disagreements[:args.show]:
        print(f"- {outcome}\n    {sql}\n    {detail}")
    spark.stop()


class Done(Exception):  # noqa: N818 - not an error: the run has compared what it was asked to
    """Raised inside the hypothesis run to end it (its generate phase only: nothing is shrunk or replayed)."""


if __name__ == "__main__":
    main()
