"""The project fuzzer: mutated copies of real projects never make dsflow print a traceback or hang.

Each example copies example_project (or examples/registry_project) and applies one to three mutations drawn by
hypothesis: truncations, byte flips, NUL and control characters, bytes that are not UTF-8, YAML values of the
wrong type, duplicate keys, deep nesting (YAML, Jinja, SQL), Jinja runtime errors, broken SQL, odd file names and
odd file kinds. `dsflow validate` and `dsflow plan --no-refresh` then run in this process (click's entry point, with
the error handling of `dsflow.cli.main`); each must end with exit 0, or exit 1 and diagnostics carrying a DSF code.
Any other exception is a traceback the user would see, and fails the test with the example that caused it.

CI runs a fixed-seed slice (`derandomize=True`); a longer run by hand (docs/testing.md, "The project fuzzer"):

    DSFLOW_FUZZ_EXAMPLES=2500 DSFLOW_FUZZ_SEED=1 python -m pytest tests/unit/test_fuzz_project.py -q -s -k no_mutated

Pure: nothing talks to a broker or Spark (`plan --no-refresh` reads only the local state file); the registry
project's registry URL points at a closed port, so a load that would ask it fails with DSF-E123 (after the
client's retries, ~2.5 s; its `payments` stream, whose columns come from the registry, is left out).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from support import sql_grammar
from dsflow.cli import cli
from dsflow.errors import DsflowError, ProjectError
from dsflow.cli.render import diagnostics_text
from support.projects import EXAMPLE_PROJECT, REPO

EXAMPLES = int(os.environ.get("DSFLOW_FUZZ_EXAMPLES", "250"))
STATEMENT_EXAMPLES = int(os.environ.get("DSFLOW_FUZZ_STATEMENTS", "60"))
"""Projects of generated statements (tests/support/sql_grammar.py) in CI; bench/fuzz_statements.py runs more by hand."""
SEED = os.environ.get("DSFLOW_FUZZ_SEED")
"""Unset: hypothesis's fixed derandomized sequence (CI). Set: another fixed sequence, for a long run by hand."""
HANG_SECONDS = 60
"""A command that runs this long hangs: a normal one takes well under a second (a hang detector, not a timing
assertion)."""
REGISTRY_PROJECT = REPO / "examples" / "registry_project"
BASES = {"example": EXAMPLE_PROJECT, "registry": REGISTRY_PROJECT}
COMMANDS = (["validate"], ["plan", "--no-refresh"])
STATS = {"projects": 0, "commands": 0, "ok": 0, "diagnostics": 0}

# --- what mutations insert ----------------------------------------------------------------------------------------

CONTROL = ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\u2028", "\ufeff", "\ud7ff",
           "\r", "\t", "\r\n"]
