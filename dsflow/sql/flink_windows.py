"""Flink SQL's window syntax, taken as dsflow's own windows (the published Nexmark queries q5, q7, q8, q11, q12).

    TABLE(TUMBLE(TABLE rel, DESCRIPTOR(t), INTERVAL '10' SECOND))          TUMBLE(rel, SIZE 10 SECOND)
    TABLE(HOP(TABLE rel, DESCRIPTOR(t), INTERVAL '2' SECOND,               HOP(rel, SIZE 10 SECOND, ADVANCE BY 2 SECOND)
              INTERVAL '10' SECOND))                    (slide, then size)
    TABLE(SESSION(TABLE rel PARTITION BY k, DESCRIPTOR(t), INTERVAL ..))  SESSION(rel, GAP ...), grouped by k
    FROM rel r ... GROUP BY k, SESSION(r.t, INTERVAL '10' SECOND)         FROM SESSION(rel, GAP 10 SECOND) AS r ...
        with SESSION_START(r.t, INTERVAL '10' SECOND), SESSION_END(..)    GROUP BY k, r.window_start, r.window_end,
                                                                           selecting r.window_start, r.window_end
    (the legacy group windows TUMBLE(t, size) and HOP(t, slide, size), with TUMBLE_START/_END and HOP_START/_END,
    the same way)

The time column (`DESCRIPTOR(t)`, the group window's `t`) must be the relation's event time, its 'timestamp'
column (DSF-E260): dsflow windows a relation by that. CUMULATE, a window offset, a SESSION table function without
PARTITION BY (one session over every key) and the group windows' *_ROWTIME/*_PROCTIME have no dsflow window
(DSF-E261, with a hint).

Two steps. Before the dialect parses a statement, `rewrite_tokens` writes each window table function in dsflow's
spelling (sqlglot's Spark parser takes neither `TABLE(...)` in FROM nor DESCRIPTOR) and `restore` marks the window it
became with what Flink's form said (`FLINK`, in the node's meta). When a SELECT is resolved, `resolve` rewrites the
legacy group windows (which parse as function calls) and checks every window that came from Flink's syntax.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from dsflow.core.model import Relation
from dsflow.errors import Diagnostic, Location
from dsflow.sql.dialect import SOURCE_PROPERTIES, is_window, window_call
from dsflow.sql.dialect import _error, _token  # the dialect's own token rewriting helpers

Report = Callable[[Diagnostic], None]
Where = Callable[[exp.Expr], Location]
FLINK = "flink_window"
"""The meta key of a window (exp.Table) written in Flink's syntax: its FlinkWindow."""
TABLE_FUNCTIONS = {"TUMBLE": 1, "HOP": 2, "CUMULATE": 2, "SESSION": 1}
"""Flink's window table functions and the durations each takes (an offset may follow TUMBLE's, HOP's, CUMULATE's)."""
GROUP_WINDOWS = {"TUMBLE": 1, "HOP": 2, "SESSION": 1}
"""Flink's legacy group windows (in GROUP BY) and the durations each takes after its time column."""
BOUNDS = {"START": "window_start", "END": "window_end"}
AUXILIARY = {f"{kind}_{part}" for kind in GROUP_WINDOWS for part in (*BOUNDS, "ROWTIME", "PROCTIME")}
_NAMES = (TokenType.VAR, TokenType.IDENTIFIER)
E261_HINT = ("write the window in dsflow's spelling: TUMBLE(rel, SIZE d), HOP(rel, SIZE d, ADVANCE BY s) or "
             "SESSION(rel, GAP d), grouped by window_start, window_end (see docs/project.md, Stateful SQL)")


@dataclass(frozen=True)
class FlinkWindow:
    """What Flink's spelling of a window said that dsflow's does not: its time column (an exp.Identifier or
    exp.Column, for its place), a SESSION's PARTITION BY columns, and why dsflow refuses it, if it does."""

    kind: str
    time: exp.Expr
    partition: tuple[str, ...] | None = None
    refusal: str | None = None
    hint: str = E261_HINT
    processing: bool = False
    """Its time column is a PROCTIME() column (sql/proctime.py): a processing-time window."""


# --- tokens: Flink's window table functions -> dsflow's --------------------------------------------------


