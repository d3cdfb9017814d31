"""The expectation clauses of a query statement, read from its tokens before the parser sees them.

    CREATE STREAM|CHANGELOG|MATERIALIZED VIEW|TABLE name [WITH (...)]
        [CONSTRAINT name EXPECT (condition) ON VIOLATION {WARN | DROP ROW | DEAD LETTER | FAIL QUERY}] ...
        AS SELECT ...
    INSERT INTO name [CONSTRAINT ...] ... SELECT ...

The clauses come after the WITH clause and before AS (INSERT INTO: before its SELECT), outside parentheses. They are
taken out of the statement's tokens (as PARTITION BY is, sql/parse.py) and kept as plain data (`RawExpectation`); the
condition is parsed and checked against the query's result columns when the query is resolved (load/expectations.py).
"""

from __future__ import annotations

from sqlglot.tokens import Token, TokenType

from dsflow.errors import Diagnostic, Location
from dsflow.sql.statements import RawExpectation

ACTIONS = {("WARN",): "warn", ("DROP", "ROW"): "drop", ("DEAD", "LETTER"): "dead_letter", ("FAIL", "QUERY"): "fail"}
"""The words of ON VIOLATION -> the action's name in the model."""
SYNTAX = "CONSTRAINT name EXPECT (condition) ON VIOLATION WARN | DROP ROW | DEAD LETTER | FAIL QUERY"


def _start(path: str, token: Token) -> Location:
    return Location(path, token.line, max(1, token.col - len(token.text) + 1))


def _boundary(tokens: list[Token]) -> int:
    """Index of the token where the query proper starts: CREATE's top-level AS, INSERT's top-level SELECT or WITH."""
    create = bool(tokens) and tokens[0].token_type is TokenType.CREATE
    depth = 0
    for index, token in enumerate(tokens):
        if depth == 0 and (token.token_type is TokenType.ALIAS if create else
                           token.token_type in (TokenType.SELECT, TokenType.WITH)):
            return index
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
    return len(tokens)


def take_expectations(tokens: list[Token], text: str, path: str
                      ) -> tuple[list[Token], tuple[RawExpectation, ...], list[Diagnostic]]:
    """The statement's tokens without its CONSTRAINT ... EXPECT clauses, the clauses, and their syntax errors
    (DSF-E002; the statement is then not parsed)."""
    boundary = _boundary(tokens)
    starts = [i for i in range(boundary) if tokens[i].token_type is TokenType.CONSTRAINT and _top_level(tokens, i)]
    if not starts:
        return tokens, (), []
    found, kept, at = [], list(tokens[:starts[0]]), starts[0]
    for index in starts:
        if index < at:
            continue
        if index > at:
            return tokens, (), [_error(path, tokens[at], "expected CONSTRAINT ... or AS after the clauses of the "
                                       "expectations")]
        clause, at, problem = _clause(tokens, index, boundary, text, path)
        if problem is not None:
            return tokens, (), [problem]
        found.append(clause)
    later = [t for t in tokens[at:boundary] if t.token_type is TokenType.WITH]
    if later or at != boundary:
        return tokens, (), [_error(path, tokens[at], "the CONSTRAINT clauses come after WITH (...) and right "
                                   "before AS (INSERT INTO: before SELECT)")]
    return kept + tokens[at:], tuple(found), []


def _top_level(tokens: list[Token], index: int) -> bool:
    depth = 0
    for token in tokens[:index]:
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
    return depth == 0


def _clause(tokens: list[Token], index: int, boundary: int, text: str, path: str
            ) -> tuple[RawExpectation, int, Diagnostic | None]:
    """One clause starting at `index` (its CONSTRAINT): the clause, the index after it, or a syntax error."""
    dummy = RawExpectation("", "", "", Location(path), Location(path))
    words = tokens[index:boundary]
    if len(words) < 4 or words[2].text.upper() != "EXPECT" or words[3].token_type is not TokenType.L_PAREN \
            or not words[1].text.isidentifier():
        return dummy, index, _error(path, tokens[index], f"expected {SYNTAX}")
    depth, close = 0, None
    for offset, token in enumerate(words[3:], start=3):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(token.token_type, 0)
        if depth == 0:
            close = offset
            break
    if close is None or close == 4:
        return dummy, index, _error(path, words[3], "EXPECT needs a condition in parentheses, e.g. EXPECT (amount > 0)")
    rest = [t.text.upper() for t in words[close + 1:close + 5]]
    if rest[:2] != ["ON", "VIOLATION"]:
        return dummy, index, _error(path, words[close], f"expected ON VIOLATION after the condition: {SYNTAX}")
    action, length = next(((a, len(w)) for w, a in ACTIONS.items() if tuple(rest[2:2 + len(w)]) == w), (None, 0))
    if action is None:
        where = words[close + 3] if len(words) > close + 3 else words[close + 2]
        return dummy, index, _error(path, where, "ON VIOLATION takes WARN, DROP ROW, DEAD LETTER or FAIL QUERY")
    first, last = words[4], words[close - 1]
    clause = RawExpectation(words[1].text, text[first.start:last.end + 1], action, _start(path, tokens[index]),
                            _start(path, first))
    return clause, index + close + 3 + length, None


def _error(path: str, at: Token, message: str) -> Diagnostic:
    return Diagnostic("DSF-E002", f"SQL syntax error: {message}", _start(path, at),
                      hint="see Expectations in docs/project.md")
