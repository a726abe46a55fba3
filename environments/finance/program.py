"""FinQA's reasoning programs, executed to check a row's published answer.

A program is steps "op(arg1, arg2)" separated by ", ": `add`, `subtract`,
`multiply`, `divide`, `exp`, `greater` over numbers ("5829", "5%", "const_100",
"const_m1") or earlier steps ("#0"), and `table_max` / `table_min` /
`table_sum` / `table_average` over a table row named by its first cell. This
follows FinQA's code/evaluate/evaluate.py (`eval_program`, `str_to_num`,
`process_row`), including its rounding of the final result to 5 decimals.
"""

from __future__ import annotations

import re
from typing import Sequence

_STEP_RE = re.compile(r"\s*([a-z_]+)\(([^()]*)\)\s*")
_BINARY = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
    "exp": lambda a, b: a ** b,
    "greater": lambda a, b: "yes" if a > b else "no",
}
_TABLE = {
    "table_max": max,
    "table_min": min,
    "table_sum": sum,
    "table_average": lambda xs: sum(xs) / len(xs),
}


class ProgramError(ValueError):
    """The program cannot be executed (named step and reason)."""


def to_number(text: str) -> float | None:
    """FinQA's `str_to_num`: "1,234" -> 1234.0, "5%" -> 0.05, "const_m1" -> -1.0; else None."""
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        pass
    if "%" in text:
        try:
            return float(text.replace("%", "")) / 100.0
        except ValueError:
            return None
    if text.startswith("const_"):
        text = text.removeprefix("const_")
        try:
            return -1.0 if text == "m1" else float(text)
        except ValueError:
            return None
    return None


def _row_numbers(cells: Sequence[str]) -> list[float] | None:
    out = []
    for cell in cells:
        value = to_number(cell.replace("$", "").split("(")[0].strip())
        if value is None:
            return None
        out.append(value)
    return out


def _arg(text: str, results: list, step: int) -> float | str:
    text = text.strip()
    if text.startswith("#"):
        index = int(text[1:]) if text[1:].isdigit() else -1
        if not 0 <= index < len(results):
            raise ProgramError(f"step {step} refers to {text}, which is not an earlier step")
        return results[index]
    value = to_number(text)
    if value is None:
        raise ProgramError(f"step {step}: argument {text!r} is not a number")
    return value


def _table_step(op: str, args: list[str], table: Sequence[Sequence[str]], step: int) -> float:
    rows = {str(row[0]): row[1:] for row in table if row}
    name = args[0].strip()
    if name not in rows:
        raise ProgramError(f"step {step}: {op} names row {name!r}, which the table does not have")
    values = _row_numbers(rows[name])
    if not values:
        raise ProgramError(f"step {step}: row {name!r} has a cell that is not a number")
    return _TABLE[op](values)


def _args(text: str) -> list[str]:
    """A step's arguments: split at ","; where that gives more than two, at ", "
    as evaluate.py's `program_tokenization` does, so "add(1,234, 5)" is 1234 + 5
    (`str_to_num` drops the thousands comma) and a row name may hold a comma."""
    args = text.split(",")
    if len(args) > 2 and len(text.split(", ")) == 2:
        return text.split(", ")
    return args


def execute(program: str, table: Sequence[Sequence[str]]) -> float | str:
    """The program's result (a float rounded to 5 decimals, or "yes"/"no");
    ProgramError for a program that does not run. A program that is one number
    (ConvFinQA's number-selection turns) is that number."""
    number = to_number(program)
    if number is not None:  # a number-selection turn (ConvFinQA): the program is the number
        return round(number, 5)
    steps = [s for s in re.split(r"\)\s*,", program.strip()) if s.strip()]
    if not steps:
        raise ProgramError("the program is empty")
    results: list = []
    for i, raw in enumerate(steps):
        m = _STEP_RE.fullmatch(raw if raw.rstrip().endswith(")") else raw + ")")
        if m is None:
            raise ProgramError(f"step {i} {raw.strip()!r} is not op(arg1, arg2)")
        op, args = m[1], _args(m[2])
        if len(args) != 2:
            raise ProgramError(f"step {i} {raw.strip()!r} has {len(args)} arguments, not 2")
        try:
            if op in _BINARY:
                a, b = _arg(args[0], results, i), _arg(args[1], results, i)
                if isinstance(a, str) or isinstance(b, str):
                    raise ProgramError(f"step {i} computes with a yes/no result")
                results.append(_BINARY[op](a, b))
            elif op in _TABLE:
                results.append(_table_step(op, args, table, i))
            else:
                raise ProgramError(f"step {i}: unknown operation {op!r}")
        except (ZeroDivisionError, OverflowError) as e:
            raise ProgramError(f"step {i} {raw.strip()!r}: {e}") from None
    last = results[-1]
    if isinstance(last, complex):
        raise ProgramError("the program's result is complex")
    return last if isinstance(last, str) else round(last, 5)
