"""Tool use: call a calculator, a lookup table and a unit converter, then answer.

Protocol (also stated in every prompt). Each model turn is exactly one JSON
object, either a tool call

    {"tool": "calculator", "args": {"expr": "3*1.25+2*0.80"}}
    {"tool": "lookup", "args": {"key": "apple"}}
    {"tool": "convert", "args": {"value": 2.5, "from": "km", "to": "m"}}

or the final answer

    {"answer": "5.35"}

A tool call is not scored: the env returns reward 0, terminated=False,
truncated=False and the observation "\\nresult: <value>\\n" to append to the
conversation. A turn that is not one JSON object of those shapes gets
"\\nMALFORMED: <why>\\n", and a call that cannot run (unknown tool or key, bad
arguments, division by zero, a result out of range) gets "\\nERROR: <why>\\n";
both are unscored too, so the model can repair them while turns remain. The
final answer is graded like any other domain's answer: numbers within half a
unit of the requested last decimal (plus 1e-9 relative), "$" and "," allowed,
JSON numbers accepted; names exactly, ignoring case. The episode ends with the
graded answer, or truncates with reward 0 when `spec.max_turns` turns (tool
calls included; override with `gymnasium.make(id, max_turns=n)`) are spent.

Tools:
  calculator  `expr`, at most 200 characters: numbers, + - * / // % ** and
              parentheses, parsed with `ast` (never eval'd). Every literal and
              intermediate result must stay within 1e15 in magnitude and a
              power is range-checked *before* it is computed, so the time and
              memory of one call are bounded by the expression length.
  lookup      `key`: one row of the task's table (listed by key in the prompt;
              values hidden), matched ignoring case.
  convert     `value`, `from`, `to`: length, mass, time and temperature, with
              exact (Fraction) factors: 1 in = 0.0254 m, 1 lb = 0.45359237 kg.
A tool is added by registering it: `register_tool(Tool(name, args, run))`.

Variants (each in easy / medium / hard, harder = more rows and more calls):
  calc     arithmetic needing the calculator only.
  shop     total price of items from a price table (lookup + calculator).
  census   compare / subtract / average city populations (lookup [+ calculator]).
  convert  convert, convert and add, or add two quantities in a third unit.
  recipe   price per kg times a weight in g, lb or oz (lookup + convert + calculator).

The instruct style (`prompt_style="instruct"`) states the same protocol and
asks for each turn's JSON object in one ```json fenced block; its
demonstration turns are written so. In either style a turn's JSON is the
reply's last fenced block, else the whole reply, else the one JSON object its
prose holds (`environments.answers.final_json`); a turn holding several
different ones is MALFORMED.

`reset` info carries `demonstration` (the final answer JSON, what a
single-turn policy should emit) and `demonstration_turns` (every turn of a
full tool-using solution, built by running the real tools, for multi-turn
SFT). The split key is the prompt: table values are hidden grading data.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
from fractions import Fraction
from typing import Any, Callable

import numpy as np

from environments import answers, registry
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem, ToolReply, Verdict, failed, malformed, passed

MAX_EXPR_CHARS = 200
MAX_MAGNITUDE = 10**15
# |exponent| bound for `**`, checked before the magnitude estimate so that
# e.g. 1**(10**15) is refused without looping over a huge exponent.
MAX_EXPONENT = 1000
MAX_PROMPT_CHARS = 1024
MAX_ANSWER_CHARS = 256
MAX_INSTRUCT_PROMPT_CHARS = 1280
MAX_INSTRUCT_ANSWER_CHARS = 2048
FENCE = answers.Fenced("json", "that turn's JSON object")
MAX_TURNS = {"easy": 6, "medium": 8, "hard": 10}
_NUMBER_RE = re.compile(r"^[-+]?\$?[0-9][0-9,]*(\.[0-9]+)?$")
# At most 3 exponent digits: Fraction("1e999999999") would build a huge integer.
_VALUE_RE = re.compile(r"^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]{1,3})?$")


class ToolError(Exception):
    """A tool call that cannot run; the message is shown to the model."""


def format_number(x: int | float | Fraction) -> str:
    """Tool-result text: integers exactly, other values to 12 significant digits."""
    if isinstance(x, Fraction):
        x = x.numerator if x.denominator == 1 else float(x)
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    return str(x) if isinstance(x, int) else format(x, ".12g")


# ---------------------------------------------------------------- calculator

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


def _checked(x: int | float) -> int | float:
    if (isinstance(x, float) and not math.isfinite(x)) or abs(x) > MAX_MAGNITUDE:
        raise ToolError(f"result out of range (magnitude above {MAX_MAGNITUDE:.0e})")
    return x


def _power(base: int | float, exp: int | float) -> int | float:
    if abs(exp) > MAX_EXPONENT:
        raise ToolError(f"exponent {format_number(exp)} is out of range (at most {MAX_EXPONENT} in magnitude)")
    if base == 0:
        if exp < 0:
            raise ToolError("division by zero (0 to a negative power)")
        return 1 if exp == 0 else 0
    if base < 0 and not float(exp).is_integer():
        raise ToolError("a negative number to a fractional power is not real")
    # log10 of the result, computed before the power itself.
    if exp * math.log10(abs(base)) > math.log10(MAX_MAGNITUDE):
        raise ToolError(f"result out of range (magnitude above {MAX_MAGNITUDE:.0e})")
    return base**exp


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if type(node.value) not in (int, float):  # bool, complex, str, None, ...
            raise ToolError(f"only numbers are allowed, got {node.value!r}"[:80])
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _checked(_power(left, right))
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise ToolError(f"operator {type(node.op).__name__} is not allowed; use + - * / // % **")
        if right == 0 and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            raise ToolError("division by zero")
        return _checked(op(left, right))
    raise ToolError(f"{type(node).__name__} is not allowed; use numbers, + - * / // % ** and parentheses")


def calculate(expr: str) -> int | float:
    """Value of an arithmetic expression; raises ToolError for anything else."""
    if not isinstance(expr, str):
        raise ToolError(f"calculator: 'expr' must be a string, got {type(expr).__name__}")
    if len(expr) > MAX_EXPR_CHARS:
        raise ToolError(f"calculator: expression has {len(expr)} characters; at most {MAX_EXPR_CHARS}")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ToolError(f"calculator: cannot parse {expr[:40]!r}") from None
    try:
        return _eval(tree)
    except RecursionError:
        raise ToolError("calculator: expression is nested too deeply") from None
    except (ArithmeticError, TypeError):  # float overflow and the like, despite the checks
        raise ToolError(f"result out of range (magnitude above {MAX_MAGNITUDE:.0e})") from None


# ------------------------------------------------------------------- convert

# unit -> (dimension, factor to the dimension's base unit); exact by definition.
_UNITS: dict[str, tuple[str, Fraction]] = {
    "mm": ("length", Fraction(1, 1000)),
    "cm": ("length", Fraction(1, 100)),
    "m": ("length", Fraction(1)),
    "km": ("length", Fraction(1000)),
    "in": ("length", Fraction("0.0254")),
    "ft": ("length", Fraction("0.3048")),
    "yd": ("length", Fraction("0.9144")),
    "mi": ("length", Fraction("1609.344")),
    "mg": ("mass", Fraction(1, 10**6)),
    "g": ("mass", Fraction(1, 1000)),
    "kg": ("mass", Fraction(1)),
    "t": ("mass", Fraction(1000)),
    "lb": ("mass", Fraction("0.45359237")),
    "oz": ("mass", Fraction("0.45359237") / 16),
    "ms": ("time", Fraction(1, 1000)),
    "s": ("time", Fraction(1)),
    "min": ("time", Fraction(60)),
    "h": ("time", Fraction(3600)),
    "d": ("time", Fraction(86400)),
    "C": ("temperature", Fraction(1)),
    "F": ("temperature", Fraction(5, 9)),
    "K": ("temperature", Fraction(1)),
}
_UNIT_BY_LOWER = {u.lower(): u for u in _UNITS}
_UNIT_LIST = " ".join(_UNITS)
# Temperatures are affine: kelvin = (value - offset) * factor + zero.
_TEMP_AFFINE = {"C": (Fraction(0), Fraction("273.15")), "F": (Fraction(32), Fraction("273.15")), "K": (Fraction(0), Fraction(0))}


def _unit(name: Any, role: str) -> str:
    unit = _UNIT_BY_LOWER.get(name.lower()) if isinstance(name, str) else None
    if unit is None:
        raise ToolError(f"convert: unknown unit {str(name)[:20]!r} for {role!r}; units: {_UNIT_LIST}")
    return unit


def _exact(value: Any) -> Fraction:
    """A JSON number or numeric string, exactly as written."""
    if type(value) in (int, float):
        if not math.isfinite(value):
            raise ToolError("convert: 'value' must be finite")
        exact = Fraction(value) if isinstance(value, int) else Fraction(repr(value))
    elif isinstance(value, str) and len(value) <= 40 and _VALUE_RE.match(value.strip()):
        exact = Fraction(value.strip())
    else:
        raise ToolError(f"convert: 'value' must be a number, got {str(value)[:20]!r}")
    if abs(exact) > MAX_MAGNITUDE:
        raise ToolError(f"convert: 'value' out of range (magnitude above {MAX_MAGNITUDE:.0e})")
    return exact


def convert(value: Any, src: Any, dst: Any) -> Fraction:
    """Exact `value` in unit `src`, expressed in unit `dst` (same dimension)."""
    x, src, dst = _exact(value), _unit(src, "from"), _unit(dst, "to")
    (dim_a, fa), (dim_b, fb) = _UNITS[src], _UNITS[dst]
    if dim_a != dim_b:
        raise ToolError(f"convert: cannot convert {dim_a} ({src}) to {dim_b} ({dst})")
    if dim_a == "temperature":
        (off_a, zero_a), (off_b, zero_b) = _TEMP_AFFINE[src], _TEMP_AFFINE[dst]
        result = ((x - off_a) * fa + zero_a - zero_b) / fb + off_b
    else:
        result = x * fa / fb
    if abs(result) > MAX_MAGNITUDE:
        raise ToolError(f"convert: result out of range (magnitude above {MAX_MAGNITUDE:.0e})")
    return result


# ----------------------------------------------------------------- protocol


@dataclasses.dataclass(frozen=True)
class Table:
    """A task's lookup table: `title` and keys are shown, values are hidden."""

    title: str
    rows: tuple[tuple[str, str], ...]

    def lookup(self, key: Any) -> str:
        if not isinstance(key, str):
            raise ToolError(f"lookup: 'key' must be a string, got {type(key).__name__}")
        if not self.rows:
            raise ToolError("lookup: this task has no table")
        wanted = key.strip().lower()
        for k, v in self.rows:
            if k.lower() == wanted:
                return v
        raise ToolError(f"lookup: unknown key {key[:30]!r}; keys: {', '.join(k for k, _ in self.rows)}")


