"""One cause, one error (issue 40, item 4): an error that only follows from another one is folded under it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dsflow.errors import Diagnostic, Location
from dsflow.load.consequences import Declared, fold, sql_declarations, without_template
from dsflow.load.project import check_project
from dsflow.load.queries import qualified_name
from support.projects import EXAMPLE_PROJECT, PAGEVIEWS, copy_example, make_project

REPO = Path(__file__).resolve().parents[2]
MISSING = "DSF_TEST_SURELY_UNSET_VARIABLE"


def _errors(root: Path) -> list[Diagnostic]:
    return check_project(root, environ={}).errors


def test_a_missing_env_var_in_the_example_is_one_error_through_the_cli(tmp_path):
    root = copy_example(tmp_path)
    store = root / "stores" / "kafka.yml"
    store.write_text(store.read_text().replace("{{ var('bootstrap') }}", "{{ env_var('%s') }}" % MISSING))
    assert (EXAMPLE_PROJECT / "stores" / "kafka.yml").read_text() != store.read_text()  # the edit took
    run = subprocess.run([sys.executable, "-m", "dsflow.cli", "-C", str(root), "validate"], capture_output=True,
                         text=True, cwd=REPO, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout + run.stderr
    assert "DSF-E004" in out and f"'{MISSING}' is not set" in out
    assert "1 error(s) found" in out, out
    assert "DSF-E021" not in out and "DSF-E040" not in out and "DSF-E071" not in out
    assert "error(s) that follow from this one are not shown" in out and "store 'kafka_main'" in out


def test_an_unknown_relation_from_a_refused_statement_is_folded_under_its_error(tmp_path):
    broken = PAGEVIEWS.replace("'topic' = 'pageviews',", "'topic' = 'pageviews', 'store' = 'nowhere',")
    readers = "CREATE STREAM a AS SELECT id FROM pageviews;\nCREATE STREAM b AS SELECT id FROM a;\n"
    errors = _errors(make_project(tmp_path, {"sql/sources.sql": broken, "sql/readers.sql": readers}))
    assert [e.code for e in errors] == ["DSF-E021"], errors  # store 'nowhere' is the one cause
    assert "unknown store 'nowhere'" in errors[0].message
    assert "2 error(s) that follow from this one are not shown" in (errors[0].hint or "")


def test_a_statement_that_does_not_parse_hides_the_unknown_relation_it_declares(tmp_path):
    files = {"sql/sources.sql": PAGEVIEWS.replace("id BIGINT,", "id BIGINT (,"),
             "sql/readers.sql": "CREATE STREAM a AS SELECT id FROM pageviews;\n"}
    errors = _errors(make_project(tmp_path, files))
    assert [e.code for e in errors] == ["DSF-E002"], errors
    assert "relation 'analytics.public.pageviews'" in (errors[0].hint or "")


def test_an_unrelated_unknown_name_is_still_reported(tmp_path):
    files = {"sql/sources.sql": "{{ env_var('%s') }}\n%s" % (MISSING, PAGEVIEWS),
             "sql/readers.sql": "CREATE STREAM a AS SELECT id FROM pageview;\n"}  # a typo, not the fallen name
    errors = _errors(make_project(tmp_path, files))
    assert sorted(e.code for e in errors) == ["DSF-E004", "DSF-E040"], errors
    assert "unknown relation 'pageview'" in next(e.message for e in errors if e.code == "DSF-E040")


def test_a_template_error_in_sql_folds_what_reads_its_relations(tmp_path):
    files = {"sql/sources.sql": "-- {{ env_var('%s') }}\n%s" % (MISSING, PAGEVIEWS),
             "sql/readers.sql": "CREATE STREAM a AS SELECT id FROM pageviews;\n"}
    errors = _errors(make_project(tmp_path, files))
    assert [e.code for e in errors] == ["DSF-E004"], errors


def test_fold_needs_a_reported_cause_and_follows_chains():
    fallen = [Declared("store.k", Location("s.yml")), Declared("relation.d.s.r", Location("a.sql", 3))]
    cause = Diagnostic("DSF-E004", "template error", Location("s.yml", 4))
    store = Diagnostic("DSF-E021", "unknown store 'k'", Location("a.sql", 5, 3), subject="store.k")
    reader = Diagnostic("DSF-E040", "unknown relation 'r'", Location("b.sql", 1, 1), subject="relation.d.s.r")
    other = Diagnostic("DSF-E021", "unknown store 'x'", Location("c.sql", 1), subject="store.x")
    out = fold([cause, store, reader, other], fallen)
    assert [d.code for d in out] == ["DSF-E004", "DSF-E021"] and out[1] is other
    assert out[0].hint == ("2 error(s) that follow from this one are not shown "
                           "(unknown relation 'd.s.r', store 'k')")
    folded = fold([store, reader], fallen[1:])  # the store is not fallen: its error is the relation's cause
    assert [d.message for d in folded] == ["unknown store 'k'"] and "relation 'd.s.r'" in (folded[0].hint or "")
    alone = [reader]  # its declaration fell but no error is reported there: it stays
    assert fold(alone, fallen) == alone


def test_sql_declarations_read_names_from_unparsed_text():
    text = without_template("-- {{ x }}\nCREATE OR REPLACE STREAM IF NOT EXISTS curated.`v 1` AS\n"
                            "SELECT 1;\ncreate changelog t (a int primary key);\n")
    found = sql_declarations(text, "f.sql", lambda parts: qualified_name(parts, "db", "s"))
    assert found == [Declared("relation.db.curated.v 1", Location("f.sql", 2)),
                     Declared("relation.db.s.t", Location("f.sql", 4))]


def test_a_long_chain_folds_under_its_first_cause_without_recursion():
    n = 3000  # relation i is declared at line i of a.sql and reads relation i-1; the first reads a typo
    fallen = [Declared(f"relation.d.s.r{i}", Location("a.sql", i + 1)) for i in range(n)]
    first = Diagnostic("DSF-E040", "unknown relation 'typo'", Location("a.sql", 1, 5), subject="relation.d.s.typo")
    rest = [Diagnostic("DSF-E040", f"unknown relation 'r{i - 1}'", Location("a.sql", i + 1, 5),
                       subject=f"relation.d.s.r{i - 1}") for i in range(1, n)]
    out = fold([first, *rest], fallen)
    assert [d.message for d in out] == ["unknown relation 'typo'"]
    assert f"{n - 1} error(s) that follow from this one are not shown" in (out[0].hint or "")
    assert "and 2995 more)" in (out[0].hint or "")
