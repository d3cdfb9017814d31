"""The DeltaStream SQL dialect as a small extension of sqlglot's Spark dialect.

It adds STREAM and CHANGELOG as creatable kinds; everything else is Spark SQL.
"""

from __future__ import annotations

from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType


class DeltaStream(Spark):
    """`CREATE STREAM|CHANGELOG name (...) WITH (...)`, `... AS SELECT`, `INSERT INTO ... SELECT`."""

    class Tokenizer(Spark.Tokenizer):
        KEYWORDS = {**Spark.Tokenizer.KEYWORDS, "STREAM": TokenType.STREAM, "CHANGELOG": TokenType.STREAM}

    class Parser(Spark.Parser):
        CREATABLES = {*Spark.Parser.CREATABLES, TokenType.STREAM}
        DB_CREATABLES = {*Spark.Parser.DB_CREATABLES, TokenType.STREAM}
