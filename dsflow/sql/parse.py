"""Parsing .sql files into raw statements with sqlglot's DeltaStream dialect.

Each statement is parsed on its own, so one syntax error does not hide the next statement's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from dsflow.errors import Diagnostic, Location
from dsflow.sql.access_sql import is_access, parse_access
from dsflow.sql.dialect import DeltaStream, is_window
from dsflow.sql.expect_sql import take_expectations
from dsflow.sql.flink_windows import restore as restore_flink_windows, rewrite_tokens as flink_window_tokens
from dsflow.sql.statements import RawColumn, RawProperty, RawStatement
from dsflow.sql.unsupported import is_cte_name, meaningless_clauses

DIALECT = DeltaStream()
TYPE_NAMES = {"TIMESTAMPTZ": "TIMESTAMP"}  # sqlglot's name for Spark's TIMESTAMP -> the name users write


def node_location(path: str, node: exp.Expr | None, fallback: Location | None = None) -> Location:
    """Where a node starts: the earliest token of its subtree (`db.schema.name` starts at `db`)."""
    found = []
    for child in node.walk() if node is not None else ():
        meta = getattr(child, "meta", None) or {}
        if "line" in meta:
            width = meta.get("end", 0) - meta.get("start", 0)
            found.append(Location(path, meta["line"], max(1, meta["col"] - width)))
    return min(found) if found else (fallback or Location(path))


def parse_sql_file(text: str, path: str) -> tuple[list[RawStatement], list[Diagnostic]]:
    """All statements of one file and the diagnostics of those that failed to parse."""
    chunks, diagnostics = split_statements(text, path)
    statements: list[RawStatement] = []
    for chunk in chunks:
        statement, problems = parse_statement(chunk, text, path)
        diagnostics += problems
        if statement is not None:
            statements.append(statement)
    return statements, diagnostics


_SPAN_SKIP = re.compile(r"""(?<![\w$])[rR]'[^']*'|(?<![\w$])[rR]"[^"]*"|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`[^`]*`"""
                        r"|--[^\n]*|/\*.*?\*/|(;)", re.S)
"""Strings, quoted names and comments (skipped), or a semicolon that ends a statement."""


@dataclass(frozen=True)
class Span:
    """Where a statement's text lies in its file: offsets, and the line and column it starts at (0-based)."""

    start: int
    end: int
    line: int
    col: int


def statement_spans(text: str) -> list[Span]:
    """The file cut at its top-level semicolons without tokenizing it (a regular expression in C: ~100x faster
    than sqlglot's tokenizer). It can be wrong where sqlglot's tokenizer would not, e.g. in a nested comment:
    tokenize_span then fails or finds a semicolon, and the caller parses the whole file instead."""
    spans, start, line, col = [], 0, 0, 0
    for found in _SPAN_SKIP.finditer(text):
        if found.group(1) is None:
            continue
        spans.append(Span(start, found.start(), line, col))
        line += text.count("\n", start, found.end())
        start = found.end()
        col = start - (text.rfind("\n", 0, start) + 1)
    spans.append(Span(start, len(text), line, col))
    return spans


def tokenize_span(text: str, span: Span) -> list[Token] | None:
    """The tokens of one statement of `statement_spans`, at their places in the file (as tokenizing the whole
    file gives them); None if the span does not tokenize, or holds a semicolon: it was cut wrongly."""
    try:
        tokens = DIALECT.tokenize(text[span.start:span.end])
    except TokenError:
        return None
    for token in tokens:
        if token.token_type is TokenType.SEMICOLON:
            return None
        if token.line == 1:
            token.col += span.col
        token.line += span.line
        token.start += span.start
        token.end += span.start
    return tokens


def split_statements(text: str, path: str) -> tuple[list[list[Token]], list[Diagnostic]]:
    """A file's tokens, one list per statement (parse each with parse_statement), or the tokenizer's error."""
    try:
        tokens = DIALECT.tokenize(text)
    except TokenError as err:
        return [], [Diagnostic("DSF-E002", f"SQL syntax error: {err}", _token_error_location(err, text, path),
                               hint="check for an unclosed quote or comment")]
    return _split(tokens), []


def _split(tokens: list[Token]) -> list[list[Token]]:
    chunks: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type is TokenType.SEMICOLON:
            chunks.append([])
        else:
            chunks[-1].append(token)
    return [c for c in chunks if c]


