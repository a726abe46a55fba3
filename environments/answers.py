"""Where a reply's final answer is, and how a prompt asks for it: one module for every grader.

Instruct models (SmolLM2-Instruct, Qwen, Gemma) answer in prose and put their
answer where their fine-tuning taught them to: "So, the answer is -2.", a last
line "Answer: -2", GSM8K's "#### -2", a \\boxed{-2}, or a fenced block for
code. The tiny base writes the answer alone. Every grader takes the final
answer from here, so both are read the same way.

A value (a number, a word, a token, a formula): `final_answer(reply)` looks,
in this order, for
  1. a last line that is a number alone, after other lines;
  2. the last final answer statement: "Answer: ...", "Final answer: ...",
     "The final answer is ...", "The answer is ...", "#### ..." (markdown
     emphasis allowed), whatever boxes come before it; its text runs to the
     end of its line (the next line when the statement ends its line, or
     every line below it for answers of several lines; a display formula or
     a box opened there is kept whole);
  3. the last \\boxed{...} / \\fbox{...};
  4. else the whole reply, which is what the tiny base writes.
`FinalAnswer.value` is that text made plain (`plain`: the box inside it, no
$...$, quotes, backticks, emphasis or trailing period).

A block (a program, a shell command, a JSON object, a CAD script):
`final_block(reply)` is the last fenced block (```lang ... ```; a last fence
the reply never closes runs to its end), else the whole reply.
`final_json(reply)` is the same for one JSON object or list, also found bare
in prose.

Several candidates: a reply that gives several different answers is not
accepted, whichever came last. `FinalAnswer.candidates` holds every answer of
the kind that was chosen: each answer line (a line that starts with a
statement), each box, each fenced block, each JSON value; `several(found)`
is the distinct ones (by a grader's `same` key: `int` for integers, a number
parser for amounts), and `several_feedback` the MALFORMED feedback naming
them. Repeating one answer is fine. `alternatives(value)` splits a value that
offers a choice ("3 or 4", "either yes or no"), for graders whose answer is
one value (not for free text, where "or" may belong to the answer).

The instructions come from here too (`AnswerLine`, `Fenced`): each family
states its answer format with them, and writes its instruct-style
demonstration with the same object, so a prompt never asks for a format its
grader does not read.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Callable, Hashable

__all__ = [
    "AnswerLine", "FinalAnswer", "Fenced", "alternatives", "box_spans", "boxes", "braced", "clean", "final_answer", "final_block",
    "final_json", "last_boxed", "one_value", "plain", "several", "several_feedback",
]

# A final answer statement: Minerva's "Final Answer: The final answer is ...",
# "The answer is ...", "Answer: ..." (also "**Answer:**") and GSM8K's "#### ...".
STATEMENT_RE = re.compile(r"final\s+answer(?:\s+is)?|the\s+answer\s+is|answer\s*\**\s*:|####", re.IGNORECASE)
# The same statement opening a line (markdown list marks, quotes and emphasis before it allowed).
_LINE_START_RE = re.compile(r"^[ \t>*_-]*(?:the\s+final\s+answer\s+is|final\s+answer|the\s+answer\s+is|"
                            r"answer\s*\**\s*:|####)", re.IGNORECASE | re.MULTILINE)
BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_DISPLAY_START_RE = re.compile(r"\$\$.*?\$\$|\\\[.*?\\\]", re.DOTALL)
# A last line that is a number alone ("1,234", "-3.5", "$16", "28%").
NUMBER_LINE_RE = re.compile(
    r"[-−]?\s*(?:\\?[$€£¥])?\s*(?:\d{1,3}(?: \d{3})+|\d[\d,]*)?(?:\.\d+)?\s*(?:\\?[$€£¥%])?")
_FENCE_OPEN_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n`]*$", re.MULTILINE)
_TEXT_WRAP_RE = re.compile(r"^\\(?:text|textbf|textit|mathrm|mathbf|mbox)\s*\{(.*)\}$", re.DOTALL)
# (?<!\s): a match starts only where a run of spaces does, not at each of its
# spaces in turn (quadratic in the run).
_ALTERNATIVE_RE = re.compile(r"(?<!\s)\s+(?:and/)?or\s+", re.IGNORECASE)
MAX_JSON_SCANS = 64  # opening brackets tried when a reply holds JSON inside prose
_JSON_START_RE = re.compile(r"[{\[]")
_BRACE_RE = re.compile(r"[{}]")
# Distinct boxes of one reply that become answer candidates: the last ones.
# Each candidate is read on its own (`plain`), so hundreds of nested boxes would
# cost their count times the reply's length; a box repeated is one candidate,
# so repeating the last answer cannot push an earlier, different one out.
MAX_BOXES = 32


def braced(text: str, start: int) -> str | None:
    """Content of the brace group opening at text[start - 1] ('{'), or None if unbalanced."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def _closing_braces(text: str) -> dict[int, int]:
    """Index of each balanced '{' -> index of its '}', in one pass (what `braced`
    finds for each, without scanning the text again per brace)."""
    close, stack = {}, []
    for match in _BRACE_RE.finditer(text):
        if match.group() == "{":
            stack.append(match.start())
        elif stack:
            close[stack.pop()] = match.start()
    return close


