"""The DeltaStream SQL dialect: sqlglot's Spark dialect plus a rewrite of DeltaStream's own syntax.

DeltaStream adds STREAM and CHANGELOG as creatable kinds, the window table functions
`TUMBLE(rel, SIZE 10 SECONDS)` and `HOP(rel, SIZE 1 MINUTE, ADVANCE BY 10 SECONDS)`, the interval join
`a JOIN b WITHIN 5 MINUTES ON a.k = b.k`, a source's own `FROM rel WITH ('key' = value, ...)`, and struct field
access `col->field` (nested `a->b->c`). Spark's lambdas (`x -> x + 1`) are not part of the dialect, so
`SUM(after->amount)` is a field access; everything else is Spark SQL.

sqlglot's compiled build (sqlglotc, several times faster) allows no Python subclass of its parser, generator or
expression classes, so the dialect does not extend them. Instead a statement's tokens are rewritten into Spark SQL
(`rewrite_tokens`), Spark's own parser parses them, and the DeltaStream parts are put back on the tree with
sqlglot's own node types (`restore`):

    CREATE STREAM|CHANGELOG ...        CREATE TABLE ..., then the Create's kind set back
    TUMBLE(rel, SIZE 10 SECONDS)       TUMBLE(rel, INTERVAL 10 SECONDS): a Table over exp.Anonymous TUMBLE(Table,
                                       Interval[, Interval]) (window_call reads it)
    SESSION(rel, GAP 5 MINUTES)        SESSION(rel, INTERVAL 5 MINUTES), the same way (its gap in the size's place)
    JOIN b WITHIN 5 MINUTES ON         JOIN b ON, the Interval kept as the Join's "within" arg
    FROM rel WITH ('k' = v)            FROM rel, the properties kept as the Table's SOURCE_PROPERTIES arg
    col->field                         col.field, then Column(field, table=col) turned into Dot(col, field)

`DeltaStream.generate` writes these back, so `node.sql(dialect=DIALECT)` is DeltaStream SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError
from sqlglot.tokens import Token, TokenType

SPARK = Spark()
"""Spark's dialect, one instance: `dialect="spark"` builds a new one at every call (a tenth of a cold plan's time)."""

SOURCE_PROPERTIES = "ds_with"
"""The arg of an exp.Table holding its per-source `WITH ('key' = value, ...)` as exp.Property nodes."""
WITHIN = "within"
"""The arg of an exp.Join holding the exp.Interval of `WITHIN n UNIT`."""
WINDOW_NAMES = ("TUMBLE", "HOP", "SESSION")
_KINDS = ("STREAM", "CHANGELOG")
_CREATE_MODIFIERS = ("OR", "REPLACE", "TEMPORARY", "TEMP")
_FIELD = "\x00"
"""Marks a field access in the Spark text DeltaStream.generate rewrites: `col.<NUL>field` is `col->field` (no SQL
text holds a NUL)."""
_SOURCE_STARTS = (TokenType.FROM, TokenType.JOIN)
_NAME_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)
_REWRITTEN = frozenset((TokenType.ARROW, *_SOURCE_STARTS))
"""Tokens after which the rewrite may change something (besides a CREATE's kind)."""


@dataclass(frozen=True)
class WindowCall:
    """A `TUMBLE(...)`, `HOP(...)` or `SESSION(...)` in FROM: its kind ('tumble', 'hop' or 'session'), relation
    and durations (a session's GAP is its `size`)."""

    kind: str
    relation: exp.Table
    size: exp.Expr | None
    advance: exp.Expr | None


def window_call(node: exp.Expr | None) -> WindowCall | None:
    """The window a FROM item is (`node` is the exp.Table or its function), or None."""
    function = node.this if isinstance(node, exp.Table) else node
    if not isinstance(function, exp.Anonymous) or function.name.upper() not in WINDOW_NAMES:
        return None
    args = list(function.expressions)
    if not args or not isinstance(args[0], exp.Table):
        return None
    return WindowCall(function.name.lower(), args[0], args[1] if len(args) > 1 else None,
                      args[2] if len(args) > 2 else None)


def is_window(node: exp.Expr | None) -> bool:
    """Whether `node` is a window table function (or a Table over one)."""
    return window_call(node) is not None


DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*"
                      r"(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?|weeks?)$", re.I)