FLINK_WINDOWS = {
    "DESCRIPTOR": "Flink's window table function is taken as TABLE(TUMBLE(TABLE rel, DESCRIPTOR(col), INTERVAL '10' "
                  "SECOND)) (HOP: INTERVAL slide, INTERVAL size; SESSION: TABLE rel PARTITION BY key), or write "
                  "dsflow's TUMBLE(rel, SIZE 10 SECONDS), grouped by window_start, window_end; col is the "
                  "relation's 'timestamp' column (sql/flink_windows.py, docs/project.md)",
    "SESSION_START": "Flink's group window is taken as GROUP BY key, SESSION(col, INTERVAL '10' SECOND) with "
                     "SESSION_START(col, INTERVAL '10' SECOND), SESSION_END(...) in the SELECT (TUMBLE(col, size), "
                     "HOP(col, slide, size) likewise), or write dsflow's FROM SESSION(rel, GAP 10 SECONDS) GROUP BY "
                     "window_start, window_end, key",
}
FLINK_WINDOWS |= {name: FLINK_WINDOWS["SESSION_START"] for name in ("SESSION_END", "TUMBLE_START", "TUMBLE_END",
                                                                  "HOP_START", "HOP_END")}


def flink_window_hint(tokens: list[Token]) -> str | None:
    """The rewrite of Flink's window syntax (Nexmark q5, q7, q8, q11, q12) when a statement that fails to parse
    uses it; None otherwise."""
    return next((FLINK_WINDOWS[t.text.upper()] for t in tokens if t.text.upper() in FLINK_WINDOWS), None)


def parse_statement(tokens: list[Token], text: str, path: str) -> tuple[RawStatement | None, list[Diagnostic]]:
    start = Location(path, tokens[0].line, max(1, tokens[0].col - len(tokens[0].text) + 1))
    snippet = text[tokens[0].start: tokens[-1].end + 1]
    if is_access(tokens):  # GRANT, REVOKE, CREATE ROLE: sql/access_sql.py
        return parse_access(tokens, path, start, snippet)
    tokens, partition_by = _partition_by(tokens, path)
    tokens, expectations, problems = take_expectations(tokens, text, path)  # CONSTRAINT ... EXPECT: sql/expect_sql.py
    if problems:
        return None, problems
    if nesting(tokens) > MAX_NESTING:  # refused before the parser: its RecursionError depends on the stack left
        return None, [too_deep(start)]
    try:
        flink_tokens, flink_windows = flink_window_tokens(tokens)  # Flink's window syntax: sql/flink_windows.py
        parsed = DIALECT.parse_tokens(flink_tokens, text)
    except RecursionError:
        return None, [too_deep(start)]
    except ParseError as err:
        info = err.errors[0] if err.errors else {}
        loc = Location(path, info.get("line") or start.line, info.get("col") or start.col)
        desc = info.get("description") or str(err)
        return None, [Diagnostic("DSF-E002", f"SQL syntax error: {desc}", loc,
                                 hint=flink_window_hint(tokens)
                                 or "see the DeltaStream SQL reference in docs/project.md")]
    except ValueError as err:  # a builder of sqlglot's for a malformed call: DATE_TRUNC() (found by the fuzzer)
        return None, [Diagnostic("DSF-E002", f"SQL syntax error: {err}", start,
                                 hint="a function is called without the arguments it takes; see the DeltaStream "
                                      "SQL reference in docs/project.md")]
    expression = restore_flink_windows(parsed[0] if parsed else None, flink_windows)
    try:
        raw = _with_extra(_to_raw(expression, path, start, snippet), partition_by=partition_by,
                          expectations=expectations)
        return raw, \
            duplicate_properties(raw.properties) + \
            meaningless_clauses(expression, start, lambda node: node_location(path, node, start))
    except RecursionError:
        return None, [too_deep(start)]
    except _Unsupported as err:
        return None, [Diagnostic("DSF-E005", str(err), start,
                                 hint="supported: CREATE STREAM, CREATE CHANGELOG, CREATE FUNCTION, CREATE VIEW ... AS "
                                      "SELECT, CREATE STREAM|CHANGELOG|MATERIALIZED VIEW ... AS SELECT, "
                                      "INSERT INTO ... SELECT, GRANT, REVOKE, CREATE ROLE")]


def _with_extra(raw: RawStatement, **found: tuple) -> RawStatement:
    """`raw` with the clauses taken out of its tokens (PARTITION BY, CONSTRAINT ... EXPECT) that it has."""
    found = {k: v for k, v in found.items() if v}
    return replace(raw, extra={**raw.extra, **found}) if found else raw


MAX_NESTING = 200
"""Parentheses nested deeper than this in one statement are DSF-E202 (real SQL nests a few dozen at most)."""


def nesting(tokens: list[Token]) -> int:
    """The deepest parenthesis nesting of the tokens."""
    depth = deepest = 0
    for token in tokens:
        if token.token_type is TokenType.L_PAREN:
            depth += 1
            deepest = max(deepest, depth)
        elif token.token_type is TokenType.R_PAREN:
            depth -= 1
    return deepest


