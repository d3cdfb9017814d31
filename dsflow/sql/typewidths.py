"""The number type Spark computes for an expression, where its rules are known (sql/typerules.py reads it).

sqlglot's annotation of a computed number is a guess (`n * 2.5` DOUBLE, `COALESCE(NULL, 1)` BIGINT, `id + 1` left as
is); Spark's analyzer, under ANSI, computes it exactly: integers widen (TINYINT < SMALLINT < INT < BIGINT), `/` of
non-decimals is a DOUBLE, a number literal with a fraction is a DECIMAL of its digits and DECIMAL arithmetic has its
precision rules (DecimalPrecision, with precision loss allowed: its default), a string in arithmetic is cast to a
BIGINT next to an integer and to a DOUBLE otherwise. `number_type` follows them for literals, declared values
(columns, fields, elements, CASTs), arithmetic, negation, CASE/IF/COALESCE/NULLIF/GREATEST/LEAST, ABS, FLOOR/CEIL,
ROUND, the functions whose result is always an INT or a DOUBLE, and SUM/AVG/MIN/MAX/COUNT/MAX_BY/MIN_BY; elsewhere
it answers None (not known), and the checker does not rely on a width. tests/integration/test_typecheck.py compares
its answers with Spark's.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dsflow.sql.typekinds import NULL, NUM, STR, Typed, built, literal_type

T = exp.DataType.Type
Infer = Callable[[exp.Expr], Typed]

INTEGRAL = {T.TINYINT: 0, T.SMALLINT: 1, T.INT: 2, T.BIGINT: 3}
"""Integer types, narrowest first."""
AS_DECIMAL = {T.TINYINT: (3, 0), T.SMALLINT: (5, 0), T.INT: (10, 0), T.BIGINT: (20, 0)}
MAX_PRECISION, MIN_ADJUSTED_SCALE = 38, 6
DECLARED = (exp.Column, exp.Dot, exp.Bracket, exp.Cast)
"""Values whose type is declared (a column, a struct field, an element, a CAST or TRY_CAST): the checker's."""
INT_RESULTS = (exp.Length, exp.StrPosition, exp.DateDiff, exp.ArraySize, exp.Year, exp.Month, exp.Quarter, exp.Day,
               exp.DayOfMonth, exp.DayOfWeek, exp.DayOfYear, exp.WeekOfYear, exp.Hour, exp.Minute, exp.Second)
DOUBLE_RESULTS = (exp.Sqrt, exp.Sign, exp.Pow, exp.Exp, exp.Ln, exp.Log)
BRANCHES = (exp.Coalesce, exp.Greatest, exp.Least, exp.If, exp.Case)


def build(name: str) -> exp.DataType:
    return built(name)


def decimal(precision: int, scale: int) -> exp.DataType:
    return build(f"DECIMAL({min(precision, MAX_PRECISION)}, {min(scale, MAX_PRECISION)})")


def decimal_of(data_type: exp.DataType) -> tuple[int, int] | None:
    """(precision, scale) of a DECIMAL (DECIMAL alone is Spark's DECIMAL(10, 0)), of an integer as a DECIMAL."""
    if data_type.this in AS_DECIMAL:
        return AS_DECIMAL[data_type.this]
    if data_type.this != T.DECIMAL:
        return None
    params = [int(p.name) for p in data_type.expressions if p.name.isdigit()]
    return (params[0], params[1] if len(params) > 1 else 0) if params else (10, 0)


def number_type(node: exp.Expr, infer: Infer) -> exp.DataType | None:
    """Spark's type of the number `node` computes; None if it is no number or its width is not known here."""
    while isinstance(node, (exp.Paren, exp.Alias)):
        node = node.this
    if isinstance(node, exp.Literal):
        return None if node.is_string else literal_type(node.name)
    if isinstance(node, DECLARED):
        found = infer(node)
        return found.data_type if found.kind == NUM and found.data_type is not None else None
    if isinstance(node, exp.Neg):  # -NULL and -'1' are DOUBLEs
        return build("DOUBLE") if _operand(node.this, infer) in (NULL, STR) else number_type(node.this, infer)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv)):
        return _arithmetic(node, infer)
    if isinstance(node, BRANCHES):
        return _wider([_branch(b, infer) for b in _branch_values(node)])
    return _function(node, infer)