class _Cursor:
    """One Flink window table function's tokens, from its `TABLE (` on."""

    def __init__(self, tokens: list[Token], at: int) -> None:
        self.tokens, self.at = tokens, at

    def peek(self, ahead: int = 0) -> Token | None:
        index = self.at + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def text(self, ahead: int = 0) -> str:
        token = self.peek(ahead)
        return token.text.upper() if token is not None else ""

    def take(self, text: str | None = None, example: str = "") -> Token:
        token = self.peek()
        if token is None or (text is not None and token.text.upper() != text):
            raise _error(f"expected {text} in Flink's window table function{example}", token or self.tokens[-1])
        self.at += 1
        return token

    def name(self, what: str) -> list[Token]:
        """`name[.name...]`."""
        found = [self.take()]
        if found[0].token_type not in _NAMES and not found[0].text.isidentifier():
            raise _error(f"expected {what}", found[0])
        while self.text() == "." and self.peek(1) is not None:
            found += [self.take(), self.take()]
        return found

    def duration(self) -> tuple[Token, Token]:
        """`INTERVAL '10' SECOND` (or `INTERVAL 10 SECONDS`): its number, as a number token, and its unit."""
        keyword, number, unit = self.peek(), self.peek(1), self.peek(2)
        if keyword is None or keyword.token_type is not TokenType.INTERVAL or number is None \
                or number.token_type not in (TokenType.STRING, TokenType.NUMBER) \
                or not number.text.replace(".", "", 1).isdigit() or unit is None or unit.token_type not in _NAMES:
            raise _error("expected a duration like INTERVAL '10' SECOND in Flink's window table function",
                         number if keyword is not None and keyword.token_type is TokenType.INTERVAL else keyword)
        self.at += 3
        return _token(number, TokenType.NUMBER, number.text), _token(unit, TokenType.VAR, unit.text)


def _is_table_function(tokens: list[Token], at: int) -> bool:
    return at + 3 < len(tokens) and tokens[at].token_type is TokenType.TABLE and tokens[at + 1].text == "(" \
        and tokens[at + 2].text.upper() in TABLE_FUNCTIONS and tokens[at + 3].text == "("


def rewrite_tokens(tokens: list[Token]) -> tuple[list[Token], dict[int, FlinkWindow]]:
    """A statement's tokens with Flink's window table functions in dsflow's spelling and `SESSION(` as a name (a
    legacy group window); and what each function said, by where its relation starts. A malformed one is a
    ParseError at its place."""
    if not any(t.token_type in (TokenType.TABLE, TokenType.SESSION) for t in tokens):
        return tokens, {}
    out: list[Token] = []
    found: dict[int, FlinkWindow] = {}
    at = 0
    while at < len(tokens):
        if _is_table_function(tokens, at):
            at = _table_function(tokens, at, out, found)
            continue
        token = tokens[at]
        if token.token_type is TokenType.SESSION and at + 1 < len(tokens) and tokens[at + 1].text == "(":
            token = _token(token, TokenType.VAR, token.text)  # SESSION is a keyword of Spark's
        out.append(token)
        at += 1
    return out, found


def _table_function(tokens: list[Token], at: int, out: list[Token], found: dict[int, FlinkWindow]) -> int:
    """`TABLE(KIND(TABLE rel [PARTITION BY k, ...], DESCRIPTOR(t), INTERVAL ..., ...))` from `at` on, written to
    `out` as dsflow's `KIND(rel, SIZE ...)`; the index after it."""
    cursor = _Cursor(tokens, at + 2)
    name = cursor.take()
    kind = name.text.upper()
    example = f", e.g. TABLE({kind}(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))"
    cursor.take("(")
    cursor.take("TABLE", example)
    relation = cursor.name("the relation after TABLE")
    partition = _partition_by(cursor) if kind == "SESSION" else None
    cursor.take(",", example)
    cursor.take("DESCRIPTOR", example)
    cursor.take("(")
    time = cursor.take()
    if time.token_type not in _NAMES and not time.text.isidentifier():
        raise _error("expected the time column in DESCRIPTOR(...)", time)
    cursor.take(")", ": DESCRIPTOR names one time column")
    durations = []
    while cursor.text() == ",":
        cursor.take()
        durations.append(cursor.duration())
    wanted = TABLE_FUNCTIONS[kind]
    if not wanted <= len(durations) <= wanted + (kind != "SESSION"):
        raise _error(f"{kind} takes {'a slide and a size' if wanted == 2 else 'one duration'} after DESCRIPTOR"
                     f"{'' if kind == 'SESSION' else ' (and an offset)'}", cursor.peek() or time)
    cursor.take(")")
    cursor.take(")")
    found[relation[0].start] = FlinkWindow(kind.lower(), _identifier(time), partition,
                                           *_refusal(kind, durations, partition))
    out += _dsflow_spelling(name, relation, durations[:wanted])
    return cursor.at