_NO_TABLE = Table("none", ())


@dataclasses.dataclass(frozen=True)
class Tool:
    """One tool the model may call: its name, the exact argument names a call must
    give, and `run(table, args) -> result text` (raising ToolError with a message for
    the model). `register_tool` adds one; the protocol, parsing and error replies
    are the same for every tool."""

    name: str
    args: tuple[str, ...]
    run: Callable[[Table, dict[str, Any]], str]


_TOOLS: dict[str, Tool] = {}


def register_tool(tool: Tool) -> Tool:
    if tool.name in _TOOLS:
        raise ValueError(f"tool {tool.name!r} is already registered")
    if not tool.name.isidentifier() or not tool.args or len(set(tool.args)) != len(tool.args):
        raise ValueError(f"tool {tool.name!r}: a name like an identifier and distinct argument names, got {tool.args!r}")
    _TOOLS[tool.name] = tool
    return tool


def tool_names() -> tuple[str, ...]:
    return tuple(_TOOLS)


register_tool(Tool("calculator", ("expr",), lambda table, a: format_number(calculate(a["expr"]))))
register_tool(Tool("lookup", ("key",), lambda table, a: table.lookup(a["key"])))
register_tool(Tool("convert", ("value", "from", "to"),
                   lambda table, a: format_number(convert(a["value"], a["from"], a["to"]))))