NOT_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xe2\x82"]
JINJA = [
    "{{ 1/0 }}", "{{ var() }}", "{{ var(1, 2, 3) }}", "{{ var('fuzz_missing') }}", "{{ var(['a']) }}",
    "{{ env_var() }}", "{{ env_var('DSF_FUZZ_SURELY_UNSET') }}", "{{ env_var('A', 'b', 'c') }}",
    "{% include 'other.sql' %}", "{% extends 'base.sql' %}", "{% import 'm.sql' as m %}", "{% from 'm' import x %}",
    "{{ ''.__class__.__mro__ }}", "{{ 'a' * 10**10 }}", "{{ 9**9**9 }}", "{{ 9**(9**9) }}", "{{ x.y }}",
    "{{ none.x }}", "{{ [1][5] }}",
    "{{ {}['k'] }}", "{{ 'a' ~ }}", "{{", "}}", "{% if %}", "{% endif %}", "{# unclosed", "{{ var('bootstrap') + 1 }}",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{{ " + "(" * 3 + "1" + ")" * 3 + " }}", "{{ int('x') }}",
    "{% for i in range(3) %}{{ i }}{% endfor %}", "{{ range(10**9) | list | length }}", "{{ lipsum(10**6) }}",
    "{% set x = 1 %}{{ x.__init__ }}", "{{ cycler.__init__.__globals__ }}", "{{ 'x' | int / 0 }}",
]
SQL = [
    "CREATE STREAM fz_nofrom AS SELECT id;", "CREATE STREAM fz_one AS SELECT 1 AS one;",
    "CREATE STREAM \"\" (id BIGINT) WITH ('value.format' = 'json');",
    "CREATE STREAM analytics.\"\".fz (id BIGINT) WITH ('value.format' = 'json');",
    "CREATE STREAM fz_dup (id BIGINT) WITH ('value.format' = 'json', 'topic' = 'a', 'topic' = 'b');",
    "CREATE STREAM fz_uni (id BIGINT) WITH ('value.format' = 'json', 'topic' = 'tópico é');",
    "CREATE STREAM fz_long (id BIGINT) WITH ('value.format' = 'json', 'topic' = '" + "t" * 303 + "');",
    "CREATE STREAM fz_dot (id BIGINT) WITH ('value.format' = 'json', 'topic' = '..');",
    "CREATE STREAM \"fz space\" (id BIGINT) WITH ('value.format' = 'json');",
    "SELECT", "CREATE", "CREATE STREAM", "CREATE STREAM fz AS", "INSERT INTO pageviews SELECT * FROM pageviews;",
    "CREATE STREAM fz_self AS SELECT * FROM fz_self;",
    "CREATE STREAM fz_w WITH ('topic' =) AS SELECT id FROM pageviews;",
    "'unclosed", "/* unclosed", "\"unclosed",
    "CREATE STREAM fz_d (id BIGINT, id BIGINT) WITH ('value.format' = 'json');",
    "CREATE STREAM fz_t (id FOO) WITH ('value.format' = 'json');", "DROP STREAM pageviews;",
    "CREATE STREAM fz_a (id BIGINT) WITH ('value.format' = 'avro');", "CREATE STREAM fz_n (id BIGINT) WITH (1 = 2);",
    "CREATE STREAM fz_sub AS SELECT id FROM pageviews WHERE id IN (SELECT id FROM pageviews);",
    "CREATE CHANGELOG fz_agg AS SELECT userid, COUNT(*) AS n FROM pageviews GROUP BY userid;",
    "CREATE STREAM fz_j AS SELECT p.id FROM pageviews p JOIN pageviews q WITHIN 1 minute ON p.id = q.id;",
    "CREATE TABLE fz_tab AS SELECT id FROM pageviews;", "CREATE MATERIALIZED VIEW fz_mv AS SELECT id FROM pageviews;",
    "CREATE STREAM fz_q WITH ('dlq.topic' = 'bad topic!') AS SELECT id FROM pageviews;",
    "CREATE STREAM fz_x AS SELECT id->a->b AS z FROM pageviews;",
    "CREATE STREAM fz_c AS SELECT CAST(id AS FOO) AS c FROM pageviews;",
    "CREATE STREAM fz_k WITH ('store' = 'nope') AS SELECT * FROM pageviews;", ";;;;", "-- only a comment",
]
TOKENS = ["CREATE", "STREAM", "CHANGELOG", "TABLE", "MATERIALIZED", "VIEW", "AS", "SELECT", "FROM", "WHERE", "WITH",
          "(", ")", ",", "'topic'", "=", "'x'", "id", "pageviews", "users", "*", "JOIN", "ON", "GROUP", "BY", "WITHIN",
          "1", "minute", "PRIMARY", "KEY", "INSERT", "INTO", "BIGINT", "VARCHAR", "->", ".", "\"q\"", "NULL", "CASE",
          "WHEN", "THEN", "END", "TUMBLE", "HOP", "PARTITION", "COUNT", "OVER", "LIMIT", "UNION", ";", "'"]
YAML_SNIPPETS = [
    "stores: 5", "- a", "a: [", "a: {", "x: &x [*x]", "!!python/object/apply:os.system ['true']", "? [a]\n: b",
    "<<: 5", "stores:\n  - name: fz\n    type: kinesis\n    properties: {region: x}",
    "stores:\n  - name: fz\n    type: kafka\n    bootstrap_servers: [1, 2]", "databases: {a: b}", "roles: null",
    "datagen:\n  - name: g\n    relation: pageviews\n    generator: pageviews\n    rate: -1", "\t- tab", "'",
    "key: value\nkey: again",
]
WRONG_VALUES = [None, 0, -1, 10**30, 1.5, True, "", "x" * 300, [], [1, [2]], {}, {"a": {"b": None}}, "\u00e9\u4e2d",
                "{{ 1/0 }}", "a/../b"]
