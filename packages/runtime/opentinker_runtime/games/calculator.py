"""A safe arithmetic calculator for tool-using games (see `math_tool_game`).

`calculate("12*(3+4)")` -> "84". The expression is tokenized and parsed by hand (recursive
descent); nothing is ever passed to Python's eval/exec/compile, so names, attributes, calls,
strings and every other Python construct are simply syntax errors.

Grammar (usual precedence; `**` binds tighter than unary minus and is right-associative,
as in Python: -2**2 == -4, 2**3**2 == 512, 2**-1 == 0.5):

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/" | "//" | "%") unary)*
    unary  := ("-" | "+") unary | power
    power  := atom (("**" | "^") unary)?
    atom   := NUMBER | "(" expr ")"
    NUMBER := ASCII digits with an optional decimal point: 12, 3.5, .5, 7.

Arithmetic is exact (`fractions.Fraction`); `/` is true division, `//` floor division, `%`
the modulo of floor division. `render` shows an integral result as an int ("84") and any
other as a short decimal, rounded to about 10 significant decimals ("0.3333333333").

Everything is bounded, so no input can make it slow or large: the expression length, the
digits of a number, the nesting depth (parentheses and unary signs), and the magnitude of
every intermediate result (refused *before* computing a power, so "9**9**9" costs nothing).
Every failure is a `CalculatorError` whose message a model can read and act on, e.g.
"division by zero" or "unexpected 'x' at position 3" (positions count from 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction

MAX_EXPRESSION_CHARS = 200
"""Longest expression accepted."""
MAX_NUMBER_DIGITS = 30
"""Most digits in one number literal (both sides of the point together)."""
MAX_DEPTH = 20
"""Deepest nesting of parentheses and unary signs."""
MAX_RESULT_DIGITS = 100
"""Most digits in the numerator or denominator of any intermediate result."""
DECIMAL_PLACES = 10
"""Significant decimals (after the integer part) shown for a non-integral result."""

_LIMIT = 10 ** MAX_RESULT_DIGITS
_MAX_BITS = _LIMIT.bit_length()
_DIGITS = frozenset("0123456789")  # ASCII only: str.isdigit() would accept other scripts
_SPACES = frozenset(" \t\n\r")
_OPERATORS = ("**", "//", "+", "-", "*", "/", "%", "^", "(", ")")


class CalculatorError(ValueError):
    """The expression is invalid or its value is out of range; the message says why."""


@dataclass(frozen=True)
class _Token:
    kind: str
    """"num" for a number, else the operator text ('**', '(', ...); "end" closes the list."""
    text: str
    position: int
    """1-based column of the token's first character."""
    value: Fraction | None = None


def calculate(expression: str) -> str:
    """The value of `expression`, rendered by `render`; CalculatorError when it has none."""
    return render(evaluate(expression))


def evaluate(expression: str) -> Fraction:
    """The exact value of `expression`; CalculatorError when it is invalid or out of range."""
    if not isinstance(expression, str):
        raise CalculatorError(f"expected an expression string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression too long ({len(expression)} characters; "
                              f"the limit is {MAX_EXPRESSION_CHARS})")
    if not expression.strip():
        raise CalculatorError("empty expression")
    return _Parser(tokenize(expression)).parse()


