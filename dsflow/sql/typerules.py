"""How each kind of expression is typed, and which types Spark refuses for it (sql/typecheck.py)."""

from __future__ import annotations

from sqlglot import exp

from dsflow.sql.typekinds import (
    ARRAY, BINARY, BOOL, COMPLEX, DATE, INTERVAL, MAP, NULL, NUM, RUNTIME_CODES, STR, STRUCT, TIME, UNKNOWN, UNTYPED,
    Problem, Later, Typed, built, converts, kind_of, number_literal, text, typed,
)
from dsflow.sql.functions import Declared, declared
from dsflow.sql.typeargs import (
    DECLARED, INTEGERS, SMALL_INTS, by_ordering, check_arguments, concat_ws_part, of_width,
)
from dsflow.sql.typewidths import number_type

COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)
BRANCHES = (exp.Coalesce, exp.Nullif, exp.Greatest, exp.Least)
STRICT_BRANCHES = (exp.Greatest, exp.Least)
"""Spark finds no common type of a string and another kind for these: refused by its analyzer, not cast."""
CASTABLE: dict[str, set[str]] = {
    STR: {NUM, BOOL, TIME, DATE, BINARY, STR},
    NUM: {NUM, STR, BOOL, TIME},
    BOOL: {BOOL, NUM, STR},
    TIME: {TIME, DATE, STR, NUM},
    DATE: {DATE, TIME, STR},
    BINARY: {BINARY, STR},
    ARRAY: {ARRAY, STR}, MAP: {MAP, STR}, STRUCT: {STRUCT, STR},
    INTERVAL: {INTERVAL, STR, NUM},
}
"""What Spark's ANSI cast takes each kind to (Cast.canAnsiCast); NULL and unknown cast to anything."""
IMPLICIT_FROM_STRING = (NUM, TIME, DATE, BOOL)
"""The kinds a string is cast to implicitly where one is needed (and fails at run time if it does not convert)."""

NUMERIC_ARGS = (exp.Abs, exp.Round, exp.Floor, exp.Ceil, exp.Sqrt, exp.Exp, exp.Ln, exp.Log, exp.Pow, exp.Sign)
TEMPORAL_ARGS = (exp.Year, exp.Month, exp.Quarter, exp.Day, exp.DayOfMonth, exp.DayOfWeek, exp.DayOfYear,
                 exp.WeekOfYear, exp.Hour, exp.Minute, exp.Second)
STRING_ARGS = (exp.Upper, exp.Lower, exp.Initcap, exp.Trim, exp.Substring, exp.Length, exp.ConcatWs,
               exp.Replace if hasattr(exp, "Replace") else exp.Upper, exp.Pad, exp.Reverse, exp.Repeat, exp.Left,
               exp.Right, exp.MD5, exp.SHA, exp.RegexpReplace, exp.RegexpExtract, exp.RegexpLike)
COLLECTION_ARGS = ("CARDINALITY",)
STRING_RESULTS = (exp.Upper, exp.Lower, exp.Initcap, exp.Trim, exp.Substring, exp.Left, exp.Right, exp.Pad,
                  exp.Repeat, exp.Replace, exp.RegexpReplace, exp.RegexpExtract, exp.MD5, exp.SHA)
"""Functions whose result is a string whatever their arguments (sqlglot types LEFT(x, 2) and SUBSTRING(n, 1) as their
first argument, TRIM(NULL) as NULL; Spark casts the argument to a string first)."""