CONFIG_EDITS = [
    ("state", {"path": ".ds\x00flow"}), ("state", {"path": ""}), ("state", {"path": "a\nb"}),
    ("state", {"path": "dsflow.yml"}), ("state", {"backend": "nope"}), ("runtime", {"checkpoint_root": "\x00"}),
    ("environments", {"../../etc": {}}), ("environments", {"dev": {"topic_prefix": "é-"}}),
    ("environments", {"dev": {"topic_prefix": "p" * 300}}), ("environments", {"dev": {"vars": None}}),
    ("default_environment", "nope"), ("default", {"store": ""}), ("name", ""), ("name", ["a"]), ("version", "x"),
]
ODD_FILES = ["dir_config", "fifo_config", "symlink_config_loop", "empty_config", "bom_config", "dir_sql", "fifo_sql",
             "symlink_loop", "dangling_symlink", "non_utf8_name", "newline_name", "long_name", "unicode_name",
             "state_dir", "state_garbage", "cache_garbage", "unreadable_file"]


@dataclass(frozen=True)
class Mutation:
    """One change to a project copy: `kind`, the file it picks (by index into the project's files, sorted), a
    position in [0, 1) and what it inserts or does."""

    kind: str
    file: int
    where: float
    payload: object

    def apply(self, root: Path) -> None:
        files = sorted(p for p in root.rglob("*") if p.is_file() and ".dsflow" not in p.parts)
        path = files[self.file % len(files)] if files else None
        if path is not None or self.kind in ("append_sql", "nest", "odd"):
            getattr(self, f"_{self.kind}")(root, path)

    def _at(self, data: bytes) -> int:
        return int(len(data) * self.where)

    def _truncate(self, root: Path, path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[:self._at(data)])

    def _flip(self, root: Path, path: Path) -> None:
        data = bytearray(path.read_bytes())
        if data:
            index = min(self._at(data), len(data) - 1)
            data[index] ^= int(self.payload)
        path.write_bytes(bytes(data))

    def _insert(self, root: Path, path: Path) -> None:
        data = path.read_bytes()
        chunk = self.payload if isinstance(self.payload, bytes) else str(self.payload).encode("utf-8", "surrogatepass")
        at = self._at(data)
        path.write_bytes(data[:at] + chunk + data[at:])

    def _lines(self, root: Path, path: Path) -> None:
        """Delete a run of lines (a half-deleted statement), or repeat one (a duplicate YAML key)."""
        lines = path.read_bytes().splitlines(keepends=True)
        if not lines:
            return
        start = min(int(len(lines) * self.where), len(lines) - 1)
        count = int(self.payload)
        if count > 0:
            del lines[start:start + count]
        else:
            lines.insert(start, lines[start])
        path.write_bytes(b"".join(lines))

    def _append_sql(self, root: Path, path: Path) -> None:
        target = root / "sql" / "fuzz.sql"
        target.parent.mkdir(exist_ok=True)
        with open(target, "a", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write("\n" + str(self.payload) + "\n")

    def _yaml_value(self, root: Path, path: Path) -> None:
        """Replace one value of a YAML file (the file's n-th leaf or mapping) with a value of the wrong type."""
        yamls = sorted(p for p in root.rglob("*.yml") if p.is_file() and ".dsflow" not in p.parts)
        if not yamls:
            return
        path = yamls[self.file % len(yamls)]
        try:
            data = yaml.safe_load(path.read_text())
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            return
        slots = list(_slots(data))
        if not slots:
            return
        container, key = slots[int(len(slots) * self.where) % len(slots)]
        container[key] = self.payload
        path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False))

    def _config(self, root: Path, path: Path) -> None:
        config = root / "dsflow.yml"
        try:
            data = yaml.safe_load(config.read_text()) if config.is_file() else None  # a FIFO would block
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            return
        if not isinstance(data, dict):
            return
        key, value = self.payload
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
        config.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False))

    def _nest(self, root: Path, path: Path) -> None:
        where, depth = self.payload
        if where == "yaml":
            (root / "deep.yml").write_text("roles: " + "[" * depth + "]" * depth + "\n")
        elif where == "yaml_map":
            (root / "deep.yml").write_text("roles:\n" + "".join(" " * (i + 1) + "- a:\n" for i in range(depth)))
        elif where == "jinja":
            (root / "sql" / "deep.sql").write_text("-- {{ " + "(" * depth + "1" + ")" * depth + " }}\n")
        elif where == "sql":
            (root / "sql" / "deep.sql").write_text("CREATE STREAM fz_deep AS SELECT " + "(" * depth + "id" + ")" * depth
                                                   + " AS id FROM pageviews;\n")
        else:
            (root / "sql" / "deep.sql").write_text("CREATE STREAM fz_deep AS SELECT id FROM pageviews WHERE "
                                                   + "NOT " * depth + "id > 1;\n")

    def _odd(self, root: Path, path: Path) -> None:
        with contextlib.suppress(OSError):  # already made by an earlier mutation, or its file is gone
            _odd_file(root, str(self.payload))