def _partition_by(cursor: _Cursor) -> tuple[str, ...] | None:
    """A SESSION's `PARTITION BY k` or `PARTITION BY (k1, k2)` after its relation, None without one."""
    first = cursor.peek()
    if first is None or first.token_type is not TokenType.PARTITION_BY:
        return None
    cursor.take()
    parenthesized = cursor.text() == "("
    if parenthesized:
        cursor.take()
    names = [cursor.name("a column after PARTITION BY")[-1].text]
    while cursor.text() == "," and parenthesized:
        cursor.take()
        names.append(cursor.name("a column after PARTITION BY")[-1].text)
    if parenthesized:
        cursor.take(")")
    return tuple(names)


def _refusal(kind: str, durations: list[tuple[Token, Token]], partition: tuple[str, ...] | None) -> tuple:
    """(why dsflow refuses the window, a hint), or () when it maps onto a dsflow window."""
    number, unit = durations[1] if kind in ("HOP", "CUMULATE") else durations[0]
    size, plain = f"'{number.text}' {unit.text}", f"{number.text} {unit.text}"
    if kind == "CUMULATE":
        return ("Flink's CUMULATE window (windows growing by a step up to a size) has no dsflow window",
                f"TUMBLE(rel, SIZE {plain}) into a changelog gives each window's value so far at every micro-batch, "
                "and its final value when the window closes")
    if len(durations) > TABLE_FUNCTIONS[kind]:
        return ("a window offset is not supported: dsflow's windows are aligned to the epoch",
                f"leave the offset out: {kind}(TABLE rel, DESCRIPTOR(col), ...) without the last INTERVAL")
    if kind == "SESSION" and partition is None:
        return ("Flink's SESSION table function without PARTITION BY is one session over every row; dsflow keeps "
                "sessions per key", "add PARTITION BY the key that the GROUP BY groups by besides window_start, "
                f"window_end, e.g. TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(dateTime), INTERVAL "
                f"{size}))")
    return ()


def _dsflow_spelling(name: Token, relation: list[Token], durations: list[tuple[Token, Token]]) -> list[Token]:
    """`TUMBLE(rel, SIZE n UNIT)`, `HOP(rel, SIZE size, ADVANCE BY slide)` or `SESSION(rel, GAP n UNIT)`, each
    new token at the place of the Flink token it stands for (CUMULATE as a TUMBLE of its size, refused later)."""
    kind = "TUMBLE" if name.text.upper() == "CUMULATE" else name.text.upper()

    def word(text: str, like: Token) -> Token:
        return _token(like, TokenType.VAR, text)

    first = durations[-1]  # HOP's and CUMULATE's size is their second
    out = [word(kind, name), _token(name, TokenType.L_PAREN, "("), *relation,
           _token(relation[-1], TokenType.COMMA, ","), word("GAP" if kind == "SESSION" else "SIZE", first[0]), *first]
    if kind == "HOP":
        slide = durations[0]
        out += [_token(slide[0], TokenType.COMMA, ","), word("ADVANCE", slide[0]), word("BY", slide[0]), *slide]
    return [*out, _token(first[1], TokenType.R_PAREN, ")")]


def _identifier(token: Token) -> exp.Identifier:
    node = exp.to_identifier(token.text, quoted=token.token_type is TokenType.IDENTIFIER)
    node.meta.update(line=token.line, col=token.col, start=token.start, end=token.end)
    return node


def restore(tree: exp.Expr | None, found: dict[int, FlinkWindow]) -> exp.Expr | None:
    """Mark each window of the parsed tree that `rewrite_tokens` made with its FlinkWindow."""
    if tree is None or not found:
        return tree
    for table in tree.find_all(exp.Table):
        call = window_call(table)
        start = call.relation.parts[0].meta.get("start") if call is not None and call.relation.parts else None
        if start in found:
            table.meta[FLINK] = found[start]
    return tree


# --- resolving a SELECT: legacy group windows, and the checks -----------------------------------------------