def box_spans(text: str) -> list[tuple[int, int, int]]:
    """(start of the command, start and end of the content) of every balanced
    \\boxed{...} / \\fbox{...} of `text`, in order; linear in the text, so
    a reply of hundreds of nested boxes costs no more than its length."""
    matches = list(BOXED_RE.finditer(text))
    if not matches:
        return []
    close = _closing_braces(text)
    return [(m.start(), m.end(), close[m.end() - 1]) for m in matches if m.end() - 1 in close]


def boxes(text: str) -> list[str]:
    """Contents of every balanced \\boxed{...} / \\fbox{...} of `text`, in order."""
    return [text[start:end] for _, start, end in box_spans(text)]


def last_boxed(text: str) -> str | None:
    """Content of the last balanced \\boxed{...} / \\fbox{...} (nested braces allowed), or None."""
    found = boxes(text)
    return found[-1] if found else None


def clean(candidate: str) -> str:
    """`candidate` without surrounding whitespace, emphasis, one $...$ pair and a trailing period."""
    candidate = candidate.strip().strip("*").strip()
    if len(candidate) >= 2 and candidate[0] == candidate[-1] == "$":
        candidate = candidate.strip("$").strip()
    return candidate.rstrip(".").strip()


def plain(text: str) -> str:
    """The value a final answer's text states, made plain: the last box in it
    if any; the text before a sentence that follows it ("12. I hope it is
    correct." is 12); no emphasis, $...$, quotes, backticks or \\text{} wrapper;
    no trailing period."""
    box = last_boxed(text)
    if box is not None:
        text = box
    text = re.split(r"\.\s|\bI hope\b", text.strip(), maxsplit=1)[0]
    for _ in range(3):  # "**`abc`**", "$\\text{abc}$"
        before = text
        text = clean(text).strip("`\"'“”‘’").strip()
        wrapped = _TEXT_WRAP_RE.match(text)
        if wrapped:
            text = wrapped.group(1).strip()
        if text == before:
            break
    return text


@dataclasses.dataclass(frozen=True)
class FinalAnswer:
    """Where a reply's final answer is.

    source: "statement" (after the last final answer statement, or a last
      line that is a number alone), "boxed" (the line holding the last box),
      "fence" (the last fenced block's body), "json" (a JSON value found in
      prose) or "text" (the whole reply, stripped).
    text: the final answer's text as written there.
    anchor: the statement that introduced it ("Answer:", "####", ...), if any.
    candidates: every answer of the chosen source, made plain (`plain`), in order.
    lang: the fence's language tag ("python", "sh", "" for none).
    """

    source: str
    text: str
    anchor: str = ""
    candidates: tuple[str, ...] = ()
    lang: str = ""

    @property
    def value(self) -> str:
        """The final answer made plain (`plain`); the whole reply as it is for "text" and blocks."""
        return plain(self.text) if self.source in ("statement", "boxed") else self.text