def _slots(data, depth: int = 0):
    """(container, key) of every value of a parsed YAML document, outermost first."""
    if depth > 20:
        return
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        yield data, key
        yield from _slots(value, depth + 1)


def _odd_file(root: Path, kind: str) -> None:
    config, sql = root / "dsflow.yml", root / "sql"
    state = root / ".dsflow" / "state" / "dev.json"
    if kind == "dir_config":
        config.unlink()
        config.mkdir()
    elif kind == "fifo_config":
        config.unlink()
        os.mkfifo(config)
    elif kind == "symlink_config_loop":
        config.unlink()
        config.symlink_to(config)
    elif kind == "empty_config":
        config.write_bytes(b"")
    elif kind == "bom_config":
        config.write_bytes(b"\xef\xbb\xbf" + config.read_bytes())
    elif kind == "dir_sql":
        (sql / "dir.sql").mkdir(parents=True)
    elif kind == "fifo_sql":
        sql.mkdir(exist_ok=True)
        os.mkfifo(sql / "fifo.sql")
    elif kind == "symlink_loop":
        (root / "loop").symlink_to(root)
    elif kind == "dangling_symlink":
        sql.mkdir(exist_ok=True)
        (sql / "gone.sql").symlink_to(root / "nowhere.sql")
    elif kind == "non_utf8_name":
        sql.mkdir(exist_ok=True)
        (sql / os.fsdecode(b"bad\xff\xfe.sql")).write_text("-- x\n")
    elif kind == "newline_name":
        sql.mkdir(exist_ok=True)
        (sql / "new\nline.sql").write_text("CREATE STREAM fz_nl (id BIGINT) WITH ('value.format' = 'json');\n")
    elif kind == "long_name":
        sql.mkdir(exist_ok=True)
        (sql / ("l" * 250 + ".sql")).write_text("-- long\n")
    elif kind == "unicode_name":
        sql.mkdir(exist_ok=True)
        (sql / "naïve ✓.sql").write_text("-- unicode\n")
    elif kind == "state_dir":
        state.mkdir(parents=True)
    elif kind == "state_garbage":
        state.parent.mkdir(parents=True)
        state.write_bytes(b"\xff{not json")
    elif kind == "cache_garbage":
        (root / ".dsflow" / "cache").mkdir(parents=True)
        (root / ".dsflow" / "cache" / "load-dev.json").write_bytes(b'{"code": 1, "entries": [], "files": 7}')
    elif kind == "unreadable_file" and os.geteuid() != 0:  # root reads any file: this one is tried by others
        (sql / "pipelines.sql").chmod(0)


# --- strategies ---------------------------------------------------------------------------------------------------