def resolve(select: exp.Select, relations: dict[str, Relation], qualify_name, where: Where, report: Report) -> bool:
    """Rewrite `select`'s legacy group window into dsflow's window, in place, and check every window written in
    Flink's syntax (DSF-E260, DSF-E261); False if a problem was reported."""
    if not _group_window(select, where, report):
        return False
    ok = True
    for table in select.find_all(exp.Table):
        flink = table.meta.get(FLINK)
        if flink is not None and is_window(table):
            ok = _check(table, flink, relations, qualify_name, where, report) and ok
    return ok


def _check(table: exp.Table, flink: FlinkWindow, relations: dict[str, Relation], qualify_name, where: Where,
           report: Report) -> bool:
    if flink.refusal is not None:
        report(Diagnostic("DSF-E261", flink.refusal, where(table), hint=flink.hint))
        return False
    call = window_call(table)
    assert call is not None  # is_window(table)
    relation = relations.get(qualify_name([p.name for p in call.relation.parts]))
    if relation is None:  # an unknown relation is reported when the sources are resolved (DSF-E040)
        return True
    if flink.processing:  # sql/proctime.py
        if flink.kind == "session":
            report(Diagnostic("DSF-E262", "a processing-time SESSION window is not supported", where(flink.time),
                              hint="window processing time by TUMBLE or HOP, or a SESSION by the event time"))
            return False
        return True
    event_time = _source_timestamp(call.relation) or relation.timestamp
    if event_time is None or event_time.lower() != flink.time.name.lower():
        dsflow = f"{flink.kind.upper()}({relation.name} WITH ('timestamp' = '{flink.time.name}'), ...)"
        report(Diagnostic("DSF-E260", _not_event_time(flink.time.name, relation, event_time), where(flink.time),
                          hint=(f"window by `{event_time}`" if event_time else
                                f"declare 'timestamp' = '{flink.time.name}' in the WITH (...) of {relation.name}")
                          + f"; or write dsflow's {dsflow}, which takes that column as this source's event time"))
        return False
    return _check_partition(table, flink, where, report)


def _source_timestamp(relation: exp.Table) -> str | None:
    """The source's own `WITH ('timestamp' = 'col')`, if it has one."""
    for prop in relation.args.get(SOURCE_PROPERTIES) or ():
        if prop.this.name == "timestamp" and prop.args.get("value") is not None:
            return prop.args["value"].name
    return None


def _not_event_time(time: str, relation: Relation, event_time: str | None) -> str:
    said = f"its 'timestamp' column is `{event_time}`" if event_time else \
        "it declares no 'timestamp' column, so its event time is the record timestamp"
    return f"the window's time column `{time}` is not the event time of '{relation.fqn}': {said}"


def _check_partition(table: exp.Table, flink: FlinkWindow, where: Where, report: Report) -> bool:
    """A SESSION table function's PARTITION BY columns are the GROUP BY's columns besides the window's: dsflow
    keeps a session per GROUP BY key."""
    select = table.find_ancestor(exp.Select)
    group = select.args.get("group") if select is not None else None
    if flink.partition is None or group is None:
        return True
    keys = {e.name.lower() for e in group.expressions if not (isinstance(e, exp.Column)
                                                                  and e.name.lower() in BOUNDS.values())}
    if keys == {name.lower() for name in flink.partition}:
        return True
    report(Diagnostic("DSF-E261", f"the session's PARTITION BY ({', '.join(flink.partition)}) is not what the GROUP "
                      "BY groups by besides window_start, window_end: dsflow keeps a session per GROUP BY key",
                      where(group), hint="partition by the GROUP BY's columns, e.g. PARTITION BY bidder ... GROUP BY "
                      "bidder, window_start, window_end"))
    return False


