"""The project fuzzer's statement grammar, run long by hand: projects of generated statements, each validated; every
traceback is collected (not only the first) with the statements that caused it (docs/testing.md).

    PYTHONPATH=. python3 bench/fuzz_statements.py --projects 10000 --seed 1
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "unit")]  # the helpers (support/) and the fuzzer test module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--projects", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st

    from support import sql_grammar
    from test_fuzz_project import STATS, check_generated_statements

    from test_fuzz_project import _copy

    failures: Counter = Counter()
    root = _copy("example", Path(tempfile.mkdtemp(prefix="dsflow-fuzz-")))
    examples: dict[str, list[str]] = {}
    started = time.monotonic()

    @seed(args.seed)
    @settings(max_examples=args.projects, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(statements=st.lists(sql_grammar.statements, min_size=1, max_size=4))
    def run(statements: list[str]) -> None:
        try:
            check_generated_statements(statements, root)
        except AssertionError as error:
            key = str(error).strip().splitlines()[-1][:200] if str(error).strip() else "assertion"
            failures[key] += 1
            examples.setdefault(key, statements)
        except Exception as error:  # noqa: BLE001 - a traceback dsflow's CLI would print
            key = "".join(traceback.format_exception_only(error)).strip()[:200]
            failures[key] += 1
            examples.setdefault(key, statements)
        if STATS["projects"] % 1000 == 0:
            print(f"{STATS['projects']} projects, tracebacks so far: {sum(failures.values())}", flush=True)

    run()
    shutil.rmtree(root.parent, ignore_errors=True)
    print(f"projects: {STATS['projects']}, validate runs: {STATS['commands']} ({STATS['ok']} exit 0, "
          f"{STATS['diagnostics']} exit 1 with diagnostics), tracebacks: {sum(failures.values())}, "
          f"in {time.monotonic() - started:.0f} s")
    for key, count in failures.most_common():
        print(f"- {count} x {key}\n    " + "\n    ".join(examples[key]))


if __name__ == "__main__":
    main()
