"""The DeltaStream SQL dialect as a small extension of sqlglot's Spark dialect.

It adds STREAM and CHANGELOG as creatable kinds, the window table functions
`TUMBLE(rel, SIZE 10 SECONDS)` and `HOP(rel, SIZE 1 MINUTE, ADVANCE BY 10 SECONDS)`, and the
interval join `a JOIN b WITHIN 5 MINUTES ON a.k = b.k`, and struct field access `col->field` (nested
`a->b->c`), parsed as exp.Dot and written back as `->` (Spark writes it `col.field`). Spark's lambdas
(`x -> x + 1`) are not part of the dialect, so `SUM(after->amount)` is a field access; everything else is
Spark SQL.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType


class Tumble(exp.Expression, exp.Func):
    """`TUMBLE(relation, SIZE n UNIT)`: fixed, non-overlapping windows over a relation."""

    arg_types = {"this": True, "size": True}


class Hop(exp.Expression, exp.Func):
    """`HOP(relation, SIZE n UNIT, ADVANCE BY n UNIT)`: windows of `size` starting every `advance`."""

    arg_types = {"this": True, "size": True, "advance": True}


WINDOW_FUNCTIONS = (Tumble, Hop)


def duration_text(interval: exp.Expr | None) -> str:
    """`10 SECONDS` for an interval the dialect parsed (SIZE, ADVANCE BY, WITHIN)."""
    if not isinstance(interval, exp.Interval):
        return interval.sql() if interval is not None else ""
    unit = interval.args.get("unit")
    return f"{interval.this.name} {unit.name if unit is not None else ''}".strip()


def _duration(self) -> exp.Interval | None:
    """`n UNIT` (n an integer or decimal literal, UNIT a word such as SECONDS or MINUTE)."""
    number = self._match(TokenType.NUMBER) and self._prev
    if not number or not self._curr or self._curr.token_type not in (TokenType.VAR, *self.ID_VAR_TOKENS):
        self.raise_error("expected a duration like 10 SECONDS")
        return None
    unit = self._curr.text.upper()
    self._advance()
    return self.expression(exp.Interval(this=exp.Literal.number(number.text), unit=exp.var(unit)))


SOURCE_PROPERTIES = "ds_with"
"""The arg of an exp.Table holding its per-source `WITH ('key' = value, ...)` as exp.Property nodes."""


def _source_properties(self) -> list[exp.Property]:
    """`'key' = value, ...)` after `FROM relation WITH (`: string keys, string or number values."""
    found = []
    while True:
        key = self._parse_string()
        if key is None or not self._match(TokenType.EQ):
            self.raise_error("expected 'key' = value in the source's WITH (...)")
            return found
        found.append(exp.Property(this=key, value=self._parse_primary()))
        if not self._match(TokenType.COMMA):
            break
    if not self._match(TokenType.R_PAREN):
        self.raise_error("expected ) after the source's WITH properties")
    return found


def _field_access(self, this: exp.Expr, path: exp.Expr | None) -> exp.Expr | None:
    """`this->field`: the field is a bare name (`after->id`, `after->`id``) or a string (`after->'id'`)."""
    if isinstance(path, exp.Column) and not path.table and isinstance(path.this, exp.Identifier):
        field = path.this.copy()
    elif isinstance(path, exp.Literal) and path.is_string:
        field = exp.to_identifier(path.this, quoted=True)
    else:
        self.raise_error("expected a field name after ->, e.g. after->id")
        return this
    return self.expression(exp.Dot(this=this, expression=field))


def _window_function(self, kind: type[exp.Func]) -> exp.Func:
    table = self._parse_table_parts()
    self._match(TokenType.COMMA)
    if not self._match_text_seq("SIZE"):
        self.raise_error("expected SIZE after the relation, e.g. TUMBLE(pageviews, SIZE 10 SECONDS)")
    args = {"this": table, "size": _duration(self)}
    if kind is Hop:
        self._match(TokenType.COMMA)
        if not self._match_text_seq("ADVANCE", "BY"):
            self.raise_error("expected ADVANCE BY, e.g. HOP(pageviews, SIZE 1 MINUTE, ADVANCE BY 10 SECONDS)")
        args["advance"] = _duration(self)
    return self.expression(kind(**args))


class DeltaStream(Spark):
    """`CREATE STREAM|CHANGELOG name (...) WITH (...)`, `... AS SELECT`, `INSERT INTO ... SELECT`."""

    class Tokenizer(Spark.Tokenizer):
        KEYWORDS = {**Spark.Tokenizer.KEYWORDS, "STREAM": TokenType.STREAM, "CHANGELOG": TokenType.STREAM}

    class Parser(Spark.Parser):
        CREATABLES = {*Spark.Parser.CREATABLES, TokenType.STREAM}
        DB_CREATABLES = {*Spark.Parser.DB_CREATABLES, TokenType.STREAM}
        LAMBDAS = {k: v for k, v in Spark.Parser.LAMBDAS.items() if k is not TokenType.ARROW}
        COLUMN_OPERATORS = {**Spark.Parser.COLUMN_OPERATORS, TokenType.ARROW: _field_access}
        FUNCTION_PARSERS = {
            **Spark.Parser.FUNCTION_PARSERS,
            "TUMBLE": lambda self: _window_function(self, Tumble),
            "HOP": lambda self: _window_function(self, Hop),
        }

        def _parse_table_alias(self, alias_tokens=None):
            if self._curr and self._curr.text.upper() == "WITHIN" and self._next \
                    and self._next.token_type is TokenType.NUMBER:
                return None
            return super()._parse_table_alias(alias_tokens=alias_tokens)

        def _parse_table_parts(self, *args, **kwargs):
            table = super()._parse_table_parts(*args, **kwargs)
            if getattr(self, "_ds_source", False) and isinstance(table, exp.Table) and self._curr \
                    and self._curr.token_type is TokenType.WITH and self._next \
                    and self._next.token_type is TokenType.L_PAREN:
                self._advance(2)
                table.set(SOURCE_PROPERTIES, _source_properties(self))
            return table

        def _parse_table(self, *args, **kwargs):
            in_join = self._prev is not None and self._prev.token_type is TokenType.JOIN
            self._ds_source = not kwargs.get("schema")
            try:
                table = super()._parse_table(*args, **kwargs)
            finally:
                self._ds_source = False
            if in_join and self._match_text_seq("WITHIN"):
                self._ds_within = _duration(self)
            return table

        def _parse_join(self, *args, **kwargs):
            self._ds_within = None
            join = super()._parse_join(*args, **kwargs)
            if join is not None and getattr(self, "_ds_within", None) is not None:
                join.set("within", self._ds_within)
            self._ds_within = None
            return join

    class Generator(Spark.Generator):
        TRANSFORMS = {
            **Spark.Generator.TRANSFORMS,
            Tumble: lambda self, e: f"TUMBLE({self.sql(e, 'this')}, SIZE {duration_text(e.args['size'])})",
            Hop: lambda self, e: (f"HOP({self.sql(e, 'this')}, SIZE {duration_text(e.args['size'])}, "
                                  f"ADVANCE BY {duration_text(e.args['advance'])})"),
        }

        def dot_sql(self, expression: exp.Dot) -> str:
            if isinstance(expression.expression, exp.Identifier):
                return f"{self.sql(expression, 'this')}->{self.sql(expression, 'expression')}"
            return super().dot_sql(expression)

        def table_sql(self, expression: exp.Table, *args, **kwargs) -> str:
            props = expression.args.get(SOURCE_PROPERTIES)
            if not props:
                return super().table_sql(expression, *args, **kwargs)
            bare = expression.copy()
            bare.set(SOURCE_PROPERTIES, None)
            alias = bare.args.get("alias")
            bare.set("alias", None)
            text = super().table_sql(bare, *args, **kwargs)
            pairs = ", ".join(f"{self.sql(p, 'this')} = {self.sql(p, 'value')}" for p in props)
            return f"{text} WITH ({pairs})" + (f" AS {self.sql(alias)}" if alias else "")

        def join_sql(self, expression: exp.Join, *args, **kwargs) -> str:
            within = expression.args.get("within")
            if within is None:
                return super().join_sql(expression, *args, **kwargs)
            bare = expression.copy()
            bare.set("within", None)
            text = super().join_sql(bare, *args, **kwargs)
            on = f" ON {self.sql(bare, 'on')}"
            head, found, tail = text.rpartition(on)
            clause = f" WITHIN {duration_text(within)}"
            return f"{head}{clause}{on}{tail}" if found else text + clause