UNITS = {"ms": "milliseconds", "s": "seconds", "sec": "seconds", "m": "minutes", "min": "minutes", "h": "hours",
         "d": "days"}


def normalized_duration(text: str) -> str | None:
    """'10 SECONDS' -> '10 seconds', '500ms' -> '500 milliseconds'; None if it is no duration."""
    found = DURATION.match(text.strip())
    if not found:
        return None
    unit = found.group(2).lower()
    unit = UNITS.get(unit, unit if unit.endswith("s") else unit + "s")
    return f"{found.group(1)} {unit}"


MILLISECONDS = {"milliseconds": 1, "seconds": 1000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000,
                "weeks": 604_800_000}
"""A WEEK is 7 days, as in Spark's intervals (which take weeks in a window or a WITHIN; a MONTH they refuse there)."""
MAX_MILLISECONDS = (2**63 - 1) // 1000
"""Spark's longest interval (microseconds in a 64-bit integer, ~292,471 years): a WITHIN, window SIZE or ADVANCE
longer than it fails to parse (INVALID_INTERVAL_FORMAT, CANNOT_PARSE_INTERVAL)."""


def milliseconds(duration: str) -> int:
    """A normalized duration ('10 seconds') in the whole milliseconds Spark runs it with."""
    number, unit = duration.split()
    return round(float(number) * MILLISECONDS[unit])


def duration_text(interval: exp.Expr | None) -> str:
    """`10 SECONDS` for an interval the dialect parsed (SIZE, ADVANCE BY, WITHIN)."""
    if not isinstance(interval, exp.Interval):
        return interval.sql() if interval is not None else ""
    unit = interval.args.get("unit")
    return f"{interval.this.name} {unit.name if unit is not None else ''}".strip()


# --- tokens: DeltaStream -> Spark --------------------------------------------------------------------------

@dataclass
class Rewritten:
    """What `rewrite_tokens` took out of a statement, for `restore` to put back (keyed by token start offsets)."""

    kind: str | None = None
    fields: set[int] = field(default_factory=set)
    """Where each name written after `->` starts."""
    windows: bool = False
    within: dict[int, exp.Interval] = field(default_factory=dict)
    """Where a joined relation starts -> its WITHIN duration."""
    properties: dict[int, list[exp.Property]] = field(default_factory=dict)
    """Where a source relation starts -> its WITH properties."""

    def __bool__(self) -> bool:
        return bool(self.kind or self.fields or self.windows or self.within or self.properties)


def _token(like: Token, token_type: TokenType, text: str) -> Token:
    return Token(token_type, text, like.line, like.col, like.start, like.end, like.comments)


def _error(message: str, at: Token | None) -> ParseError:
    if at is None:
        return ParseError.new(message, description=message)
    return ParseError.new(message, description=message, line=at.line, col=at.col)


_E = TypeVar("_E", bound=exp.Expr)


def _meta(node: _E, token: Token) -> _E:
    node.meta.update(line=token.line, col=token.col, start=token.start, end=token.end)
    return node


