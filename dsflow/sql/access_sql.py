"""DeltaStream's access statements in .sql files, read from the statement's tokens (sqlglot has no grammar for
them): GRANT/REVOKE privileges ON an object TO/FROM ROLE, GRANT/REVOKE ROLE TO/FROM USER, and CREATE ROLE.
"""

from __future__ import annotations

from sqlglot.tokens import Token, TokenType

from dsflow.core.access import ACCESS_NAME
from dsflow.errors import Diagnostic, Location
from dsflow.sql.statements import OBJECT_TYPES, AccessStatement, RawStatement

OBJECTS = "DATABASE|SCHEMA|STORE|RELATION|STREAM|CHANGELOG|MATERIALIZED VIEW|TABLE|QUERY|ORGANIZATION"
SYNTAX = {"GRANT": f"GRANT <privilege>[, ...] ON <{OBJECTS}> <name> TO ROLE <role>",
          "REVOKE": f"REVOKE <privilege>[, ...] ON <{OBJECTS}> <name> FROM ROLE <role>",
          "GRANT ROLE": "GRANT ROLE <role> TO USER <user> (quote a user name holding '@': \"ann@example.com\")",
          "REVOKE ROLE": "REVOKE ROLE <role> FROM USER <user>",
          "CREATE": "CREATE ROLE <name> [WITH ('inherits' = 'role[, role]')]"}
"""The form of each statement, shown as the hint of DSF-E303."""
NAME_TYPES = {TokenType.VAR, TokenType.IDENTIFIER, TokenType.STRING}


def is_access(tokens: list[Token]) -> bool:
    """Whether a statement is GRANT, REVOKE or CREATE ROLE."""
    first = tokens[0].token_type
    return first in (TokenType.GRANT, TokenType.REVOKE) or (
        first is TokenType.CREATE and len(tokens) > 1 and tokens[1].text.upper() == "ROLE")


class _Malformed(Exception):
    def __init__(self, message: str, token: Token | None):
        super().__init__(message)
        self.token = token


def where(path: str, token: Token) -> Location:
    """Where a token starts (its col is where it ends, after a closing quote)."""
    quotes = 2 if token.token_type in (TokenType.STRING, TokenType.IDENTIFIER) else 0
    return Location(path, token.line, max(1, token.col - len(token.text) - quotes + 1))


def parse_access(tokens: list[Token], path: str, start: Location,
                 snippet: str) -> tuple[RawStatement | None, list[Diagnostic]]:
    """The statement as a RawStatement of kind 'access' (its AccessStatement in extra['access']), or DSF-E303."""
    reader = _Reader(tokens, path)
    try:
        statement = reader.statement(start)
    except _Malformed as err:
        loc = where(path, err.token) if err.token is not None else start
        verb = tokens[0].text.upper()
        form = f"{verb} ROLE" if len(tokens) > 1 and tokens[1].text.upper() == "ROLE" and verb != "CREATE" else verb
        return None, [Diagnostic("DSF-E303", f"malformed {verb} statement: {err}", loc, hint=SYNTAX[form])]
    return RawStatement("access", (), start, text=snippet, extra={"access": statement}), []