class Checker:
    """Types expressions bottom-up; every problem is kept (`problems`), and an expression with one is typed
    UNKNOWN so that what encloses it is not reported again."""

    def __init__(self, columns: dict[tuple[str, str], exp.DataType]) -> None:
        self.problems: list[Problem] = []
        self.columns = columns
        self.known: dict[int, Typed] = {}
        """id(node) -> its type: a node typed again (a rule reads its arguments after they were typed) is not
        reported again."""

    def infer(self, node: exp.Expr) -> Typed:
        if id(node) in self.known:
            return self.known[id(node)]
        try:
            found = self._infer(node)
        except Problem as problem:
            self.problems.append(problem)
            found = UNTYPED
        self.known[id(node)] = found
        return found

    def number(self, node: exp.Expr) -> exp.DataType | None:
        """The number type Spark computes for `node` (sql/typewidths.py); None if not known."""
        return number_type(node, self.infer)

    def condition(self, node: exp.Expr, clause: str) -> None:
        found = self.infer(node)
        try:
            self._boolean(node, found, clause)
        except Problem as problem:
            self.problems.append(problem)

    # --- dispatch ---------------------------------------------------------------------------------------------

    def _infer(self, node: exp.Expr) -> Typed:
        if isinstance(node, (exp.Alias, exp.Paren)):
            return self.infer(node.this)
        if isinstance(node, exp.Literal):
            return Typed(STR, built("VARCHAR"), literal=node.name) if node.is_string else \
                number_literal(node)
        if isinstance(node, exp.Null):
            return Typed(NULL)
        if isinstance(node, exp.Boolean):
            return Typed(BOOL, built("BOOLEAN"))
        if isinstance(node, exp.Column):
            return typed(node.type) if kind_of(node.type) != UNKNOWN else \
                typed(self.columns.get((node.table.lower(), node.name.lower())))
        if isinstance(node, exp.Dot):
            return self._field(node)
        user = declared(node)
        if user is not None:
            return self._user_call(node, user)
        for kinds, method in self._rules():
            if isinstance(node, kinds):
                return method(node)
        for child in node.iter_expressions():  # typed for their own problems
            self.infer(child)
        return self._function(node)

    def _rules(self):
        return ((exp.Bracket, self._bracket), ((exp.Cast, exp.TryCast), self._cast), (COMPARISONS, self._compare),
                (exp.In, self._in), (exp.Between, self._between), (ARITHMETIC, self._arithmetic),
                (exp.Neg, self._negate), ((exp.And, exp.Or), self._connector), (exp.Not, self._not),
                (exp.Case, self._case), (exp.If, self._if), (BRANCHES, self._branches), (exp.Concat, self._concat),
                ((exp.Sum, exp.Avg), self._sum), ((exp.Min, exp.Max), self._min_max), (exp.DPipe, self._dpipe),
                ((exp.Like, exp.ILike), self._like), ((exp.ArgMax, exp.ArgMin), lambda n: by_ordering(self, n)),
                (exp.Is, self._is))

    def _is(self, node: exp.Is) -> Typed:
        self.infer(node.this)
        return Typed(BOOL, built("BOOLEAN"))

    def _user_call(self, node: exp.Expr, user: Declared) -> Typed:
        """A call of a user-defined function: each argument of its parameter's kind (DSF-E443), its declared result."""
        for argument, wanted in zip(node.expressions, user.parameters, strict=False):
            found = self.infer(argument)
            kind = kind_of(exp.DataType.build(wanted))
            if found.kind not in (kind, UNKNOWN, NULL):
                raise Problem("DSF-E443", argument, f"{text(node)}: the argument '{text(argument)}' is {found.show()}, "
                              f"but {user.name} declares a {wanted} there", f"pass a {wanted}, or CAST it")
        return typed(exp.DataType.build(user.returns))

    # --- subscripts and casts ---------------------------------------------------------------------------------

    def _bracket(self, node: exp.Bracket) -> Typed:
        base = self.infer(node.this)
        keys = [self.infer(e) for e in node.expressions]
        if base.kind in (UNKNOWN, NULL) or len(keys) != 1:
            return typed(node.type)
        index, key = node.expressions[0], keys[0]
        written = f"{text(node.this)}[{text(index)}]"
        if base.kind == ARRAY:
            self._wanted(index, key, NUM, f"the index of {written}")
            element = base.data_type.expressions[0] if base.data_type and base.data_type.expressions else None
            return typed(element) if element is not None else typed(node.type)
        if base.kind == MAP:
            values = base.data_type.expressions if base.data_type else []
            return typed(values[1]) if len(values) == 2 else typed(node.type)
        if base.kind == STRUCT and key.literal is not None and base.data_type is not None:
            fields = {f.name.lower(): f for f in base.data_type.expressions}
            found = fields.get(key.literal.lower())
            if found is not None:
                return typed(found.args.get("kind"))
        raise Problem("DSF-E400", node, f"'{written}': a subscript reads an ARRAY element or a MAP value, but "
                      f"'{text(node.this)}' is {base.show()}",
                      "subscript an ARRAY (a[1], counted from 1) or a MAP (m['key']); a STRUCT's field is s->field")

    def _field(self, node: exp.Dot) -> Typed:
        if kind_of(node.type) != UNKNOWN or not isinstance(node.expression, exp.Identifier):
            return typed(node.type)
        base = self.infer(node.this)
        if base.kind in (UNKNOWN, NULL) or base.data_type is None:
            return UNTYPED
        fields = {f.name.lower(): f for f in base.data_type.expressions} if base.kind == STRUCT else {}
        found = fields.get(node.expression.name.lower())
        if found is not None:
            return typed(found.args.get("kind"))
        field = node.expression.name
        raise Problem("DSF-E048", node, f"'{text(node.this)}' is {base.show()}, not a STRUCT: no field '{field}'"
                      if base.kind != STRUCT else f"'{text(node.this)}' has no field '{field}'",
                      f"its fields are {', '.join(f.name for f in base.data_type.expressions)}"
                      if base.kind == STRUCT else "-> reads a field of a STRUCT column, e.g. after->id")

    def _cast(self, node: exp.Cast) -> Typed:
        source = self.infer(node.this)
        target = typed(node.to)
        strict = not (isinstance(node, exp.TryCast) and node.args.get("safe") is True)  # Spark writes TRY_CAST
        if source.kind in (UNKNOWN, NULL) or target.kind == UNKNOWN:
            return target
        if target.kind not in CASTABLE.get(source.kind, {target.kind}):
            raise Problem("DSF-E407", node, f"{text(node)}: {source.show()} cannot be cast to {target.show()}",
                          f"{source.kind} values cast to {', '.join(sorted(CASTABLE[source.kind]))}")
        if strict and source.literal is not None and not converts(source.literal, target.kind):
            raise Problem("DSF-E402", node, f"{text(node)}: '{source.literal}' is not a {target.kind}; the cast "
                          "fails when the query runs", "write a literal of that type, or TRY_CAST (NULL instead)")
        return target

    # --- comparisons --------------------------------------------------------------------------------------------

    def _compare(self, node: exp.Binary) -> Typed:
        left, right = self.infer(node.this), self.infer(node.expression)
        self._comparable(node, [(node.this, left), (node.expression, right)])
        return Typed(BOOL, built("BOOLEAN"))

    def _in(self, node: exp.In) -> Typed:
        items = [(node.this, self.infer(node.this))] + [(e, self.infer(e)) for e in node.expressions]
        if items[0][1].kind != NULL:  # NULL IN (...) is NULL: Spark folds it without casting the list
            self._comparable(node, items)
        else:  # ... whose values must still have a common type (NULL IN (1, TRUE) is refused)
            try:
                self._comparable(node, items[1:])
            except Problem as problem:
                if problem.code not in RUNTIME_CODES:
                    raise
        return Typed(BOOL, built("BOOLEAN"))

    def _between(self, node: exp.Between) -> Typed:
        items = [(node.this, self.infer(node.this)), (node.args["low"], self.infer(node.args["low"])),
                 (node.args["high"], self.infer(node.args["high"]))]
        if items[0][1].kind != NULL:  # NULL BETWEEN ... is NULL, as NULL IN (...)
            for bound in items[1:]:  # Spark compares x >= low and x <= high: low and high need no common type
                self._comparable(node, [items[0], bound])
        return Typed(BOOL, built("BOOLEAN"))

    def _comparable(self, node: exp.Expr, items: list[tuple[exp.Expr, Typed]]) -> Typed:
        """The common type of values compared (or of branches); a Problem if Spark has none."""
        known = [(n, t) for n, t in items if t.kind not in (UNKNOWN, NULL)]
        if not known:
            return UNTYPED
        target = next(((n, t) for n, t in known if t.kind != STR), known[0])
        for other, found in known:
            if found.kind == MAP and isinstance(node, (*COMPARISONS, exp.In, exp.Between)):
                raise Problem("DSF-E401", node, f"{text(node)}: MAP values cannot be compared",
                              "compare one of its values, m['key']")
            if found.kind == target[1].kind or {found.kind, target[1].kind} == {TIME, DATE}:
                continue
            if found.kind == STR and not isinstance(node, STRICT_BRANCHES):
                self._wanted(other, found, target[1].kind,
                             Later(lambda other, to: f"{text(other)} compared with {to.show()}", other, target[1]))
                continue
            raise Problem("DSF-E401", node, f"{text(node)}: {target[1].show()} and {found.show()} cannot be "
                          "compared or combined", "CAST one side to the other's type")
        return target[1]

    def _wanted(self, node: exp.Expr, found: Typed, kind: str, what: str | Later) -> None:
        """`node` (typed `found`) is where Spark needs a `kind`: a string converts at run time, or fails."""
        if found.kind in (kind, UNKNOWN, NULL) or {found.kind, kind} == {TIME, DATE}:
            return
        if found.kind == STR and kind in IMPLICIT_FROM_STRING:
            if found.literal is None:
                raise Problem("DSF-E403", node, f"{what}: {found.show()} '{text(node)}' is used as a {kind}; Spark "
                              f"casts it when the query runs, and any value that is not a {kind} fails it (ANSI)",
                              f"CAST it explicitly (TRY_CAST gives NULL for a value that is not a {kind}), or "
                              "declare the column with its type")
            if not converts(found.literal, kind):
                raise Problem("DSF-E402", node, f"{what}: '{found.literal}' is not a {kind}, so Spark's cast of it "
                              "fails when the query runs (ANSI)", f"write a {kind} literal")
            return
        if kind == STR and found.kind not in COMPLEX:
            return
        raise Problem("DSF-E401", node, f"{what}: {found.show()} where a {kind} is needed",
                      f"use a {kind} value, or CAST it")

    # --- arithmetic and conditions -----------------------------------------------------------------------------

    def _arithmetic(self, node: exp.Binary) -> Typed:
        left, right = self.infer(node.this), self.infer(node.expression)
        kinds = {left.kind, right.kind}
        if kinds in ({NULL, STR}, {STR}):  # no numeric side to cast the string to: Spark refuses it
            other = "NULL and a string" if NULL in kinds else "two strings"
            raise Problem("DSF-E404", node, f"{text(node)}: arithmetic on {other}",
                          "CAST the strings to numbers (and a NULL too: CAST(NULL AS BIGINT))")
        if NULL in kinds and kinds & {BOOL, ARRAY, MAP, STRUCT}:  # Spark casts NULL to the other side's type
            raise Problem("DSF-E404", node, f"{text(node)}: arithmetic on NULL and {'/'.join(sorted(kinds - {NULL}))}",
                          "arithmetic takes numbers")
        if kinds == {NULL}:
            return Typed(NUM, built("DOUBLE"))  # Spark casts both NULLs to DOUBLE
        if NULL in kinds and kinds & {TIME, DATE}:
            return self._null_temporal(node, kinds)
        if kinds & {UNKNOWN, NULL}:
            return typed(node.type) if not kinds - {UNKNOWN, NULL, NUM} else UNTYPED
        temporal = self._temporal_arithmetic(node, left, right)
        if temporal is not None:
            return temporal
        if INTERVAL in kinds:
            return self._interval_arithmetic(node, left, right)
        for side, found in ((node.this, left), (node.expression, right)):
            if found.kind not in (NUM, STR):
                raise Problem("DSF-E404", node, f"{text(node)}: arithmetic on {found.show()} '{text(side)}'",
                              "arithmetic takes numbers (and TIMESTAMP/DATE plus or minus an INTERVAL)")
        for side, found in ((node.this, left), (node.expression, right)):
            self._wanted(side, found, NUM, Later(lambda: f"'{text(node)}'"))
        return typed(node.type) if kind_of(node.type) == NUM else Typed(NUM)

    def _temporal_arithmetic(self, node: exp.Binary, left: Typed, right: Typed) -> Typed | None:
        kinds = (left.kind, right.kind)
        if not isinstance(node, (exp.Add, exp.Sub)) or not ({TIME, DATE} & set(kinds)):
            return None
        if INTERVAL in kinds:
            return left if left.kind in (TIME, DATE) else right
        if isinstance(node, exp.Sub) and set(kinds) <= {TIME, DATE}:
            return Typed(INTERVAL)
        if isinstance(node, exp.Sub) and STR in kinds:  # ts - '2024-01-01', 'x' - d: the string is cast
            side, found, other = (node.this, left, right) if left.kind == STR else (node.expression, right, left)
            self._wanted(side, found, other.kind, Later(lambda: f"'{text(node)}'"))
            return Typed(INTERVAL)
        if DATE in kinds and NUM in kinds and (isinstance(node, exp.Add) or left.kind == DATE):
            self._date_days(node, *((node.expression, right) if left.kind == DATE else (node.this, left)))
            return Typed(DATE, built("DATE"))
        return None

    def _null_temporal(self, node: exp.Binary, kinds: set[str]) -> Typed:
        """NULL and a TIMESTAMP or DATE: Spark reads `+ NULL` as an INTERVAL added (a TIMESTAMP), `- NULL` or
        `NULL -` as a difference (an INTERVAL); it refuses the other operators."""
        if isinstance(node, exp.Add):
            return Typed(TIME, built("TIMESTAMP"))
        if isinstance(node, exp.Sub):
            return Typed(INTERVAL)
        raise Problem("DSF-E404", node, f"{text(node)}: {node.key.upper()} of NULL and "
                      f"{'/'.join(sorted(k.upper() for k in kinds - {NULL}))}",
                      "a TIMESTAMP or DATE is added to or subtracted from, not multiplied or divided")

    def _date_days(self, node: exp.Binary, days: exp.Expr, found: Typed) -> None:
        """A DATE plus or minus a number is Spark's DATE_ADD/DATE_SUB: the days an INT, SMALLINT or TINYINT."""
        if of_width(self, found, days, SMALL_INTS):
            return
        width = Typed(NUM, found.data_type if isinstance(days, DECLARED) else self.number(days))
        sign = "plus" if isinstance(node, exp.Add) else "minus"
        raise Problem("DSF-E404", node, f"{text(node)}: a DATE {sign} {width.show()} '{text(days)}'; Spark adds "
                      "days of an INT only", "CAST the days to INT, or add an INTERVAL (d + INTERVAL 2 DAYS)")

    def _interval_arithmetic(self, node: exp.Binary, left: Typed, right: Typed) -> Typed:
        """INTERVAL +/- INTERVAL, INTERVAL * number, INTERVAL / number: an INTERVAL (a string there is cast to a
        number); any other operator of an INTERVAL and a number or an INTERVAL is refused by Spark (E404); the rest
        (an INTERVAL plus a string, ...) is not claimed."""
        kinds = (left.kind, right.kind)
        if isinstance(node, (exp.Add, exp.Sub)) and kinds == (INTERVAL, INTERVAL) or \
                isinstance(node, exp.Mul) and set(kinds) == {INTERVAL, NUM} or \
                isinstance(node, exp.Div) and kinds == (INTERVAL, NUM):
            return Typed(INTERVAL)
        if isinstance(node, exp.Mul) and set(kinds) == {INTERVAL, STR} or \
                isinstance(node, exp.Div) and kinds == (INTERVAL, STR):
            side = node.this if left.kind == STR else node.expression
            self._wanted(side, left if left.kind == STR else right, NUM, Later(lambda: f"'{text(node)}'"))
            return Typed(INTERVAL)  # the string is cast to a number (Spark: (ts - ts) * '2' is an INTERVAL)
        if not set(kinds) <= {INTERVAL, NUM}:
            return UNTYPED
        raise Problem("DSF-E404", node, f"{text(node)}: {node.key.upper()} of {left.show()} and {right.show()}",
                      "an INTERVAL adds to an INTERVAL or a TIMESTAMP, and is multiplied or divided by a number; "
                      "compute in numbers with TIMESTAMPDIFF(SECOND, a, b)")

    def _negate(self, node: exp.Neg) -> Typed:
        found = self.infer(node.this)
        if found.kind == NULL:
            return Typed(NUM)  # Spark types -NULL as DOUBLE
        if found.kind in (NUM, INTERVAL, UNKNOWN):
            return found
        if found.kind == STR:
            self._wanted(node.this, found, NUM, Later(lambda: f"'{text(node)}'"))
            return Typed(NUM)
        raise Problem("DSF-E404", node, f"{text(node)}: negating {found.show()}", "negate a number")

    def _connector(self, node: exp.Connector) -> Typed:
        sides = [(side, self.infer(side)) for side in (node.this, node.expression)]
        if {found.kind for _, found in sides} == {NULL, STR}:  # Spark: NULL AND 'true' has no BOOLEAN side to cast to
            raise Problem("DSF-E405", node, f"{text(node)}: {type(node).__name__.upper()} of an untyped NULL and a "
                          "string; Spark casts the string to a BOOLEAN only beside a BOOLEAN",
                          "compare the string (s = 'true'), or CAST it: CAST(s AS BOOLEAN)")
        for side, found in sides:
            self._boolean(side, found, type(node).__name__.upper())
        return Typed(BOOL, built("BOOLEAN"))

    def _not(self, node: exp.Not) -> Typed:
        self._boolean(node.this, self.infer(node.this), "NOT")
        return Typed(BOOL, built("BOOLEAN"))

    def _boolean(self, node: exp.Expr, found: Typed, clause: str) -> None:
        if found.kind in (BOOL, UNKNOWN, NULL):
            return
        if found.kind == STR:
            self._wanted(node, found, BOOL, Later(lambda: f"{clause} '{text(node)}'"))
            return
        raise Problem("DSF-E405", node, f"{clause} needs a BOOLEAN condition, but '{text(node)}' is {found.show()}",
                      "compare it, e.g. x > 0, or x IS NOT NULL")

    # --- branches -----------------------------------------------------------------------------------------------

    def _case(self, node: exp.Case) -> Typed:
        subject = node.this
        branches: list[tuple[exp.Expr, Typed]] = []
        subject_type = self.infer(subject) if subject is not None else None
        for when in node.args.get("ifs") or []:
            condition = when.this
            found = self.infer(condition)
            if subject_type is not None:
                self._comparable(when, [(subject, subject_type), (condition, found)])
            elif found.kind in (NULL, STR):
                raise Problem("DSF-E405", when, f"CASE WHEN {text(condition)}: Spark needs a BOOLEAN condition, not "
                              f"{found.show() if found.kind == STR else 'an untyped NULL'} (it casts none here)",
                              "write CAST(NULL AS BOOLEAN), or remove the branch (it is never taken)")
            else:
                self._boolean(condition, found, "CASE WHEN")
            branches.append((when.args["true"], self.infer(when.args["true"])))
        default = node.args.get("default")
        if default is not None:
            branches.append((default, self.infer(default)))
        return self._common(node, branches)

    def _if(self, node: exp.If) -> Typed:
        condition = self.infer(node.this)
        if condition.kind == STR:
            raise Problem("DSF-E405", node, f"IF({text(node.this)}, ...): Spark needs a BOOLEAN condition, not "
                          f"{condition.show()} (it casts none here)", "compare it, or CAST it to BOOLEAN")
        self._boolean(node.this, condition, "IF")
        branches = [(n, self.infer(n)) for n in (node.args.get("true"), node.args.get("false")) if n is not None]
        return self._common(node, branches)

    def _branches(self, node: exp.Func) -> Typed:
        values = [node.this, *node.expressions] if not isinstance(node, exp.Nullif) else [node.this, node.expression]
        return self._common(node, [(n, self.infer(n)) for n in values if n is not None])

    def _common(self, node: exp.Expr, branches: list[tuple[exp.Expr, Typed]]) -> Typed:
        try:
            found = self._comparable(node, branches)
        except Problem as problem:
            raise Problem("DSF-E406" if problem.code == "DSF-E401" else problem.code, problem.node,
                          problem.message.replace("cannot be compared or combined", "cannot be the branches of one "
                                                  "expression"), "give every branch the same type (CAST one)") \
                from None
        if found.kind == UNKNOWN:
            return typed(node.type)
        return typed(node.type) if kind_of(node.type) == found.kind else found

    # --- aggregates, functions, strings --------------------------------------------------------------------------

    def _sum(self, node: exp.AggFunc) -> Typed:
        found = self.infer(node.this)
        if found.kind == INTERVAL:
            return found  # Spark's SUM and AVG of an INTERVAL are INTERVALs
        if found.kind in (NULL, TIME):  # Spark sums TIMESTAMPs as DOUBLE seconds, and a NULL as a DOUBLE
            return Typed(NUM, built("DOUBLE"))
        if found.kind in (NUM, UNKNOWN):
            return typed(node.type) if kind_of(node.type) == NUM else Typed(NUM, self.number(node))
        if found.kind == STR:
            self._wanted(node.this, found, NUM, f"{node.key.upper()}")
            return Typed(NUM)
        raise Problem("DSF-E408", node, f"{text(node)}: {node.key.upper()} of {found.show()}",
                      f"{node.key.upper()} adds numbers; COUNT, MIN and MAX take other types")

    def _min_max(self, node: exp.AggFunc) -> Typed:
        found = self.infer(node.this)
        if found.kind == MAP:
            raise Problem("DSF-E408", node, f"{text(node)}: {node.key.upper()} of a MAP (maps are not ordered)",
                          "take MIN/MAX of one of its values, m['key']")
        return found if found.kind != UNKNOWN else typed(node.type)

    def _dpipe(self, node: exp.DPipe) -> Typed:
        return self._joined(node, [(node.this, self.infer(node.this)), (node.expression, self.infer(node.expression))])

    def _concat(self, node: exp.Concat) -> Typed:
        parts = [(n, self.infer(n)) for n in node.expressions]
        if not isinstance(node, exp.ConcatWs):
            return self._joined(node, parts)
        for index, (part, found) in enumerate(parts):  # the separator, then strings or ARRAYs of them
            if found.kind in COMPLEX and (index == 0 or not concat_ws_part(found)):
                raise Problem("DSF-E409", node, f"{text(node)}: CONCAT_WS joins strings (and ARRAYs of them), not "
                              f"{found.show()} '{text(part)}'", "CAST it to VARCHAR, or read one of its fields")
        return Typed(STR, built("VARCHAR"))

    def _joined(self, node: exp.Expr, parts: list[tuple[exp.Expr, Typed]]) -> Typed:
        kinds = {t.kind for _, t in parts}
        if kinds <= {ARRAY, UNKNOWN, NULL} and ARRAY in kinds:
            if NULL in kinds:  # Spark casts no untyped NULL to the ARRAY here: DATA_DIFF_TYPES
                raise Problem("DSF-E409", node, f"{text(node)}: CONCAT (||) of an ARRAY and an untyped NULL",
                              "CAST the NULL to the ARRAY's type, e.g. CAST(NULL AS ARRAY<INT>)")
            return next(t for _, t in parts if t.kind == ARRAY)
        for side, found in parts:
            if found.kind in COMPLEX:
                raise Problem("DSF-E409", node, f"{text(node)}: CONCAT (||) joins strings, not {found.show()} "
                              f"'{text(side)}'", "CAST it to VARCHAR, or read one of its elements or fields")
        return Typed(STR, built("VARCHAR"))

    def _like(self, node: exp.Binary) -> Typed:
        for side in (node.this, node.expression):
            found = self.infer(side)
            if found.kind in COMPLEX:
                raise Problem("DSF-E409", node, f"{text(node)}: LIKE matches strings, not {found.show()}",
                              "CAST it to VARCHAR, or read one of its elements or fields")
        return Typed(BOOL, built("BOOLEAN"))

    def _function(self, node: exp.Expr) -> Typed:
        """A function's first argument against what it takes; its result as sqlglot types it (or RESULT_TYPES)."""
        first = node.this if isinstance(node, exp.Func) and isinstance(node.args.get("this"), exp.Expr) else None
        if isinstance(node, exp.Anonymous) and node.expressions:
            first = node.expressions[0]
        if isinstance(node, TEMPORAL_ARGS) and isinstance(first, exp.TsOrDsToDate) and not first.args.get("format"):
            first = first.this  # YEAR(x) is parsed as YEAR(TO_DATE(x))
        if first is not None and not isinstance(node, exp.AggFunc):
            self._argument(node, first, self.infer(first))
        decimals = node.args.get("decimals") if isinstance(node, exp.Round) else None
        if decimals is not None:  # Spark folds it while analysing: a string that is no number fails there
            if decimals.find(exp.Column) is not None:  # NON_FOLDABLE_INPUT
                raise Problem("DSF-E409", node, f"{text(node)}: ROUND's scale '{text(decimals)}' reads a column; "
                              "Spark takes a constant there", "write the number of decimals, e.g. ROUND(x, 2)")
            self._wanted(decimals, self.infer(decimals), NUM, Later(lambda: f"ROUND's scale '{text(decimals)}'"))
        check_arguments(self, node, Later(lambda: _name(node)))
        if isinstance(node, exp.Round) and first is not None:  # Spark's ROUND of an integer keeps its type
            argument = self.infer(first)
            if argument.data_type is not None and argument.data_type.this in INTEGERS:
                return argument
        if isinstance(node, NUMERIC_ARGS) and first is not None and self.infer(first).kind == NULL:
            return Typed(NUM, built("BIGINT" if isinstance(node, (exp.Floor, exp.Ceil)) else "DOUBLE"))  # as Spark
        if isinstance(node, exp.TsOrDsToDate):  # TO_DATE of anything it takes is a DATE
            return Typed(DATE, built("DATE"))
        if isinstance(node, STRING_RESULTS) and (first is None or self.infer(first).kind != BINARY):
            return Typed(STR, built("VARCHAR"))
        width = self.number(node)  # FLOOR(2.5) is a DECIMAL(2, 0) (sqlglot: VARCHAR), LENGTH(s) an INT, ...
        return Typed(NUM, width) if width is not None else typed(node.type)

    def _argument(self, node: exp.Expr, first: exp.Expr, found: Typed) -> None:
        what = Later(lambda: f"{_name(node)}'s argument '{text(first)}'")
        if isinstance(node, NUMERIC_ARGS):
            if found.kind not in (NUM, STR, UNKNOWN, NULL):
                raise Problem("DSF-E409", node, f"{text(node)}: {what} is {found.show()}, not a number",
                              "pass a number, or CAST it")
            self._wanted(first, found, NUM, what)
        elif isinstance(node, TEMPORAL_ARGS):
            if found.kind not in (TIME, DATE, STR, UNKNOWN, NULL):
                raise Problem("DSF-E409", node, f"{text(node)}: {what} is {found.show()}, not a TIMESTAMP or DATE",
                              "pass a TIMESTAMP, e.g. TO_TIMESTAMP_LTZ(ms, 3) of epoch milliseconds")
            self._wanted(first, found, TIME, what)
        elif isinstance(node, exp.TsOrDsToDate) and node.args.get("safe"):  # TO_DATE written (not YEAR(x)'s)
            if found.kind in COMPLEX:
                raise Problem("DSF-E409", node, f"{text(node)}: {what} is {found.show()}, not a string, TIMESTAMP "
                              "or DATE", "read one of its elements or fields")
        elif isinstance(node, STRING_ARGS) or _collection(node):
            wants_collection = _collection(node)
            if wants_collection:
                if found.kind not in (ARRAY, MAP, UNKNOWN, NULL):
                    raise Problem("DSF-E409", node, f"{text(node)}: {what} is {found.show()}, not an ARRAY or MAP",
                                  "pass an ARRAY or a MAP")
                return
            if found.kind in (MAP, STRUCT) or (found.kind == ARRAY and not isinstance(node, (exp.Concat, exp.Reverse))):
                raise Problem("DSF-E409", node, f"{text(node)}: {what} is {found.show()}, not a string",
                              "CAST it to VARCHAR, or read one of its elements or fields")


def _collection(node: exp.Expr) -> bool:
    """A function whose argument is an ARRAY or MAP (CARDINALITY is no sqlglot function: an Anonymous)."""
    return isinstance(node, exp.ArraySize) or isinstance(node, exp.Anonymous) and node.name.upper() in COLLECTION_ARGS


def _name(node: exp.Expr) -> str:
    """A function's name in a message."""
    if isinstance(node, exp.Anonymous):
        return node.name.upper()
    written = text(node).split("(")[0].strip().upper()
    return written if written.replace("_", "").isalnum() else type(node).__name__.upper()