def _group_window(select: exp.Select, where: Where, report: Report) -> bool:
    """`FROM rel r ... GROUP BY k, SESSION(r.t, INTERVAL ...)` with `SESSION_START(...)`/`SESSION_END(...)` as
    `FROM SESSION(rel, GAP ...) AS r ... GROUP BY k, r.window_start, r.window_end` with r.window_start/_end (and
    TUMBLE, HOP); False if a problem was reported."""
    group = select.args.get("group")
    calls = [e for e in group.expressions if _is_call(e, GROUP_WINDOWS)] if group is not None else []
    auxiliary = [a for a in select.find_all(exp.Anonymous)
                 if a.name.upper() in AUXILIARY and a.find_ancestor(exp.Select) is select]
    if group is None or not calls:
        for call in auxiliary:
            report(Diagnostic("DSF-E261", f"{call.name.upper()} without a group window in GROUP BY", where(call),
                              hint=f"add the window to GROUP BY, e.g. GROUP BY key, "
                              f"{call.name.upper().rsplit('_', 1)[0]}(dateTime, INTERVAL '10' SECOND)"))
        return not auxiliary
    problem = _group_window_problem(select, calls) or _auxiliary_problem(auxiliary, calls[0])
    if problem is not None:
        node, message, hint = problem
        report(Diagnostic("DSF-E261", message, where(node), hint=hint))
        return False
    call, table = calls[0], select.args["from_"].this
    alias = table.alias_or_name
    for node in auxiliary:
        node.replace(exp.column(BOUNDS[node.name.upper().rsplit("_", 1)[1]], table=alias))
    items: list[exp.Expr] = []
    for item in group.expressions:
        items += [exp.column(b, table=alias) for b in BOUNDS.values()] if item is call else [item]
    group.set("expressions", items)
    table.replace(_window_table(call, table))
    return True


def _is_call(node: exp.Expr, names) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() in names


def _group_window_problem(select: exp.Select, calls: list[exp.Anonymous]) -> tuple[exp.Expr, str, str] | None:
    """Where and why the SELECT's group window has no dsflow window (and a hint), None if it has one."""
    call = calls[0]
    kind = call.name.upper()
    args = call.expressions
    source = select.args.get("from_")
    table = source.this if source is not None else None
    if len(calls) > 1:
        return calls[1], "more than one group window in GROUP BY", E261_HINT
    if not isinstance(table, exp.Table) or is_window(table) or not isinstance(table.this, exp.Identifier):
        return call, "a group window reads one relation in FROM (not a window, a subquery or a function)", E261_HINT
    if len(args) != 1 + GROUP_WINDOWS[kind] or not all(isinstance(a, exp.Interval) for a in args[1:]):
        durations = "INTERVAL slide, INTERVAL size" if kind == "HOP" else "INTERVAL duration"
        return call, f"{kind} takes the time column and {durations}", f"e.g. {kind}(dateTime, INTERVAL '10' SECOND)"
    time = args[0]
    if not isinstance(time, exp.Column) or (time.table and time.table.lower() not in
                                              (table.alias_or_name.lower(), table.name.lower())):
        return time, f"the group window's first argument must be a column of '{table.alias_or_name}'", \
            "name the relation's event-time column ('timestamp'), e.g. SESSION(B.dateTime, INTERVAL '10' SECOND)"
    return None


def _auxiliary_problem(auxiliary: list[exp.Anonymous], call: exp.Anonymous) -> tuple[exp.Expr, str, str] | None:
    """The first `*_START`/`*_END` (or `*_ROWTIME`, ...) that is not a bound of the GROUP BY's window `call`."""
    window = call.name.upper()
    arguments = [a.sql(dialect="spark") for a in call.expressions]
    hint = f"select {window}_START(...) or {window}_END(...) with the GROUP BY's arguments: {call.sql(dialect='spark')}"
    for node in auxiliary:
        name = node.name.upper()
        kind, part = name.rsplit("_", 1)
        if part not in BOUNDS:
            return node, f"{name} is not supported: a window's bounds are {kind}_START and {kind}_END", hint
        if kind != window:
            return node, f"{name} does not match the group window {window}(...) of the GROUP BY", hint
        if [a.sql(dialect="spark") for a in node.expressions] != arguments:
            return node, f"{name}(...) does not repeat the arguments of the GROUP BY's {window}(...)", hint
    return None


def _window_table(call: exp.Anonymous, table: exp.Table) -> exp.Table:
    """dsflow's window over `table` (its alias kept) for the group window `call`; HOP's durations in dsflow's
    order (size, then slide)."""
    kind = call.name.upper()
    time, *durations = (a.copy() for a in call.expressions)
    if kind == "HOP":
        durations.reverse()
    inner = table.copy()
    inner.set("alias", None)
    window = exp.Table(this=exp.Anonymous(this=kind, expressions=[inner, *durations]),
                       alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name)))
    window.meta[FLINK] = FlinkWindow(kind.lower(), time)
    return window