class _Rewriter:
    """One statement's tokens, read once from left to right (see the module docstring for what changes)."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.at = 0
        self.out: list[Token] = []
        self.found = Rewritten()

    def peek(self, ahead: int = 0) -> Token | None:
        index = self.at + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def next_is(self, token_type: TokenType, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and token.token_type is token_type

    def text(self, ahead: int = 0) -> str:
        token = self.peek(ahead)
        return token.text.upper() if token is not None else ""

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def emit(self, token: Token) -> None:
        self.out.append(token)

    def run(self) -> tuple[list[Token], Rewritten]:
        self._create_kind()
        if not any(token.token_type in _REWRITTEN for token in self.tokens):
            return self.tokens, self.found
        while self.at < len(self.tokens):
            token = self.take()
            if token.token_type is TokenType.ARROW:
                self._field_access(token)
                continue
            self.emit(token)
            if token.token_type in _SOURCE_STARTS:
                self._source(joined=token.token_type is TokenType.JOIN)
        return self.out, self.found

    def _create_kind(self) -> None:
        if self.text() != "CREATE":
            return
        ahead = 1
        while self.text(ahead) in _CREATE_MODIFIERS:
            ahead += 1
        token = self.peek(ahead)
        if token is not None and self.text(ahead) in _KINDS and token.token_type in _NAME_TOKENS:
            self.found.kind = self.text(ahead)
            self.tokens = [*self.tokens[:ahead], _token(token, TokenType.TABLE, "TABLE"),
                           *self.tokens[ahead + 1:]]

    def _field_access(self, arrow: Token) -> None:
        name = self.peek()
        if name is None or not (_is_name(name) or name.token_type is TokenType.STRING):
            raise _error("expected a field name after ->, e.g. after->id", name or arrow)
        self.take()
        self.emit(_token(arrow, TokenType.DOT, "."))
        if name.token_type is TokenType.STRING:
            name = _token(name, TokenType.IDENTIFIER, name.text)
        self.emit(name)
        self.found.fields.add(name.start)

    def _source(self, joined: bool) -> None:
        first = self.peek()
        if first is None:
            return
        if self.text() in WINDOW_NAMES and self.text(1) == "(":
            self._window()
        elif _is_name(first):
            self._relation()
        else:
            return
        if joined:
            self._alias()
            if self.text() == "WITHIN" and self.next_is(TokenType.NUMBER, 1):
                self.take()
                self.found.within[first.start] = self._duration()

    def _relation(self) -> None:
        """`name[.name...]` and its WITH (...) properties, which are taken out."""
        first = self.take()
        self.emit(first)
        while self.next_is(TokenType.DOT) and self.peek(1) is not None:
            self.emit(self.take())
            self.emit(self.take())
        if self.next_is(TokenType.WITH) and self.text(1) == "(":
            self.take()
            self.take()
            self.found.properties[first.start] = self._properties()

    def _properties(self) -> list[exp.Property]:
        """`'key' = value, ...)` after `FROM relation WITH (`: string keys, string, number or name values."""
        found = []
        while True:
            key, equals, value = self.peek(), self.peek(1), self.peek(2)
            if key is None or key.token_type is not TokenType.STRING or equals is None \
                    or equals.token_type is not TokenType.EQ or value is None:
                raise _error("expected 'key' = value in the source's WITH (...)", key)
            self.at += 3
            found.append(_meta(exp.Property(this=_meta(exp.Literal.string(key.text), key), value=_value(value)), key))
            if not self.next_is(TokenType.COMMA):
                break
            self.take()
        if not self.next_is(TokenType.R_PAREN):
            raise _error("expected ) after the source's WITH properties", self.peek())
        self.take()
        return found

    def _alias(self) -> None:
        token = self.peek()
        if token is not None and token.token_type is TokenType.ALIAS:
            self.emit(self.take())
            if self.peek() is not None:
                self.emit(self.take())
        elif token is not None and token.token_type in _NAME_TOKENS and self.text() != "WITHIN":
            self.emit(self.take())

    def _window(self) -> None:
        """`TUMBLE(rel, SIZE n UNIT)`, `HOP(rel, SIZE n UNIT, ADVANCE BY n UNIT)` or `SESSION(rel, GAP n UNIT)`, the
        durations as INTERVAL."""
        name = self.take()
        self.emit(_token(name, TokenType.VAR, name.text))  # SESSION is a keyword token of Spark's
        self.emit(self.take())  # (
        self.found.windows = True
        hop = name.text.upper() == "HOP"
        if _is_name(self.peek()):
            self._relation()
        if self.next_is(TokenType.COMMA):
            self.emit(self.take())
        if name.text.upper() == "SESSION":
            if self.text() != "GAP":
                raise _error("expected GAP after the relation, e.g. SESSION(pageviews, GAP 5 MINUTES)", self.peek())
            self._interval(self.take())
            return
        if self.text() != "SIZE":
            raise _error("expected SIZE after the relation, e.g. TUMBLE(pageviews, SIZE 10 SECONDS)", self.peek())
        self._interval(self.take())
        if hop:
            if self.next_is(TokenType.COMMA):
                self.emit(self.take())
            if self.text() != "ADVANCE" or self.text(1) != "BY":
                raise _error("expected ADVANCE BY, e.g. HOP(pageviews, SIZE 1 MINUTE, ADVANCE BY 10 SECONDS)",
                             self.peek())
            keyword = self.take()
            self.take()
            self._interval(keyword)

    def _interval(self, keyword: Token) -> None:
        number, unit = self.peek(), self.peek(1)
        self._duration()
        assert number is not None and unit is not None  # _duration checked them
        self.out += [_token(keyword, TokenType.INTERVAL, "INTERVAL"), number, unit]

    def _duration(self) -> exp.Interval:
        """`n UNIT` (n an integer or decimal literal, UNIT a word such as SECONDS or MINUTE)."""
        number, unit = self.peek(), self.peek(1)
        if number is None or number.token_type is not TokenType.NUMBER or unit is None \
                or unit.token_type not in _NAME_TOKENS:
            raise _error("expected a duration like 10 SECONDS", number)
        self.at += 2
        return _meta(exp.Interval(this=exp.Literal.number(number.text), unit=exp.var(unit.text.upper())), number)


def _is_name(token: Token | None) -> bool:
    """A name, or a keyword written where a name goes (`after->type`, `FROM events`)."""
    return token is not None and (token.token_type in _NAME_TOKENS or token.text.isidentifier())


def _value(token: Token) -> exp.Expr:
    if token.token_type is TokenType.STRING:
        node: exp.Expr = exp.Literal.string(token.text)
    elif token.token_type is TokenType.NUMBER:
        node = exp.Literal.number(token.text)
    elif token.token_type in (TokenType.TRUE, TokenType.FALSE):
        node = exp.Boolean(this=token.token_type is TokenType.TRUE)
    else:
        node = exp.to_identifier(token.text, quoted=token.token_type is TokenType.IDENTIFIER)
    return _meta(node, token)


def rewrite_tokens(tokens: list[Token]) -> tuple[list[Token], Rewritten]:
    """One statement's DeltaStream tokens as Spark SQL tokens, and what was taken out for `restore`."""
    return _Rewriter(tokens).run()


