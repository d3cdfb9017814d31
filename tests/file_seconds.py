"""Write tests/file_seconds.json from a JUnit report of a whole run: the seconds each test file took, which
conftest.py's `pytest_collection_modifyitems` uses to start the slowest files first.

    python3 -m pytest --junitxml=/tmp/run.xml && python3 tests/file_seconds.py /tmp/run.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def file_seconds(report: Path) -> dict[str, float]:
    root = Path(__file__).resolve().parent.parent
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).iter("testcase"):
        parts = case.get("classname", "").split(".")  # tests.test_x, or tests.test_x.TestClass
        path = next((f"{'/'.join(parts[:n])}.py" for n in range(len(parts), 0, -1)
                     if (root / f"{'/'.join(parts[:n])}.py").is_file()), None)
        if path is not None:
            seconds[path] += float(case.get("time") or 0.0)
    return {name: round(value, 1) for name, value in sorted(seconds.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    out = Path(__file__).parent / "file_seconds.json"
    out.write_text(json.dumps(file_seconds(Path(sys.argv[1])), indent=1) + "\n")
    print(f"wrote {out}")