positions = st.floats(min_value=0, max_value=0.999)
file_index = st.integers(min_value=0, max_value=50)
token_soup = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=40).map(lambda t: " ".join(t) + ";")
text_chunk = st.text(min_size=1, max_size=40)
mutations = st.one_of(
    st.builds(Mutation, st.just("truncate"), file_index, positions, st.none()),
    st.builds(Mutation, st.just("flip"), file_index, positions, st.integers(min_value=1, max_value=255)),
    st.builds(Mutation, st.just("insert"), file_index, positions,
              st.one_of(st.sampled_from(CONTROL), st.sampled_from(NOT_UTF8), st.sampled_from(JINJA),
                        st.sampled_from(YAML_SNIPPETS), text_chunk)),
    st.builds(Mutation, st.just("lines"), file_index, positions, st.integers(min_value=-1, max_value=6)),
    st.builds(Mutation, st.just("append_sql"), file_index, positions,
              st.one_of(st.sampled_from(SQL), token_soup, st.sampled_from(JINJA))),
    st.builds(Mutation, st.just("yaml_value"), file_index, positions, st.sampled_from(WRONG_VALUES)),
    st.builds(Mutation, st.just("config"), file_index, positions, st.sampled_from(CONFIG_EDITS)),
    st.builds(Mutation, st.just("nest"), file_index, positions,
              st.tuples(st.sampled_from(["yaml", "yaml_map", "jinja", "sql", "sql_not"]),
                        st.sampled_from([10, 70, 200, 500, 1200, 5000]))),
    st.builds(Mutation, st.just("odd"), file_index, positions, st.sampled_from(ODD_FILES)),
)


# --- running the commands -----------------------------------------------------------------------------------------


class Hang(Exception):
    """A command ran for HANG_SECONDS."""


def run_command(args: list[str]) -> tuple[int, str]:
    """One dsflow command in this process, with the error handling of `dsflow.cli.main` (which also freezes the
    garbage collector for the process: not wanted in a test). Any other exception propagates: the user would see
    it as a traceback."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(args, standalone_mode=False)
            code = 0
        except click.exceptions.Abort:
            code = 1
        except click.ClickException as error:
            error.show()
            code = error.exit_code
        except ProjectError as error:
            print(diagnostics_text([d.to_dict() for d in error.diagnostics]), file=err)
            code = 1
        except DsflowError as error:
            print(str(error), file=err)
            code = 1
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 1
    return code, out.getvalue() + err.getvalue()


def _on_alarm(signum, frame):
    raise Hang(f"a command ran for {HANG_SECONDS} s")


def check_project_commands(root: Path, extra: list[str], commands: tuple[list[str], ...] = COMMANDS) -> None:
    """validate and plan --no-refresh (or `commands`): exit 0, or exit 1 with diagnostics that carry a DSF code."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    STATS["projects"] += 1
    if STATS["projects"] % 500 == 0:  # progress of a long run (seen with -s)
        print(f"fuzz: {STATS['projects']} projects so far", flush=True)
    try:
        for command in commands:
            signal.alarm(HANG_SECONDS)
            try:
                code, output = run_command(["-C", str(root), *extra, *command])
            finally:
                signal.alarm(0)
            STATS["commands"] += 1
            assert code in (0, 1), f"{command}: exit {code}\n{output}"
            assert "Traceback" not in output, output
            assert "DSF-E000" not in output, output
            if code == 1:
                assert "DSF-E" in output, f"{command}: exit 1 without a diagnostic\n{output}"
                STATS["diagnostics"] += 1
            else:
                STATS["ok"] += 1
    finally:
        signal.signal(signal.SIGALRM, previous)


def _copy(base: str, into: Path) -> Path:
    root = into / base
    shutil.copytree(BASES[base], root, ignore=shutil.ignore_patterns(".dsflow", "__pycache__", "target"))
    if base == "registry":
        sql = root / "sql" / "orders.sql"  # payments takes its columns from a live registry: left out (2-3 s each)
        sql.write_text(sql.read_text().split("-- Payments:")[0])
    return root


@pytest.fixture(scope="module", autouse=True)
def fuzz_env():
    """No variable a mutation names is set; the figures of the run are printed at the end."""
    os.environ.pop("DSF_FUZZ_SURELY_UNSET", None)
    yield
    print(f"\nfuzz: {STATS['projects']} projects, {STATS['commands']} commands: {STATS['ok']} exit 0, "
          f"{STATS['diagnostics']} exit 1 with diagnostics, tracebacks 0, hangs 0")