# --- the tree: Spark -> DeltaStream ------------------------------------------------------------------------

def _start(node: exp.Expr) -> int | None:
    parts = node.parts if isinstance(node, (exp.Table, exp.Column)) else [node]
    return parts[0].meta.get("start") if parts and parts[0] is not None else None


def restore(tree: exp.Expr | None, found: Rewritten) -> exp.Expr | None:
    """Put back on Spark's tree what `rewrite_tokens` took out of the statement's tokens."""
    if tree is None or not found:
        return tree
    if found.kind and isinstance(tree, exp.Create):
        tree.set("kind", found.kind)
    if found.fields:
        for column in list(tree.find_all(exp.Column)):
            _field_access(column, found.fields)
    if found.windows:
        for function in list(tree.find_all(exp.Anonymous)):
            _window(function)
    if found.properties:
        for table in tree.find_all(exp.Table):
            start = _start(table)
            properties = found.properties.get(start) if start is not None else None
            if properties:
                table.set(SOURCE_PROPERTIES, properties)
    if found.within:
        for join in tree.find_all(exp.Join):
            start = _start(join.this) if isinstance(join.this, exp.Table) else None
            within = found.within.get(start) if start is not None else None
            if within is not None:
                join.set(WITHIN, within)
    return tree


def _field_access(column: exp.Column, fields: set[int]) -> None:
    parts = column.parts
    marked = next((i for i, part in enumerate(parts) if i and part.meta.get("start") in fields), None)
    if marked is None:
        return
    names = dict(zip(("this", "table", "db", "catalog"), reversed(parts[:marked]), strict=False))
    access: exp.Expr = exp.Column(**names)
    for part in parts[marked:]:
        access = exp.Dot(this=access, expression=part)
    column.replace(access)


def _window(function: exp.Anonymous) -> None:
    if function.name.upper() not in WINDOW_NAMES or not isinstance(function.parent, exp.Table):
        return
    args = list(function.expressions)
    if args and isinstance(args[0], exp.Column):
        names = dict(zip(("this", "db", "catalog"), reversed(args[0].parts), strict=False))
        args[0] = exp.Table(**names)
        function.set("expressions", args)


