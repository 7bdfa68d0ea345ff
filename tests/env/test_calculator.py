"""The safe calculator: exact arithmetic with the usual precedence, readable errors, and
injection/abuse attempts that are refused without evaluating anything."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from opentinker_runtime.games import calculator
from opentinker_runtime.games.calculator import (
    MAX_DEPTH,
    MAX_EXPRESSION_CHARS,
    MAX_NUMBER_DIGITS,
    CalculatorError,
    calculate,
    evaluate,
    render,
)


@pytest.fixture(autouse=True)
def no_code_execution(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """eval/exec/compile/__import__/open fail loudly if the calculator module calls them (its
    globals shadow the builtins; the static test below covers every other route)."""
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the calculator executed code: {args!r}")

    for name in ("eval", "exec", "compile", "__import__", "open"):
        monkeypatch.setattr(calculator, name, forbidden, raising=False)
    yield


@pytest.mark.parametrize(("expression", "expected"), [
    ("7", "7"),
    ("1+2*3", "7"),
    ("(1+2)*3", "9"),
    ("10-4-3", "3"),            # left-associative
    ("100/10/5", "2"),
    ("2*3+4*5", "26"),
    ("2**3**2", "512"),         # right-associative power
    ("2^3^2", "512"),
    ("(2**3)**2", "64"),
    ("-2**2", "-4"),            # power binds tighter than unary minus
    ("(-2)**2", "4"),
    ("2**-1", "0.5"),
    ("-3", "-3"),
    ("--3", "3"),
    ("+3", "3"),
    ("4*-2", "-8"),
    ("-(1+2)", "-3"),
    ("7//2", "3"),
    ("-7//2", "-4"),            # floor division
    ("7%3", "1"),
    ("-7%3", "2"),
    ("7.5%2", "1.5"),
    ("2**10 % 1000", "24"),
    ("6/4", "1.5"),
    ("6/3", "2"),               # integral division renders as an int
    ("1/3", "0.3333333333"),
    ("2/3", "0.6666666667"),
    ("-1/8", "-0.125"),
    ("0.1+0.2", "0.3"),         # exact, no float error
    ("1.50*2", "3"),
    (".5+.25", "0.75"),
    ("7.", "7"),
    ("007", "7"),
    ("123*456", "56088"),
    ("123456789*987654321", "121932631112635269"),
    ("  12 *\t(3 + 4) ", "84"),
    ("1000/3", "333.3333333333"),
    ("0**0", "1"),
    ("(-1)**(10**99)", "1"),    # trivial bases take any exponent
    ("(-1)**(10**99+1)", "-1"),
    ("0**(10**99)", "0"),
    ("10**99", "1" + "0" * 99),
])
def test_correct_values(expression: str, expected: str) -> None:
    assert calculate(expression) == expected


def test_evaluate_is_exact_and_render_is_short() -> None:
    assert evaluate("1/3") == Fraction(1, 3)
    assert evaluate("1/3*3") == 1
    assert render(Fraction(22, 7)) == "3.1428571429"
    assert render(Fraction(-5, 1)) == "-5"
    assert render(Fraction(1, 3 * 10 ** 6)) == "0.0000003333333333"


@pytest.mark.parametrize(("expression", "message"), [
    ("1/0", "division by zero"),
    ("1/(2-2)", "division by zero"),
    ("1//0", "division by zero"),
    ("5%0", "modulo by zero"),
    ("0**-1", "division by zero"),
    ("2**0.5", "exponent must be an integer"),
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("1+", "unexpected end of expression"),
    ("*2", "unexpected '\\*' at position 1"),
    ("1+x", "unexpected 'x' at position 3"),
    ("1 2", "unexpected '2' at position 3"),
    ("1)", "unexpected '\\)' at position 2"),
    ("()", "unexpected '\\)' at position 2"),
    ("(1+2", "missing '\\)' for the '\\(' at position 1"),
    ("1..2", "unexpected '\\.' at position 3"),
    ("1.2.3", "unexpected '\\.' at position 4"),
    ("2***3", "unexpected '\\*' at position 4"),
    ("1,000", "unexpected ',' at position 2"),
    ("1 = 1", "unexpected '=' at position 3"),
])
def test_errors_are_readable(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=message):
        calculate(expression)


def test_calculator_error_is_a_value_error() -> None:
    assert issubclass(CalculatorError, ValueError)
    with pytest.raises(CalculatorError, match="expected an expression string"):
        calculate(123)  # type: ignore[arg-type]


@pytest.mark.parametrize("expression", [
    "__import__('os').system('x')",
    "__import__",
    "().__class__",
    "().__class__.__bases__[0].__subclasses__()",
    "open('/etc/passwd')",
    "open",
    "x",
    "pi",
    "abs(-1)",
    "(1).real",
    "1 .real",
    "1.__class__",
    "'1'",
    '"1+1"',
    "lambda: 1",
    "(lambda x: x)(1)",
    "[1, 2]",
    "[x for x in range(10)]",
    "{1: 2}",
    "1 if 1 else 2",
    "1 and 2",
    "not 1",
    "1 < 2",
    "1 << 1000",
    "~1",
    "1 & 1",
    "1; 2",
    "a = 1",
    "f'{1}'",
    "# 1",
    "1\\\n+1",
    "0x10",
    "0b11",
    "1_000",
    "1j",
    "1e3",
    "1e999",
    "1E999",
    "inf",
    "nan",
    "True",
    "None",
    "...",
    "@",
    "$1",
    "1\x00",
])
def test_python_constructs_are_refused(expression: str) -> None:
    with pytest.raises(CalculatorError, match=r"unexpected|empty"):
        calculate(expression)


@pytest.mark.parametrize("expression", [
    "\uff11+1",      # fullwidth digit one
    "\u0661+1",      # arabic-indic digit one
    "\u00b2",        # superscript two
    "\u2155",        # vulgar fraction one fifth
    "2\u00d73",      # multiplication sign
    "6\u00f72",      # division sign
    "2\u22123",      # minus sign
    "1\u202e+2",     # right-to-left override
    "1\u00a0+2",     # no-break space
    "\u0031\u0338",  # 1 + combining overlay
])
def test_unicode_digits_and_operators_are_refused(expression: str) -> None:
    with pytest.raises(CalculatorError, match="unexpected") as caught:
        calculate(expression)
    assert str(caught.value).isascii()  # the message shows escapes, not raw unicode


@pytest.mark.parametrize("expression", [
    "9**9**9",
    "10**100000",
    "2**(10**99)",
    "(1/2)**100000",
    "1.5**100000",
    "10**100",                 # just over MAX_RESULT_DIGITS
    "(10**99)*(10**99)",
    "(10**99)*10",
    "10**99+10**99*9",
    "1/10**99/10",
    "2**2**2**2**2",
    "99**99**99",
    "(-9)**9**9",
    "10**-100000",
    "(10**50)**(10**50)",
])
def test_huge_results_are_refused_before_computing(expression: str) -> None:
    with pytest.raises(CalculatorError, match="result too (large|precise)"):
        calculate(expression)


def test_power_of_a_huge_exponent_is_never_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The size check runs before `**`: a Fraction whose ** fails proves nothing was raised
    to a huge power."""
    powers: list[int] = []
    real_pow = Fraction.__pow__

    def counting_pow(self: Fraction, other: object, *rest: object) -> object:
        powers.append(int(other))  # type: ignore[call-overload]
        return real_pow(self, other, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(Fraction, "__pow__", counting_pow)
    with pytest.raises(CalculatorError, match="too large"):
        calculate("9**9**9")
    assert powers == [9]  # 9**9 was computed; 9**387420489 was refused
    powers.clear()
    with pytest.raises(CalculatorError, match="too large"):
        calculate("10**100000")
    with pytest.raises(CalculatorError, match="too precise"):
        calculate("10**-100000")
    assert powers == []


def test_expression_length_is_capped() -> None:
    longest = "1+" * (MAX_EXPRESSION_CHARS // 2 - 1) + "1"
    assert len(longest) <= MAX_EXPRESSION_CHARS
    assert calculate(longest) == str(MAX_EXPRESSION_CHARS // 2)
    with pytest.raises(CalculatorError, match="expression too long"):
        calculate("1" + "+1" * MAX_EXPRESSION_CHARS)
    with pytest.raises(CalculatorError, match="expression too long"):
        calculate("(" * 10 ** 6 + "1" + ")" * 10 ** 6)
    with pytest.raises(CalculatorError, match="expression too long"):
        calculate("9" * 10 ** 6)


def test_number_digits_are_capped() -> None:
    assert calculate("9" * MAX_NUMBER_DIGITS) == "9" * MAX_NUMBER_DIGITS
    with pytest.raises(CalculatorError, match="number too long at position 1"):
        calculate("9" * (MAX_NUMBER_DIGITS + 1))
    with pytest.raises(CalculatorError, match="number too long at position 3"):
        calculate("1+0." + "3" * MAX_NUMBER_DIGITS)


def test_nesting_depth_is_capped() -> None:
    assert calculate("(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH) == "1"
    with pytest.raises(CalculatorError, match="nesting too deep"):
        calculate("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1))
    with pytest.raises(CalculatorError, match="nesting too deep"):
        calculate("(" * 150)
    with pytest.raises(CalculatorError, match="nesting too deep"):
        calculate("-" * (MAX_DEPTH + 1) + "1")
    with pytest.raises(CalculatorError, match="nesting too deep"):
        calculate("2" + "**2" * (MAX_DEPTH + 1))
    assert calculate("-" * MAX_DEPTH + "1") == "1"


def test_the_module_never_uses_dynamic_evaluation() -> None:
    """Static guard: the calculator's source names no eval/exec/compile/__import__/ast."""
    tree = ast.parse(Path(calculator.__file__).read_text(encoding="utf-8"))
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not names & {"eval", "exec", "compile", "__import__", "literal_eval", "getattr"}
    assert modules <= {"__future__", "dataclasses", "decimal", "fractions"}
