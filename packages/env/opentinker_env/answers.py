"""Final-answer extraction and normalisation for math-style games.

`extract_answer` tries, in this order, and returns the first that matches:
  1. the last `\\boxed{...}` (its content);
  2. the last "answer: X" / "answer is X" (case-insensitive): when X starts with a worked
     equation ("8+5 = 13"), the number after its "="; else the number X starts with; else the
     rest of that line;
  3. the last number anywhere in the text (e.g. "-12", "1,024", "3.5").
It returns None when the text has none of these.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

NUMBER = r"-?\d+(?:,\d{3})*(?:\.\d+)?"
BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")
ANSWER_RE = re.compile(r"answer\s*(?:is\s*:?|:)\s*([^\n]*)", re.IGNORECASE)
NUMBER_RE = re.compile(NUMBER)
LEADING_NUMBER_RE = re.compile(rf"^\$?\s*({NUMBER})")
WORKED_EQUATION_RE = re.compile(rf"^\$?\s*[-+*/x×÷^().,\d\s]*?\d[-+*/x×÷^().,\d\s]*?=\s*\$?\s*({NUMBER})")
"""An answer given as its working: digits and operators, "=", then the result."""


def extract_answer(text: str) -> str | None:
    """The final answer in a model's text (see the module docstring for the order), or None."""
    boxed = BOXED_RE.findall(text)
    if boxed:
        return boxed[-1].strip()
    marked = ANSWER_RE.findall(text)
    if marked and marked[-1].strip():
        return _leading_number_or_text(marked[-1].strip())
    numbers = NUMBER_RE.findall(text)
    return numbers[-1] if numbers else None


def _leading_number_or_text(text: str) -> str:
    match = WORKED_EQUATION_RE.match(text) or LEADING_NUMBER_RE.match(text)
    return match.group(1) if match else text.rstrip(".")


def normalize_answer(answer: object) -> str:
    """Canonical text for comparison: numbers lose commas, '$', '+' and trailing zeros
    ("1,024.0" -> "1024"); other text is stripped, case-folded, whitespace collapsed."""
    text = str(answer).strip().rstrip(".").strip().lstrip("$+").strip()
    number = _as_decimal(text.replace(",", ""))
    if number is not None:
        return _decimal_text(number)
    return " ".join(text.casefold().split())


def answers_match(extracted: str | None, expected: object) -> bool:
    """Exact match after normalisation; a missing answer never matches."""
    return extracted is not None and normalize_answer(extracted) == normalize_answer(expected)


def _as_decimal(text: str) -> Decimal | None:
    try:
        number = Decimal(text)
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _decimal_text(number: Decimal) -> str:
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")