def render(value: Fraction) -> str:
    """"84" for an integral value, else a decimal with at most DECIMAL_PLACES significant
    decimals after the integer part, trailing zeros dropped ("2.5", "0.3333333333")."""
    if value.denominator == 1:
        return str(value.numerator)
    integer_digits = len(str(abs(value.numerator) // value.denominator).lstrip("0"))
    context = Context(prec=integer_digits + DECIMAL_PLACES)
    decimal = context.divide(Decimal(value.numerator), Decimal(value.denominator))
    return format(decimal.normalize(context), "f")


def tokenize(expression: str) -> list[_Token]:
    """Numbers and operators, ending with an "end" token; rejects any other character."""
    tokens: list[_Token] = []
    i, n = 0, len(expression)
    while i < n:
        char = expression[i]
        if char in _SPACES:
            i += 1
        elif char in _DIGITS or (char == "." and i + 1 < n and expression[i + 1] in _DIGITS):
            i = _number(expression, i, tokens)
        else:
            operator = next((op for op in _OPERATORS if expression.startswith(op, i)), None)
            if operator is None:
                raise CalculatorError(f"unexpected {_shown(char)} at position {i + 1}")
            tokens.append(_Token(operator, operator, i + 1))
            i += len(operator)
    tokens.append(_Token("end", "", n + 1))
    return tokens


def _number(expression: str, start: int, tokens: list[_Token]) -> int:
    """Read the number starting at `start` into `tokens`; the index after it."""
    i, n = start, len(expression)
    while i < n and expression[i] in _DIGITS:
        i += 1
    if i < n and expression[i] == ".":
        i += 1
        while i < n and expression[i] in _DIGITS:
            i += 1
    text = expression[start:i]
    digits = len(text) - text.count(".")
    if digits > MAX_NUMBER_DIGITS:
        raise CalculatorError(f"number too long at position {start + 1} ({digits} digits; "
                              f"the limit is {MAX_NUMBER_DIGITS})")
    if i < n and expression[i] == ".":
        raise CalculatorError(f"unexpected '.' at position {i + 1}")
    whole, _, fraction = text.partition(".")
    value = Fraction(int(whole or "0") * 10 ** len(fraction) + int(fraction or "0"), 10 ** len(fraction))
    tokens.append(_Token("num", text, start + 1, value))
    return i


def _shown(char: str) -> str:
    """A character quoted for an error message, escaped when it is not printable ASCII."""
    return f"'{char}'" if char.isascii() and char.isprintable() and char != "'" else ascii(char)


class _Parser:
    """Recursive descent over the tokens; each method returns an exact, range-checked value."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.index = 0
        self.depth = 0

    def parse(self) -> Fraction:
        value = self._expr()
        token = self._peek()
        if token.kind != "end":
            raise _unexpected(token)
        return value

    def _peek(self) -> _Token:
        return self.tokens[self.index]

    def _take(self) -> _Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def _expr(self) -> Fraction:
        value = self._term()
        while self._peek().kind in ("+", "-"):
            operator = self._take().kind
            right = self._term()
            value = _checked(value + right if operator == "+" else value - right)
        return value

    def _term(self) -> Fraction:
        value = self._unary()
        while self._peek().kind in ("*", "/", "//", "%"):
            operator = self._take().kind
            right = self._unary()
            value = _checked(_multiplicative(operator, value, right))
        return value

    def _unary(self) -> Fraction:
        token = self._peek()
        if token.kind not in ("+", "-"):
            return self._power()
        self._take()
        self._enter(token)
        value = self._unary()
        self.depth -= 1
        return -value if token.kind == "-" else value

    def _power(self) -> Fraction:
        base = self._atom()
        token = self._peek()
        if token.kind not in ("**", "^"):
            return base
        self._take()
        self._enter(token)
        exponent = self._unary()
        self.depth -= 1
        return _checked(_power(base, exponent))

    def _atom(self) -> Fraction:
        token = self._take()
        if token.kind == "num":
            assert token.value is not None
            return token.value
        if token.kind != "(":
            raise _unexpected(token)
        self._enter(token)
        value = self._expr()
        closing = self._take()
        if closing.kind != ")":
            if closing.kind == "end":
                raise CalculatorError(f"missing ')' for the '(' at position {token.position}")
            raise _unexpected(closing)
        self.depth -= 1
        return value

    def _enter(self, token: _Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise CalculatorError(f"nesting too deep at position {token.position} "
                                  f"(the limit is {MAX_DEPTH})")


def _unexpected(token: _Token) -> CalculatorError:
    if token.kind == "end":
        return CalculatorError("unexpected end of expression")
    return CalculatorError(f"unexpected '{token.text}' at position {token.position}")


def _multiplicative(operator: str, left: Fraction, right: Fraction) -> Fraction:
    if operator == "*":
        return left * right
    if right == 0:
        raise CalculatorError("division by zero" if operator != "%" else "modulo by zero")
    if operator == "/":
        return left / right
    if operator == "//":
        return Fraction(left // right)
    return left % right


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    """base ** exponent for an integer exponent, refused before computing when too large."""
    if exponent.denominator != 1:
        raise CalculatorError("the exponent must be an integer")
    power = exponent.numerator
    if base == 0:
        if power < 0:
            raise CalculatorError("division by zero")
        return Fraction(1 if power == 0 else 0)
    if base in (1, -1):
        return base ** (power % 2)
    # |numerator| or the denominator is at least 2**(bits - 1), so the result has at least
    # (bits - 1) * |power| bits: refuse without computing when that is over the limit.
    bits = max(abs(base.numerator).bit_length(), base.denominator.bit_length())
    if (bits - 1) * abs(power) > _MAX_BITS:
        grows = (abs(base) > 1) == (power > 0)
        raise CalculatorError(f"result too {'large' if grows else 'precise'} "
                              f"(more than {MAX_RESULT_DIGITS} digits)")
    return base ** power


def _checked(value: Fraction) -> Fraction:
    """`value` unless its numerator or denominator has more than MAX_RESULT_DIGITS digits."""
    if abs(value.numerator) >= _LIMIT:
        raise CalculatorError(f"result too large (more than {MAX_RESULT_DIGITS} digits)")
    if value.denominator >= _LIMIT:
        raise CalculatorError(f"result too precise (more than {MAX_RESULT_DIGITS} digits)")
    return value