# --- the dialect -------------------------------------------------------------------------------------------

def _needs_rewrite(node: exp.Expr) -> bool:
    for child in node.walk():
        if isinstance(child, exp.Dot) and isinstance(child.expression, exp.Identifier):
            return True
        if isinstance(child, exp.Table) and (child.args.get(SOURCE_PROPERTIES) or is_window(child)):
            return True
        if isinstance(child, exp.Join) and child.args.get(WITHIN) is not None:
            return True
    return False


class DeltaStream(Spark):
    """`CREATE STREAM|CHANGELOG name (...) WITH (...)`, `... AS SELECT`, `INSERT INTO ... SELECT`."""

    EXPRESSION_METADATA = {  # MAX_BY(value, ordering) is of the value's type (sqlglot: unknown)
        **Spark.EXPRESSION_METADATA,
        **{by: {"annotator": lambda self, e: self._annotate_by_args(e, "this")} for by in (exp.ArgMax, exp.ArgMin)},
    }

    def parse(self, sql: str, **opts: Any) -> list[exp.Expr | None]:
        return self.parse_tokens(self.tokenize(sql), sql, **opts)

    def parse_tokens(self, tokens: list[Token], sql: str, **opts: Any) -> list[exp.Expr | None]:
        """Parse DeltaStream tokens (one statement or several, cut at semicolons)."""
        results: list[exp.Expr | None] = []
        chunk: list[Token] = []
        for token in [*tokens, None]:
            if token is not None and token.token_type is not TokenType.SEMICOLON:
                chunk.append(token)
                continue
            if chunk:
                spark_tokens, found = rewrite_tokens(chunk)
                results += [restore(tree, found) for tree in self.parser(**opts).parse(spark_tokens, sql)]
            chunk = []
        return results

    def generate(self, expression: exp.Expr, copy: bool = True, **opts: Any) -> str:
        if not _needs_rewrite(expression):
            return super().generate(expression, copy=copy, **opts)
        tree = self._to_spark(expression.copy(), opts)
        return super().generate(tree, copy=False, **opts).replace("." + _FIELD, "->")

    def _to_spark(self, node: exp.Expr, opts: dict) -> exp.Expr:
        """`node` with its DeltaStream parts replaced by text Spark's generator writes as it is (exp.Var)."""
        if isinstance(node, exp.Table) and (node.args.get(SOURCE_PROPERTIES) or is_window(node)):
            return node.replace(exp.var(self._table_text(node, opts)))
        if isinstance(node, exp.Join) and node.args.get(WITHIN) is not None and isinstance(node.this, exp.Expr):
            within = node.args[WITHIN]
            node.set(WITHIN, None)
            node.set("this", exp.var(f"{self.generate(node.this, **opts)} WITHIN {duration_text(within)}"))
        elif isinstance(node, exp.Dot) and isinstance(node.expression, exp.Identifier):
            node.set("expression", exp.var(_FIELD + node.expression.sql(dialect=SPARK)))
        for child in list(node.iter_expressions()):
            self._to_spark(child, opts)
        return node

    def _table_text(self, table: exp.Table, opts: dict) -> str:
        alias = table.args.get("alias")
        alias_text = f" AS {super().generate(alias, **opts)}" if alias is not None else ""
        window = window_call(table)
        if window is not None:
            advance = f", ADVANCE BY {duration_text(window.advance)}" if window.advance is not None else ""
            relation = self.generate(window.relation, **opts)
            size = "GAP" if window.kind == "session" else "SIZE"
            return f"{window.kind.upper()}({relation}, {size} {duration_text(window.size)}{advance}){alias_text}"
        bare = table.copy()
        bare.set(SOURCE_PROPERTIES, None)
        bare.set("alias", None)
        spark = super().generate
        pairs = ", ".join(f"{spark(p.this, **opts)} = {spark(p.args['value'], **opts)}"
                          for p in table.args[SOURCE_PROPERTIES])
        return f"{spark(bare, **opts)} WITH ({pairs}){alias_text}"