def _bare(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _branch_values(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.If):
        values = [node.args.get("true"), node.args.get("false")]
    elif isinstance(node, exp.Case):
        values = [w.args.get("true") for w in node.args.get("ifs") or []] + [node.args.get("default")]
    else:
        values = [node.this, *node.expressions]
    return [v for v in values if v is not None]


def _branch(node: exp.Expr, infer: Infer) -> exp.DataType | None | str:
    """A branch's number type, NULL for an untyped NULL (it takes the others' type), STR for a string, None if not
    known."""
    return _operand(node, infer)


def _wider(types: list[exp.DataType | None | str]) -> exp.DataType | None:
    """The type Spark finds for branches (findWiderCommonType): the widest integer, a DOUBLE next to any DOUBLE,
    DECIMALs widened to hold every branch (an integer as a DECIMAL of its type's digits)."""
    known = [t for t in types if t != NULL]
    numbers = [t for t in known if isinstance(t, exp.DataType)]
    if not numbers or any(t is None for t in known):
        return None
    if STR in known:  # ANSI: a string among integers is cast to a BIGINT, among other numbers to a DOUBLE
        return build("BIGINT") if all(t.this in INTEGRAL for t in numbers) else build("DOUBLE")
    if all(t.this in INTEGRAL for t in numbers):
        return max(numbers, key=lambda t: INTEGRAL[t.this])
    if any(t.this == T.DOUBLE for t in numbers):
        return build("DOUBLE")
    decimals = [decimal_of(t) for t in numbers]
    if any(d is None for d in decimals):
        return None  # a FLOAT among them: not followed
    scale = max(d[1] for d in decimals if d is not None)
    whole = max(d[0] - d[1] for d in decimals if d is not None)
    return decimal(whole + scale, scale)


def _operand(node: exp.Expr, infer: Infer) -> exp.DataType | None | str:
    """An operand's number type; NULL or STR for an untyped NULL or a string (cast to the other side's type)."""
    if isinstance(_bare(node), exp.Null):
        return NULL
    if infer(node).kind == STR:
        return STR
    return number_type(node, infer)


def _arithmetic(node: exp.Binary, infer: Infer) -> exp.DataType | None:
    left, right = _operand(node.this, infer), _operand(node.expression, infer)
    if left is None or right is None:
        return None
    if isinstance(node, exp.IntDiv):
        return build("BIGINT")
    if left == NULL and right == NULL or STR in (left, right) and NULL in (left, right):
        return build("DOUBLE")
    if STR in (left, right):  # ANSI: the string is cast to a BIGINT next to an integer, else to a DOUBLE
        other = right if left == STR else left
        if isinstance(node, exp.Div) or not isinstance(other, exp.DataType) or other.this not in INTEGRAL:
            return build("DOUBLE")
        return build("BIGINT")
    left = right if left == NULL else left  # an untyped NULL is cast to the other side's type
    right = left if right == NULL else right
    assert isinstance(left, exp.DataType) and isinstance(right, exp.DataType)
    if left.this in INTEGRAL and right.this in INTEGRAL:
        return build("DOUBLE") if isinstance(node, exp.Div) else max(left, right, key=lambda t: INTEGRAL[t.this])
    if T.DOUBLE in (left.this, right.this):
        return build("DOUBLE")
    if T.FLOAT in (left.this, right.this):  # FLOAT with FLOAT is a FLOAT, with anything else a DOUBLE
        both = left.this == right.this == T.FLOAT and not isinstance(node, exp.Div)
        return build("FLOAT") if both else build("DOUBLE")
    if T.DECIMAL not in (left.this, right.this):
        return None
    first, second = _as_decimal(node.this, left), _as_decimal(node.expression, right)
    if first is None or second is None:
        return None  # a FLOAT and a DECIMAL: not followed
    return _decimal_result(node, first, second)


def _as_decimal(node: exp.Expr, data_type: exp.DataType) -> tuple[int, int] | None:
    """A DECIMAL operand's (precision, scale); an integer literal takes its own digits (Spark picks the minimum
    precision of a literal, `-3` included: Spark parses it as one literal), another integer its type's."""
    bare = _bare(node)
    if isinstance(bare, exp.Neg) and isinstance(bare.this, exp.Literal):
        bare = bare.this
    if isinstance(bare, exp.Literal) and data_type.this in INTEGRAL:
        return (max(len(bare.name.lstrip("+-").lstrip("0")), 1), 0)
    return decimal_of(data_type)


def _decimal_result(node: exp.Binary, first: tuple[int, int], second: tuple[int, int]) -> exp.DataType:
    (p1, s1), (p2, s2) = first, second
    if isinstance(node, (exp.Add, exp.Sub)):
        scale = max(s1, s2)
        return _adjusted(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if isinstance(node, exp.Mul):
        return _adjusted(p1 + p2 + 1, s1 + s2)
    if isinstance(node, exp.Div):
        scale = max(MIN_ADJUSTED_SCALE, s1 + p2 + 1)
        return _adjusted(p1 - s1 + s2 + scale, scale)
    scale = max(s1, s2)  # Mod
    return _adjusted(min(p1 - s1, p2 - s2) + scale, scale)


def _adjusted(precision: int, scale: int) -> exp.DataType:
    """DecimalType.adjustPrecisionScale: past 38 digits the scale gives way, down to 6."""
    if precision <= MAX_PRECISION:
        return decimal(precision, scale)
    whole = precision - scale
    return decimal(MAX_PRECISION, max(MAX_PRECISION - whole, min(scale, MIN_ADJUSTED_SCALE)))


def _function(node: exp.Expr, infer: Infer) -> exp.DataType | None:
    if isinstance(node, INT_RESULTS) or (isinstance(node, exp.Anonymous) and node.name.upper() == "CARDINALITY"):
        return build("INT")
    if isinstance(node, DOUBLE_RESULTS) or isinstance(node, exp.Count):
        return build("DOUBLE") if not isinstance(node, exp.Count) else build("BIGINT")
    if isinstance(node, exp.Nullif):
        return number_type(node.this, infer)
    argument = number_type(node.this, infer) if isinstance(node.args.get("this"), exp.Expr) else None
    if isinstance(node, (exp.Abs, exp.Floor, exp.Ceil, exp.Round, exp.Sign)) and _operand(node.this, infer) == NULL:
        return build("BIGINT" if isinstance(node, (exp.Floor, exp.Ceil)) else "DOUBLE")  # Spark casts the NULL
    if argument is None:
        return None
    digits = decimal_of(argument) if argument.this == T.DECIMAL else None
    if isinstance(node, (exp.Abs, exp.Min, exp.Max, exp.ArgMax, exp.ArgMin)):  # MAX_BY: its value's type
        return argument
    if isinstance(node, (exp.Floor, exp.Ceil)) and not node.args.get("decimals"):
        return decimal(digits[0] - digits[1] + 1, 0) if digits else build("BIGINT")
    if isinstance(node, exp.Round):
        return _round(node, argument, digits)
    if isinstance(node, exp.Sum):
        return decimal(digits[0] + 10, digits[1]) if digits else \
            build("BIGINT") if argument.this in INTEGRAL else build("DOUBLE")
    if isinstance(node, exp.Avg):
        return decimal(digits[0] + 4, digits[1] + 4) if digits else build("DOUBLE")
    return None


def _round(node: exp.Round, argument: exp.DataType, digits: tuple[int, int] | None) -> exp.DataType | None:
    if digits is None:
        return argument if argument.this in (*INTEGRAL, T.DOUBLE, T.FLOAT) else None
    scale_node = node.args.get("decimals")
    written = _bare(scale_node).name if scale_node is not None else "0"
    if not isinstance(_bare(scale_node) if scale_node is not None else exp.Literal.number(0), exp.Literal) or \
            not written.isdigit():
        return None
    scale = min(digits[1], int(written))
    return decimal(digits[0] - digits[1] + scale + 1, scale)