def _statement_text(text: str, start: int, multiline: bool = False) -> str:
    """The answer after a statement ending at `start`: to the end of its line;
    when the statement ends its line, the next non-empty line (`multiline`:
    every line below, up to the next answer line). A display formula or a box
    opened there is kept whole."""
    rest = text[start:]
    rest = rest[len(rest) - len(rest.lstrip(" \t*:")):]
    if rest.startswith("\n") and multiline:
        rest = rest.strip("\n")
        following = _LINE_START_RE.search(rest)
        end = len(rest) if following is None else following.start()
    else:
        rest = rest.lstrip(" \t\n*:")
        end = rest.find("\n")
        end = len(rest) if end < 0 else end
    display = _DISPLAY_START_RE.match(rest)
    if display:
        end = max(end, display.end())
    opened_by = end  # boxes opened before the line's end are kept whole
    for _, start, close in box_spans(rest):
        if start > opened_by:
            break
        end = max(end, close + 1)
    return rest[:end].strip()


def _line_statements(text: str, multiline: bool = False) -> list[str]:
    """The answer of each answer line (a line opening with a statement), made
    plain; for a line holding several statements ("Final Answer: The final
    answer is 3"), the text after its last one."""
    out = []
    for match in _LINE_START_RE.finditer(text):
        line_end = text.find("\n", match.end())
        line_end = len(text) if line_end < 0 else line_end
        last = None
        for last in STATEMENT_RE.finditer(text, match.start(), line_end):
            pass
        if last is not None:
            out.append(plain(_statement_text(text, last.end(), multiline)))
    return out


def final_answer(reply: str, number_line: bool = True, multiline: bool = False) -> FinalAnswer:
    """Where the final value of `reply` is (see the module doc for the order).
    `number_line=False` skips step 1, for answers whose items are lines;
    `multiline=True` reads, after a statement that ends its line, every line
    below it up to the next answer line (an answer of several lines) rather
    than the first."""
    text = reply.strip()
    lines = text.splitlines()
    last = clean(lines[-1]) if lines else ""
    statements = list(STATEMENT_RE.finditer(text))
    answer_lines = tuple(_line_statements(text, multiline))
    if number_line and len(lines) > 1 and re.search(r"\d", last) and NUMBER_LINE_RE.fullmatch(last):
        return FinalAnswer("statement", last, "Answer:", answer_lines + (plain(last),))
    if statements:
        final = statements[-1]
        body = _statement_text(text, final.end(), multiline)
        return FinalAnswer("statement", body, final.group(0), answer_lines + (plain(body),))
    found = boxes(text)
    if found:
        last_box = list(BOXED_RE.finditer(text))[-1]
        line = text[text.rfind("\n", 0, last_box.start()) + 1:]
        distinct = list(dict.fromkeys(found))
        return FinalAnswer("boxed", line, "", tuple(plain(b) for b in distinct[-MAX_BOXES:]))
    return FinalAnswer("text", text, "", (text,))