class _Reader:
    """A cursor over one statement's tokens."""

    def __init__(self, tokens: list[Token], path: str):
        self.tokens, self.path, self.index = tokens, path, 0

    def peek(self) -> Token | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def word(self) -> str:
        token = self.peek()
        return token.text.upper() if token is not None and token.token_type is not TokenType.STRING else ""

    def take(self) -> Token:
        token = self.peek()
        if token is None:
            raise _Malformed("the statement ends too early", self.tokens[-1])
        self.index += 1
        return token

    def expect(self, *words: str) -> None:
        for word in words:
            if self.word() != word:
                raise _Malformed(f"expected {word}, found {self._found()}", self.peek() or self.tokens[-1])
            self.index += 1

    def _found(self) -> str:
        token = self.peek()
        return "the end of the statement" if token is None else f"'{token.text}'"

    def name(self) -> tuple[tuple[str, ...], Location]:
        """A dotted name: `a`, `db.schema.rel`, with quoted parts."""
        first = self.peek()
        if first is None or first.text.upper() in ("TO", "FROM") and first.token_type is not TokenType.IDENTIFIER \
                or first.token_type not in NAME_TYPES and not first.text.isidentifier():
            raise _Malformed(f"expected a name, found {self._found()}", first or self.tokens[-1])
        parts = [self.take().text]
        while (dot := self.peek()) is not None and dot.token_type is TokenType.DOT:
            self.take()
            parts.append(self.take().text)
        return tuple(parts), where(self.path, first)

    def end(self) -> None:
        if self.peek() is not None:
            raise _Malformed(f"unexpected {self._found()}", self.peek())

    def statement(self, start: Location) -> AccessStatement:
        verb = self.take().text.upper()
        if verb == "CREATE":
            return self.create_role(start)
        if self.word() == "ROLE":
            self.take()
            (role,), _ = self._single()
            self.expect("TO" if verb == "GRANT" else "FROM", "USER")
            (user,), _ = self._single()
            self.end()
            return AccessStatement("grant_role" if verb == "GRANT" else "revoke_role", start, role=role, user=user)
        privileges = self.privileges()
        self.expect("ON")
        object_type, parts, object_location = self.target()
        self.expect("TO" if verb == "GRANT" else "FROM", "ROLE")
        (role,), _ = self._single()
        self.end()
        return AccessStatement(verb.lower(), start, role=role, privileges=privileges, object_type=object_type,
                               object_name=parts, object_location=object_location)

    def _single(self) -> tuple[tuple[str], Location]:
        parts, loc = self.name()
        if len(parts) != 1 or not ACCESS_NAME.fullmatch(parts[0]):
            raise _Malformed(f"'{'.'.join(parts)}' is no role or user name (letters, digits, '_', '-', '.', '@'; "
                             "one part)", self.tokens[self.index - 1])
        return parts, loc

    def privileges(self) -> tuple[tuple[str, Location], ...]:
        found = []
        while True:
            token = self.take()
            if token.token_type in (TokenType.COMMA, TokenType.STRING) or token.text.upper() in ("ON", "TO"):
                raise _Malformed(f"expected a privilege, found '{token.text}'", token)
            found.append((token.text.upper(), where(self.path, token)))
            if self.word() == "PRIVILEGES" and found[-1][0] == "ALL":
                self.take()
            if (comma := self.peek()) is None or comma.token_type is not TokenType.COMMA:
                return tuple(found)
            self.take()

    def target(self) -> tuple[str, tuple[str, ...], Location | None]:
        first = self.take()
        written = first.text.upper()
        if written == "MATERIALIZED":
            self.expect("VIEW")
            written = "MATERIALIZED VIEW"
        if written not in OBJECT_TYPES:
            raise _Malformed(f"unknown object type '{first.text}'", first)
        if written == "ORGANIZATION":
            if self.word() not in ("TO", "FROM"):
                self.name()  # the organization's name: a project has one organization
            return written, (), where(self.path, first)
        parts, loc = self.name()
        return written, parts, loc

    def create_role(self, start: Location) -> AccessStatement:
        self.expect("ROLE")
        (name,), _ = self._single()
        inherits: tuple[str, ...] = ()
        if self.peek() is not None:
            self.expect("WITH")
            inherits = self._with_inherits()
        self.end()
        return AccessStatement("create_role", start, role=name, inherits=inherits)

    def _with_inherits(self) -> tuple[str, ...]:
        """WITH ('inherits' = 'a, b'): the only property of CREATE ROLE."""
        if self.take().token_type is not TokenType.L_PAREN:
            raise _Malformed("expected '(' after WITH", self.tokens[self.index - 1])
        key = self.take()
        if key.text.lower() != "inherits":
            raise _Malformed(f"unknown property '{key.text}' of CREATE ROLE (only 'inherits')", key)
        if self.take().token_type is not TokenType.EQ:
            raise _Malformed("expected '=' after 'inherits'", self.tokens[self.index - 1])
        value = self.take()
        if self.take().token_type is not TokenType.R_PAREN:
            raise _Malformed("expected ')'", self.tokens[self.index - 1])
        return tuple(n.strip() for n in value.text.split(",") if n.strip())