def run_tool(table: Table, tool: str, args: dict[str, Any]) -> str:
    """Result text of one tool call; raises ToolError with a message for the model."""
    spec = _TOOLS.get(tool)
    if spec is None:
        raise ToolError(f"unknown tool {tool[:30]!r}; tools: {', '.join(_TOOLS)}")
    if set(args) != set(spec.args):
        want = ", ".join(repr(a) for a in spec.args)
        got = ", ".join(repr(a[:20]) for a in args) or "none"
        raise ToolError(f"{tool}: arguments must be exactly {want}; got {got}")
    return spec.run(table, args)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_turn(text: str) -> dict[str, Any] | ToolReply:
    """The turn's JSON object (a tool call or an answer), or a MALFORMED reply.
    The object is the reply's last fenced block, else the whole reply, else
    the one JSON object in its prose (`answers.final_json`)."""
    example = 'expected one JSON object: {"tool": ..., "args": {...}} or {"answer": "..."}'
    found = answers.final_json(text)
    many = answers.several(found)
    if many:
        return ToolReply(Verdict.MALFORMED, answers.several_feedback(many, "JSON objects" if found.source == "json"
                                                                     else "fenced blocks") + " per turn")
    text = found.text
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return ToolReply(Verdict.MALFORMED, f"not valid JSON; {example}")
    if not isinstance(obj, dict):
        return ToolReply(Verdict.MALFORMED, example)
    if "answer" in obj:
        if set(obj) != {"answer"}:
            return ToolReply(Verdict.MALFORMED, 'a final answer must be exactly {"answer": "..."}')
        return obj
    if "tool" not in obj or not set(obj) <= {"tool", "args"}:
        return ToolReply(Verdict.MALFORMED, example)
    if not isinstance(obj["tool"], str):
        return ToolReply(Verdict.MALFORMED, '"tool" must be a string naming one of: ' + ", ".join(_TOOLS))
    if not isinstance(obj.get("args"), dict):
        return ToolReply(Verdict.MALFORMED, '"args" must be a JSON object, e.g. {"expr": "1+2"}', obj["tool"][:30])
    return obj