def _fences(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order; a last fence left open runs to the end."""
    out, pos = [], 0
    while True:
        opening = _FENCE_OPEN_RE.search(text, pos)
        if opening is None:
            return out
        marker, lang = opening.group(1), opening.group(2).lower()
        body_start = opening.end() + 1
        closing = re.compile(r"^[ \t]*" + re.escape(marker[0]) + "{%d,}[ \t]*$" % len(marker), re.MULTILINE)
        close = closing.search(text, body_start) if body_start <= len(text) else None
        if close is None:
            # A closing fence glued to the last line ("...return x```"), else none at all.
            tail = text[body_start:].rstrip()
            body = tail[:-len(marker)] if tail.endswith(marker) else tail
            out.append((lang, body.strip("\n")))
            return out
        out.append((lang, text[body_start:close.start()].strip("\n")))
        pos = close.end()


def final_block(reply: str) -> FinalAnswer:
    """The last fenced block of `reply` ("fence"), else the whole reply ("text")."""
    text = reply.strip()
    fences = _fences(text)
    if not fences:
        return FinalAnswer("text", text, "", (text,))
    lang, body = fences[-1]
    return FinalAnswer("fence", body, "", tuple(b.strip() for _, b in fences), lang)


def _json_values(text: str) -> list[tuple[int, int, Any]]:
    """(start, end, value) of each JSON object or list in prose, outermost only."""
    decoder, out, pos, scans = json.JSONDecoder(), [], 0, 0
    while scans < MAX_JSON_SCANS:
        match = _JSON_START_RE.search(text, pos)
        if match is None:
            break
        scans += 1
        try:
            value, end = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            pos = match.start() + 1
            continue
        if isinstance(value, (dict, list)):
            out.append((match.start(), end, value))
        pos = end
    return out


def final_json(reply: str) -> FinalAnswer:
    """The JSON answer of `reply`: its last fenced block, else the whole reply
    when that is JSON, else the JSON objects or lists written in its prose
    ("json": the last one; each is a candidate), else the whole reply."""
    found = final_block(reply)
    if found.source == "fence":
        return found
    try:
        json.loads(found.text)
        return found
    except (ValueError, RecursionError):
        pass
    values = _json_values(found.text)
    if not values:
        return found
    start, end, _ = values[-1]
    candidates = tuple(json.dumps(v, sort_keys=True) for _, _, v in values)
    return FinalAnswer("json", found.text[start:end], "", candidates)


def several(found: FinalAnswer, same: Callable[[str], Hashable | None] | None = None) -> tuple[str, ...]:
    """The distinct answers among `found.candidates` when there is more than
    one, else (). Two candidates are the same answer when `same` gives both the
    same key (None: not readable, compared as text), or their texts are equal
    ignoring case and spacing."""
    keys: dict[Hashable, str] = {}
    for candidate in found.candidates:
        key = None
        if same is not None:
            try:
                key = same(candidate)
            except (ValueError, TypeError, ArithmeticError):
                key = None
        if key is None:
            key = ("text", " ".join(candidate.split()).casefold())
        keys.setdefault(key, candidate)
    return tuple(keys.values()) if len(keys) > 1 else ()


def _cut(text: str, n: int = 30) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= n else text[:n] + "...")


def several_feedback(answers: tuple[str, ...], where: str = "final answers") -> str:
    """MALFORMED feedback for a reply that gives several different answers."""
    shown = ", ".join(_cut(a) for a in answers[:4]) + (", ..." if len(answers) > 4 else "")
    return f"the reply gives {len(answers)} different {where} ({shown}); give exactly one"


def alternatives(value: str) -> tuple[str, ...]:
    """The choices a one-value answer offers ("3 or 4" -> ("3", "4"), "either
    yes or no" -> ("yes", "no")), or () when it offers none."""
    text = re.sub(r"^either\s+", "", value.strip(), flags=re.IGNORECASE)
    parts = [p.strip(" ,;") for p in _ALTERNATIVE_RE.split(text)]
    return tuple(parts) if len(parts) > 1 and all(parts) else ()


def one_value(found: FinalAnswer, same: Callable[[str], Hashable | None] | None = None) -> str | None:
    """MALFORMED feedback when the reply's final answer is not one value
    (several different answers, or a choice such as "3 or 4"), else None."""
    many = several(found, same)
    if many:
        return several_feedback(many, "final answers" if found.source != "boxed" else "boxed answers")
    choice = alternatives(found.value)
    if choice:
        return several_feedback(choice, "candidate answers")
    return None


# --------------------------------------------------------------- instructions


@dataclasses.dataclass(frozen=True)
class AnswerLine:
    """A value on a last line "Answer: <what>"; `what` names it ("<integer>")."""

    what: str

    def instruction(self, multiline: bool = False) -> str:
        """The format in words; `multiline`: for an answer of several lines, which start below "Answer:"."""
        if multiline:
            return "End your reply with a line `Answer:` followed by your final answer on the lines below it."
        return f"Put your final answer on a last line of the form `Answer: {self.what}`."

    def demonstrate(self, answer: str, work: str = "") -> str:
        """An instruct-style reply: the brief `work`, if any, then the answer line
        (an answer of several lines starts below "Answer:")."""
        line = f"Answer:\n{answer}" if "\n" in answer else f"Answer: {answer}"
        return f"{work.strip()}\n{line}" if work.strip() else line


@dataclasses.dataclass(frozen=True)
class Fenced:
    """A block in one fenced block: `lang` its tag ("python", "sh", "json"),
    `what` the thing asked for ("the function", "one shell command")."""

    lang: str
    what: str

    def instruction(self) -> str:
        return f"Reply with {self.what} in one ```{self.lang} fenced block."

    def demonstrate(self, body: str, work: str = "") -> str:
        block = f"```{self.lang}\n{body.strip(chr(10))}\n```"
        return f"{work.strip()}\n{block}" if work.strip() else block