def too_deep(where: Location) -> Diagnostic:
    """DSF-E202: a statement nested too deeply for the parser (hundreds of parentheses)."""
    return Diagnostic("DSF-E202", "the statement is nested too deeply to parse", where,
                      hint="flatten the nested parentheses or expressions")


def duplicate_properties(properties: tuple[RawProperty, ...]) -> list[Diagnostic]:
    """DSF-E204 for each WITH property given again in the same clause (the first would be used, silently)."""
    first: dict[str, RawProperty] = {}
    out = []
    for prop in properties:
        seen = first.setdefault(prop.key.lower(), prop)
        if seen is not prop:
            out.append(Diagnostic("DSF-E204", f"the property '{prop.key}' is given twice", prop.location,
                                  hint=f"first given at {seen.location}: remove one of them"))
    return out


def _partition_by(tokens: list[Token], path: str) -> tuple[list[Token], tuple[tuple[str, Location], ...]]:
    """A trailing `PARTITION BY col[, col]` of a query (outside parentheses): the tokens without it, and the
    columns with their locations."""
    if not any(token.token_type is TokenType.PARTITION_BY for token in tokens):
        return tokens, ()
    depth, found = 0, None
    for index, token in enumerate(tokens):
        depth += _DEPTH.get(token.token_type, 0)
        if token.token_type is TokenType.PARTITION_BY and depth == 0:
            found = index
    if found is None:
        return tokens, ()
    tail = tokens[found + 1:]
    names = tail[0::2]
    if not names or any(t.token_type is not TokenType.COMMA for t in tail[1::2]) or len(tail) % 2 == 0 \
            or any(t.token_type not in (TokenType.VAR, TokenType.IDENTIFIER) and not t.text.isidentifier()
                   for t in names):
        return tokens, ()
    return tokens[:found], tuple((t.text, Location(path, t.line, max(1, t.col - len(t.text) + 1))) for t in names)


_DEPTH = {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}


class _Unsupported(Exception):
    pass


def _to_raw(expression: exp.Expr | None, path: str, start: Location, snippet: str) -> RawStatement:
    if isinstance(expression, exp.Create):
        return _create(expression, path, start, snippet)
    if isinstance(expression, exp.Insert) and isinstance(expression.expression, exp.Query):
        target = expression.this
        table = target.this if isinstance(target, exp.Schema) else target
        return RawStatement("insert", _table_parts(table), node_location(path, table, start),
                            select=expression.expression, text=snippet,
                            source_parts=_source_parts(expression.expression))
    first = snippet.split(None, 2)[:2]
    raise _Unsupported(f"unsupported statement: {' '.join(first).upper()} ...")


def _create(create: exp.Create, path: str, start: Location, snippet: str) -> RawStatement:
    kind = str(create.args.get("kind") or "").upper()
    if kind == "FUNCTION" and isinstance(create.this, exp.UserDefinedFunction):
        return _function(create, create.this, path, start, snippet)
    properties = create.args.get("properties")
    materialized = bool(properties and properties.find(exp.MaterializedProperty))
    if kind == "VIEW" and materialized:
        kind_name = "materialized view"
    elif kind == "VIEW" and isinstance(create.expression, exp.Query):  # a named SELECT, inlined (sql/views.py)
        if isinstance(create.this, exp.Schema) or properties is not None:
            raise _Unsupported("CREATE VIEW takes no column list and no WITH (...): name its columns with AS in "
                               "its SELECT")
        table = create.this
        return RawStatement("view", _table_parts(table), node_location(path, table, start), text=snippet,
                            extra={"view_select": create.expression},
                            source_parts=_source_parts(create.expression))
    elif kind in ("STREAM", "CHANGELOG"):
        kind_name = kind.lower()
    elif kind == "TABLE" and (isinstance(create.expression, exp.Query) or isinstance(create.this, exp.Schema)):
        # CREATE TABLE ... AS SELECT, or a declared table (columns), of a lake store (load/tables.py)
        kind_name = "table"
    else:
        raise _Unsupported(f"unsupported statement: CREATE {kind or '?'}")
    target = create.this
    table = target.this if isinstance(target, exp.Schema) else target
    columns, primary_key = _columns(target, path, start) if isinstance(target, exp.Schema) else ((), ())
    select = create.expression if isinstance(create.expression, exp.Query) else None
    if kind_name == "materialized view" and select is None:
        raise _Unsupported("CREATE MATERIALIZED VIEW needs AS SELECT ...")
    return RawStatement(kind_name, _table_parts(table), node_location(path, table, start), columns=columns,
                        primary_key=primary_key, properties=_properties(properties, path, start),
                        select=select, text=snippet, source_parts=_source_parts(select))