# -------------------------------------------------------------------- tasks


@dataclasses.dataclass(frozen=True)
class Answer:
    """Reference answer. decimals=None: a name, compared ignoring case."""

    value: str
    exact: Fraction | None = None
    decimals: int | None = None


@dataclasses.dataclass(frozen=True)
class Hidden:
    table: Table
    answer: Answer


def _rounded(x: Fraction, decimals: int) -> Answer:
    text = f"{float(round(x, decimals)):.{decimals}f}"
    return Answer(text, x, decimals)


class _Transcript:
    """Builds a demonstration by running the real tools, so replaying its
    turns through the env reproduces exactly the results it used."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.turns: list[str] = []

    def call(self, tool: str, **args: Any) -> str:
        if tool == "convert":
            args = {"value": args["value"], "from": args["src"], "to": args["dst"]}
        self.turns.append(json.dumps({"tool": tool, "args": args}))
        return run_tool(self.table, tool, args)

    def answer(self, answer: Answer) -> tuple[str, ...]:
        self.turns.append(json.dumps({"answer": answer.value}))
        return tuple(self.turns)


# A generator returns (question, table, reference answer, demonstration turns).
Gen = Callable[[np.random.Generator, str], tuple[str, Table, Answer, tuple[str, ...]]]
_SIZES = {"easy": 0, "medium": 1, "hard": 2}


def _int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _pick(rng: np.random.Generator, items: tuple[str, ...], n: int) -> list[str]:
    return [items[i] for i in rng.choice(len(items), size=n, replace=False)]


def _calc(rng: np.random.Generator, difficulty: str):
    # The reference is Python's own integer arithmetic, independent of the tool.
    if difficulty == "easy":
        a, b = _int(rng, 100, 9999), _int(rng, 100, 9999)
        expr, value = f"{a}*{b}", a * b
    elif difficulty == "medium":
        a, b, c, d = _int(rng, 100, 9999), _int(rng, 100, 999), _int(rng, 100, 99999), _int(rng, 7, 997)
        expr, value = f"({a}*{b}-{c})%{d}", (a * b - c) % d
    else:
        a, k, b = _int(rng, 11, 99), _int(rng, 3, 5), _int(rng, 3, 999)
        c, d = _int(rng, 10, 999), _int(rng, 10, 999)
        expr, value = f"{a}**{k}//{b}+{c}*{d}", a**k // b + c * d
    t = _Transcript(_NO_TABLE)
    t.call("calculator", expr=expr)
    answer = Answer(str(value), Fraction(value), 0)
    return f"Compute {expr}. Answer with an integer.", _NO_TABLE, answer, t.answer(answer)


_PRODUCTS = ("apple", "pear", "plum", "fig", "lemon", "mango", "peach", "kiwi", "melon", "lime", "orange", "bagel", "muffin", "candle", "pencil", "notebook")


def _plural(word: str, n: int) -> str:
    if n == 1:
        return word
    return word + ("es" if word.endswith(("ch", "sh", "o")) else "s")


def _shop(rng: np.random.Generator, difficulty: str):
    rows_n, asked_n, q_hi = ((3, 2, 9), (5, 3, 9), (8, 4, 19))[_SIZES[difficulty]]
    names = _pick(rng, _PRODUCTS, rows_n)
    cents = [_int(rng, 25, 999) for _ in names]
    table = Table("price in $ per item", tuple((n, f"{c / 100:.2f}") for n, c in zip(names, cents)))
    order = [int(i) for i in rng.permutation(rows_n)[:asked_n]]
    qty = [_int(rng, 1, q_hi) for _ in order]
    t = _Transcript(table)
    prices = [t.call("lookup", key=names[i]) for i in order]
    t.call("calculator", expr="+".join(f"{q}*{p}" for q, p in zip(qty, prices)))
    answer = _rounded(sum((Fraction(q * cents[i], 100) for q, i in zip(qty, order)), Fraction(0)), 2)
    items = [f"{q} {_plural(names[i], q)}" for q, i in zip(qty, order)]
    listed = ", ".join(items[:-1]) + f" and {items[-1]}"
    return f"What is the total price in $ of {listed}? Answer with 2 decimals.", table, answer, t.answer(answer)


_CITIES = ("Arden", "Brookfield", "Cedar Falls", "Dunmore", "Eastport", "Fairview", "Glenwood", "Harbor City", "Ironton", "Juniper", "Kingsley", "Lakemont", "Millbrook", "Northgate", "Oakridge", "Pinecrest", "Riverton", "Silverton", "Westfield", "Yarrow")


def _census(rng: np.random.Generator, difficulty: str):
    rows_n = (3, 5, 8)[_SIZES[difficulty]]
    names = _pick(rng, _CITIES, rows_n)
    pops: list[int] = []
    while len(pops) < rows_n:  # distinct, so "which is larger" has one answer
        p = _int(rng, 20_000, 5_000_000)
        if p not in pops:
            pops.append(p)
    table = Table("population by city", tuple((n, str(p)) for n, p in zip(names, pops)))
    t = _Transcript(table)
    if difficulty == "hard":
        idx = [int(i) for i in rng.permutation(rows_n)[:4]]
        got = [t.call("lookup", key=names[i]) for i in idx]
        t.call("calculator", expr=f"({'+'.join(got)})/4")
        answer = _rounded(Fraction(sum(pops[i] for i in idx), 4), 2)
        listed = ", ".join(names[i] for i in idx[:3]) + f" and {names[idx[3]]}"
        return f"What is the average population of {listed}? Answer with 2 decimals.", table, answer, t.answer(answer)
    a, b = (int(i) for i in rng.permutation(rows_n)[:2])
    got = [t.call("lookup", key=names[a]), t.call("lookup", key=names[b])]
    if difficulty == "easy":
        answer = Answer(names[a] if pops[a] > pops[b] else names[b])
        return f"Which city has more people, {names[a]} or {names[b]}? Answer with its name.", table, answer, t.answer(answer)
    if pops[a] < pops[b]:
        a, b, got = b, a, got[::-1]
    t.call("calculator", expr=f"{got[0]}-{got[1]}")
    answer = _rounded(Fraction(pops[a] - pops[b]), 0)
    return f"How many more people live in {names[a]} than in {names[b]}? Answer with an integer.", table, answer, t.answer(answer)


# Sensible (from, to) pairs per dimension for single conversions.
_PAIRS = {
    "length": (("km", "m"), ("m", "cm"), ("mi", "km"), ("ft", "m"), ("in", "cm"), ("yd", "m"), ("m", "ft"), ("km", "mi"), ("cm", "in")),
    "mass": (("kg", "g"), ("lb", "kg"), ("oz", "g"), ("kg", "lb"), ("t", "kg"), ("g", "oz")),
    "time": (("h", "min"), ("min", "s"), ("d", "h"), ("h", "s"), ("s", "ms"), ("min", "h")),
    "temperature": (("C", "F"), ("F", "C"), ("C", "K"), ("K", "C")),
}
# (target, sources) for sums of two quantities.
_SUM_UNITS = {"length": ("m", ("km", "ft", "yd", "cm", "mi")), "mass": ("kg", ("g", "lb", "oz", "t")), "time": ("min", ("h", "s", "d"))}


def _quantity(rng: np.random.Generator) -> str:
    """A value as written in the question: 1 to 3 digits, maybe one decimal."""
    whole = _int(rng, 1, 999)
    return str(whole) if rng.random() < 0.5 else f"{whole // 10 + 1}.{_int(rng, 1, 9)}"


def _convert(rng: np.random.Generator, difficulty: str):
    t = _Transcript(_NO_TABLE)
    if difficulty == "hard":
        dim = ("length", "mass", "time")[_int(rng, 0, 2)]
        target, sources = _SUM_UNITS[dim]
        u1, u2 = _pick(rng, sources, 2)
        x1, x2 = _quantity(rng), _quantity(rng)
        r1 = t.call("convert", value=_json_number(x1), src=u1, dst=target)
        r2 = t.call("convert", value=_json_number(x2), src=u2, dst=target)
        t.call("calculator", expr=f"{r1}+{r2}")
        answer = _rounded(convert(x1, u1, target) + convert(x2, u2, target), 2)
        question = f"What is {x1} {u1} plus {x2} {u2}, in {target}? Answer with 2 decimals."
        return question, _NO_TABLE, answer, t.answer(answer)
    dims = tuple(_PAIRS) if difficulty == "easy" else ("length", "mass", "time")
    dim = dims[_int(rng, 0, len(dims) - 1)]
    src, dst = _PAIRS[dim][_int(rng, 0, len(_PAIRS[dim]) - 1)]
    x = _quantity(rng)
    r = t.call("convert", value=_json_number(x), src=src, dst=dst)
    if difficulty == "easy":
        answer = _rounded(convert(x, src, dst), 2)
        return f"Convert {x} {src} to {dst}. Answer with 2 decimals.", _NO_TABLE, answer, t.answer(answer)
    extra = _int(rng, 1, 999)
    t.call("calculator", expr=f"{r}+{extra}")
    answer = _rounded(convert(x, src, dst) + extra, 2)
    question = f"Convert {x} {src} to {dst} and add {extra} {dst}. Answer with 2 decimals."
    return question, _NO_TABLE, answer, t.answer(answer)


def _json_number(text: str) -> int | float:
    return float(text) if "." in text else int(text)


_GOODS = ("rice", "flour", "sugar", "coffee", "tea", "salt", "oats", "beans", "lentils", "cocoa", "butter", "cheese")


def _weight(rng: np.random.Generator, unit: str) -> str:
    if unit == "g":
        return str(_int(rng, 2, 40) * 50)
    if unit == "oz":
        return str(_int(rng, 2, 48))
    return _quantity(rng) if rng.random() < 0.3 else str(_int(rng, 1, 12))


def _recipe(rng: np.random.Generator, difficulty: str):
    rows_n = (3, 5, 8)[_SIZES[difficulty]]
    names = _pick(rng, _GOODS, rows_n)
    cents = [_int(rng, 100, 2999) for _ in names]
    table = Table("price in $ per kg", tuple((n, f"{c / 100:.2f}") for n, c in zip(names, cents)))
    n_items = 2 if difficulty == "hard" else 1
    units = {"easy": ("g",), "medium": ("lb", "oz"), "hard": ("g", "lb", "oz")}[difficulty]
    t = _Transcript(table)
    order = [int(i) for i in rng.permutation(rows_n)[:n_items]]
    terms, total, items = [], Fraction(0), []
    for i in order:
        unit = units[_int(rng, 0, len(units) - 1)]
        w = _weight(rng, unit)
        price = t.call("lookup", key=names[i])
        kg = t.call("convert", value=_json_number(w), src=unit, dst="kg")
        terms.append(f"{kg}*{price}")
        total += convert(w, unit, "kg") * Fraction(cents[i], 100)
        items.append(f"{w} {unit} of {names[i]}")
    t.call("calculator", expr="+".join(terms))
    answer = _rounded(total, 2)
    what = " and ".join(items) + (" together" if n_items > 1 else "")
    return f"What do {what} cost in $? Answer with 2 decimals.", table, answer, t.answer(answer)


VARIANTS: dict[str, Gen] = {"calc": _calc, "shop": _shop, "census": _census, "convert": _convert, "recipe": _recipe}

_HEADER = (
    "Tools: calculator {\"expr\": \"(2+3)*4\"} (numbers, + - * / // % ** and parentheses); "
    "lookup {\"key\": \"...\"} (the table below, values hidden); "
    "convert {\"value\": 2.5, \"from\": \"km\", \"to\": \"m\"} (units: " + _UNIT_LIST + ").\n"
    "Each turn write one JSON object: a tool call such as {\"tool\": \"calculator\", \"args\": {\"expr\": \"6*7\"}}, "
    "answered with a line \"result: ...\" (or \"ERROR: ...\" / \"MALFORMED: ...\" to fix), "
    "or your final answer such as {\"answer\": \"42\"}.\n"
)
# The instruct style: the same protocol, each turn's object in a ```json block.
_INSTRUCT_HEADER = _HEADER + f"Each turn, {FENCE.instruction()[0].lower()}{FENCE.instruction()[1:]}\n"


def _parse_answer_number(value: Any) -> float | None:
    if type(value) in (int, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and _NUMBER_RE.match(value.strip()):
        return float(value.strip().replace("$", "").replace(",", ""))
    return None


class ToolsDomain(Domain):
    """One variant x difficulty; grade() runs tool calls and grades answers."""

    def __init__(self, spec: DomainSpec, variant: str, difficulty: str) -> None:
        self.spec = spec
        self._generate = VARIANTS[variant]
        self._difficulty = difficulty
        self.answer_format = 'one JSON object: {"tool": ..., "args": {...}} or {"answer": "..."}'

    def sample(self, rng: np.random.Generator) -> Problem:
        question, table, answer, turns = self._generate(rng, self._difficulty)
        keys = ", ".join(k for k, _ in table.rows) if table.rows else "(no table for this task)"
        prompt = f"{_HEADER}Table ({table.title}): {keys}\nQ: {question}\n"
        fenced = tuple(FENCE.demonstrate(turn) for turn in turns)
        instruct = Instruct(prompt=f"{_INSTRUCT_HEADER}Table ({table.title}): {keys}\nQuestion: {question}\n",
                            demonstration=fenced[-1], demonstration_turns=fenced)
        return Problem(
            key=f"tools:{prompt}",
            prompt=prompt,
            demonstration=turns[-1],
            hidden=Hidden(table, answer),
            demonstration_turns=turns,
            instruct=instruct,
        )

    def grade(self, task: Problem, answer: str) -> Grade | ToolReply:
        turn = parse_turn(answer)
        if isinstance(turn, ToolReply):
            return turn
        if "answer" in turn:
            return self._grade_answer(task.hidden.answer, turn["answer"])
        tool = turn["tool"][:30]
        try:
            return ToolReply(Verdict.TOOL, run_tool(task.hidden.table, turn["tool"], turn["args"]), tool)
        except ToolError as e:
            return ToolReply(Verdict.ERROR, str(e), tool if tool in _TOOLS else "")

    @staticmethod
    def _grade_answer(ref: Answer, got: Any) -> Grade:
        if ref.decimals is None:
            if not isinstance(got, str) or not got.strip():
                return malformed('expected a name as a string, e.g. {"answer": "Arden"}')
            return passed() if got.strip().lower() == ref.value.lower() else failed("wrong answer")
        value = _parse_answer_number(got)
        if value is None:
            return malformed(f'expected a number, e.g. {{"answer": "12.5"}}, got {str(got)[:20]!r}')
        want = float(ref.exact)
        tol = 0.5 * 10.0**-ref.decimals * (1 + 1e-9) + 1e-9 * abs(want)
        return passed() if abs(value - want) <= tol else failed("wrong answer")


def _register() -> None:
    for variant in VARIANTS:
        for difficulty in registry.DIFFICULTIES:
            spec = DomainSpec(
                id=f"rlpt/tools-{variant}-{difficulty}-v0",
                family="tools",
                difficulty=difficulty,
                tags=("tools", "multi-turn", "json", variant),
                max_prompt_chars=MAX_PROMPT_CHARS,
                max_answer_chars=MAX_ANSWER_CHARS,
                description=f"{variant} task solved with JSON tool calls (calculator, lookup, convert)",
                max_turns=MAX_TURNS[difficulty],
                max_instruct_prompt_chars=MAX_INSTRUCT_PROMPT_CHARS,
                max_instruct_answer_chars=MAX_INSTRUCT_ANSWER_CHARS,
            )
            registry.register(ToolsDomain(spec, variant, difficulty))


_register()