@(seed(int(SEED)) if SEED else lambda test: test)
@settings(max_examples=EXAMPLES, derandomize=SEED is None, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(base=st.sampled_from(sorted(BASES)), changes=st.lists(mutations, min_size=1, max_size=3))
def test_no_mutated_project_makes_a_traceback_or_hangs(base: str, changes: list[Mutation]) -> None:
    with tempfile.TemporaryDirectory(prefix="dsflow-fuzz-") as tmp:
        root = _copy(base, Path(tmp))
        for change in changes:
            change.apply(root)
        extra = ["--var", "registry=http://127.0.0.1:9"] if base == "registry" else []
        try:
            check_project_commands(root, extra)
        finally:
            for path in Path(tmp).rglob("*"):  # an unreadable file would stop the clean-up
                if not path.is_symlink():
                    with contextlib.suppress(OSError):
                        path.chmod(0o700)


def check_generated_statements(statements: list[str], root: Path) -> None:
    """A copy of example_project (`root`, reused: its own statements stay in its load cache) with `statements`
    (tests/support/sql_grammar.py) in a file of their own: validate ends in success or diagnostics."""
    (root / "sql" / "fuzz.sql").write_text("\n".join(statements) + "\n")
    check_project_commands(root, [], commands=(["validate"],))


def test_no_generated_statement_makes_a_traceback(tmp_path: Path) -> None:
    """Statements from a grammar of DeltaStream (every statement kind, unknown names, wrong arities, unsupported
    forms), not mutated bytes: the long run by hand is bench/fuzz_statements.py (docs/testing.md). Not shrunk (a
    failure shows the statements as generated): shrinking these took minutes."""
    root = _copy("example", tmp_path)

    @(seed(int(SEED)) if SEED else lambda test: test)
    @settings(max_examples=STATEMENT_EXAMPLES, derandomize=SEED is None, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(statements=st.lists(sql_grammar.statements, min_size=1, max_size=4))
    def check(statements: list[str]) -> None:
        check_generated_statements(statements, root)

    check()


@pytest.mark.parametrize("statement", [
    "CREATE STREAM fz AS SELECT CEIL() AS c FROM pageviews WHERE FLOOR();",  # sqlglot's annotation failed on it
    "CREATE STREAM fz AS SELECT DATE_TRUNC() AS c FROM pageviews;",  # a ValueError of sqlglot's parser
])
def test_the_statements_the_grammar_found_end_in_a_diagnostic(tmp_path: Path, statement: str) -> None:
    check_generated_statements([statement], _copy("example", tmp_path))


@pytest.mark.parametrize("kind", ODD_FILES)
def test_each_odd_file_kind_ends_in_success_or_a_diagnostic(tmp_path: Path, kind: str) -> None:
    root = _copy("example", tmp_path)
    _odd_file(root, kind)
    check_project_commands(root, [])


@pytest.mark.parametrize("snippet", JINJA)
def test_each_template_error_ends_in_success_or_a_diagnostic(tmp_path: Path, snippet: str) -> None:
    root = _copy("example", tmp_path)
    (root / "sql" / "fuzz.sql").write_text(f"-- {snippet}\n")
    check_project_commands(root, [])


def test_the_fuzzer_can_fail() -> None:
    """The check itself: a command that raises is not taken for success."""
    @cli.command("fuzz-raise")
    def fuzz_raise() -> None:
        raise IndexError("list index out of range")

    try:
        with pytest.raises(IndexError):
            run_command(["fuzz-raise"])
    finally:
        cli.commands.pop("fuzz-raise", None)


def test_mutations_are_reproducible() -> None:
    """Same example, same project: a failure found by the long run can be replayed."""
    change = Mutation("flip", 3, 0.5, 7)
    roots = []
    for _ in range(2):
        tmp = Path(tempfile.mkdtemp(prefix="dsflow-fuzz-"))
        root = _copy("example", tmp)
        change.apply(root)
        roots.append(root)
    assert [p.read_bytes() for p in sorted(roots[0].rglob("*.*"))] == \
        [p.read_bytes() for p in sorted(roots[1].rglob("*.*"))]
    for root in roots:
        shutil.rmtree(root.parent)


def test_the_long_run_by_hand_starts_and_reports() -> None:
    """bench/fuzz_statements.py, the long run docs/testing.md gives, runs a few projects and prints its figures (it
    once failed to import this module after the tests moved into tests/unit, and nothing noticed)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(REPO / "bench" / "fuzz_statements.py"), "--projects", "3"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "projects: 3, validate runs: 3" in done.stdout and "tracebacks: 0" in done.stdout, done.stdout