def _function(create: exp.Create, udf: exp.UserDefinedFunction, path: str, start: Location,
              snippet: str) -> RawStatement:
    """CREATE FUNCTION name(p type, ...) RETURNS type LANGUAGE PYTHON AS 'module:function' (load/functions.py)."""
    properties = create.args.get("properties")
    returns = properties.find(exp.ReturnsProperty) if properties is not None else None
    language = properties.find(exp.LanguageProperty) if properties is not None else None
    body = create.expression
    columns = tuple(RawColumn(p.name, _sql_type(p.args.get("kind")), node_location(path, p.this, start))
                    for p in udf.expressions if isinstance(p, exp.ColumnDef))
    extra = {
        "returns": _sql_type(returns.this) if returns is not None and isinstance(returns.this, exp.DataType) else "",
        "language": language.this.name.upper() if language is not None else "",
        "target": body.name if isinstance(body, exp.Literal) and body.is_string else "",
        "target_location": node_location(path, body, start) if body is not None else start,
        "replace": bool(create.args.get("replace")),
    }
    return RawStatement("function", _table_parts(udf.this), node_location(path, udf.this, start), columns=columns,
                        text=snippet, extra=extra)


def _sql_type(kind: exp.DataType | None) -> str:
    """A function's parameter or result type as written in the dialect (VARCHAR, not sqlglot's TEXT)."""
    return re.sub(r"\bTEXT\b", "VARCHAR", _type_text(kind))


def _source_parts(select: exp.Query | None) -> tuple[tuple[str, ...], ...]:
    """The name parts of every relation a SELECT reads (a window function's relation, not the function)."""
    if select is None:
        return ()
    return tuple(tuple(p.name for p in t.parts) for t in select.find_all(exp.Table)
                 if not is_window(t) and not is_cte_name(t))


def _table_parts(table: exp.Expr) -> tuple[str, ...]:
    if isinstance(table, exp.Table):
        return tuple(p.name for p in table.parts)
    return (table.name,)


def _columns(schema: exp.Schema, path: str, start: Location) -> tuple[tuple[RawColumn, ...], tuple[str, ...]]:
    columns: list[RawColumn] = []
    primary_key: list[str] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            kind = item.args.get("kind")
            columns.append(RawColumn(item.name, _type_text(kind), node_location(path, item.this, start)))
            if any(isinstance(c.args.get("kind"), exp.PrimaryKeyColumnConstraint)
                   for c in item.args.get("constraints") or ()):
                primary_key.append(item.name)  # `id BIGINT PRIMARY KEY`
        elif isinstance(item, (exp.PrimaryKey, exp.Constraint)):
            pk = item if isinstance(item, exp.PrimaryKey) else item.find(exp.PrimaryKey)
            if pk is not None:
                primary_key += [e.name for e in pk.expressions]
    return tuple(columns), tuple(primary_key)


def _type_text(kind: exp.DataType | None) -> str:
    """A column type as dsflow records it; Spark's TIMESTAMP stays TIMESTAMP (not sqlglot's TIMESTAMPTZ)."""
    if kind is None:
        return "VARCHAR"
    text = type_sql(kind)
    return TYPE_NAMES.get(text, text)


def type_sql(data_type: exp.DataType) -> str:
    """`data_type.sql()`, memoized: a new sqlglot generator per call was ~10% of parsing a file of CREATE STREAMs."""
    text = _TYPE_TEXTS.get(data_type)  # sqlglot expressions hash and compare by structure
    if text is None:
        text = data_type.sql()
        if len(_TYPE_TEXTS) < 1024:
            _TYPE_TEXTS[data_type.copy()] = text
    return text


_TYPE_TEXTS: dict[exp.DataType, str] = {}


def _properties(properties: exp.Properties | None, path: str, start: Location) -> tuple[RawProperty, ...]:
    if properties is None:
        return ()
    out = []
    for prop in properties.expressions:
        if isinstance(prop, exp.Property) and not isinstance(prop, exp.MaterializedProperty):
            key = prop.this.name if isinstance(prop.this, exp.Expr) else str(prop.this)
            value = prop.args.get("value")
            text = value.name if isinstance(value, (exp.Literal, exp.Identifier)) else (value.sql() if value else "")
            out.append(RawProperty(key, text, node_location(path, prop.this, start)))
    return tuple(out)


def _token_error_location(err: TokenError, text: str, path: str) -> Location:
    match = re.search(r"Error tokenizing '(.*)'", str(err), re.S)
    if match:
        offset = text.find(match.group(1))
        if offset >= 0:
            line = text.count("\n", 0, offset) + 1 + match.group(1).count("\n")
            return Location(path, line, 1)
    return Location(path)


def parse_one_select(sql: str) -> exp.Query:
    """Parse a standalone SELECT in the DeltaStream dialect (used for normalized query text)."""
    return cast(exp.Query, sqlglot.parse_one(sql, read=DIALECT))  # a SELECT (or a UNION of them)
