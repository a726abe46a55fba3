"""FinQA, TAT-QA and ConvFinQA rows, read from their files as published.

* FinQA (czyssrs/FinQA, MIT): `dataset/{train,dev,test}.json`, a list of
  reports with `pre_text`, `table`, `post_text`, `id` and `qa` (`question`,
  `program`, `exe_ans`, `answer`). The reference is `qa.exe_ans`; the row is
  kept only if executing `qa.program` (`environments.finance.program`) gives
  it. A percentage question (its `qa.answer` ends in "%") also takes
  14.1 for 0.141.
* TAT-QA (NExTplusplus/TAT-QA, MIT): `dataset_raw/tatqa_dataset_{train,dev}.json`
  (or `tatqa_dataset_test_gold.json`), a list of {`table`: {`table`: rows},
  `paragraphs`: [{`text`}], `questions`: [{`uid`, `question`, `answer`,
  `answer_type`, `scale`}]}; one task per question. span / multi-span /
  arithmetic / count answers, in the question's `scale`.
* ConvFinQA (czyssrs/ConvFinQA, MIT): `data.zip` or its unzipped folder (its
  `train.json` and `dev.json`, conversation level) or one of its JSON files,
  conversation or turn level (`*_turn.json`); one task per turn, the earlier turns shown with
  their published answers. The reference is `exe_ans_list[turn]` (`exe_ans`),
  checked against `turn_program[turn]`.

A file problem (not JSON, not a list, a row that is not an object) raises
ValueError naming the file. A row whose reference cannot be graded is refused
alone (`Refused`: where, id, reason). Splits: a file whose name says train is
train, any other (dev, test) eval.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import zipfile
from typing import Any, Iterator, Sequence

from environments.datasets import Refused
from environments.finance import program
from environments.finance.answers import Reference, demonstrate, demonstrate_instruct, instruction
from environments.finance.numbers import SCALES, parse_number
from environments.verdicts import Instruct, Problem

SOURCES = ("finqa", "tatqa", "convfinqa")
_CONVERSATIONS = ("train.json", "dev.json")  # ConvFinQA's conversation-level files (its *_turn.json repeat them)


@dataclasses.dataclass(frozen=True)
class Row:
    """One gradable task of a source, its split ("train" / "eval") and its
    published answer as the file writes it (as text; a list as JSON)."""

    task: Problem
    split: str
    published: str = ""


def render_table(rows: Sequence[Sequence[Any]]) -> str:
    """A table as text, one row a line, cells separated by " | "."""
    return "\n".join(" | ".join(" ".join(str(c).split()) for c in row) for row in rows)


def prompt(context: Sequence[str], question: str, ref: Reference, history: Sequence[tuple[str, str]] = ()) -> str:
    turns = "".join(f"Q: {q}\nA: {a}\n" for q, a in history)
    body = "\n\n".join(part for part in context if part.strip())
    return f"{body}\n\n{turns}Q: {question}\nAnswer with {ref.answer_format}.\nA: "


def instruct_prompt(context: Sequence[str], question: str, ref: Reference,
                    history: Sequence[tuple[str, str]] = ()) -> str:
    """The instruct prompt style's prompt: the context, the earlier questions with
    their answers, the question, its answer format in words."""
    turns = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in history)
    body = "\n\n".join(part for part in context if part.strip())
    return f"{body}\n\n{turns}Question: {question}\nAnswer with {ref.answer_format}. {instruction(ref)}"


def task(key: str, context: Sequence[str], question: str, ref: Reference,
         history: Sequence[tuple[str, str]] = ()) -> Problem:
    """A row's task in both prompt styles."""
    instruct = Instruct(instruct_prompt(context, question, ref, history), demonstrate_instruct(ref))
    return Problem(key=key, prompt=prompt(context, question, ref, history), demonstration=demonstrate(ref),
                   hidden=ref, retry_cue="A: ", instruct=instruct)


def _split_of(name: str) -> str:
    return "train" if "train" in name.lower() else "eval"


def _json_list(name: str, raw: bytes) -> list:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{name}: not a JSON file ({e})") from None
    if not isinstance(data, list):
        raise ValueError(f"{name}: expected a JSON list of rows, got {type(data).__name__}")
    return data


def _files(path: pathlib.Path, source: str) -> Iterator[tuple[str, list]]:
    """(name, rows) of each file `path` names: a JSON file, a folder of them, or a zip."""
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder (give the {source} file, folder or data.zip)")
    if path.is_dir():
        names = sorted(p for p in path.glob("*.json") if "private" not in p.name and "predict" not in p.name)
        if source == "convfinqa" and any(p.name in _CONVERSATIONS for p in names):
            names = [p for p in names if p.name in _CONVERSATIONS]  # data.zip unzipped: not its *_turn.json again
        if not names:
            raise ValueError(f"{path}: no .json files in the folder")
        for p in names:
            yield p.name, _json_list(str(p), p.read_bytes())
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            members = sorted(n for n in z.namelist() if pathlib.PurePath(n).name in _CONVERSATIONS)
            if not members:
                raise ValueError(f"{path}: the zip holds no train.json or dev.json")
            for n in members:
                yield n, _json_list(f"{path}:{n}", z.read(n))
    else:
        yield path.name, _json_list(str(path), path.read_bytes())


def _number_ref(value: Any, unit: str = "") -> Reference:
    if isinstance(value, str) and value.strip().lower() in ("yes", "no"):
        return Reference("yesno", value.strip().lower())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        parsed = parse_number(str(value)) if isinstance(value, str) else None
        if parsed is None or parsed.unit:
            raise ValueError(f"answer {value!r} is not a number or yes/no")
        value = parsed.value
    return Reference("number", float(value) * SCALES[unit], unit)


def _checked(prog: Any, table: Any, ref: Reference, field: str) -> None:
    """ValueError unless the published program executes to the reference."""
    if not isinstance(prog, str) or not prog.strip():
        raise ValueError(f"no program in {field}")
    try:
        got = program.execute(prog, table)
    except program.ProgramError as e:
        raise ValueError(f"{field} does not execute: {e}") from None
    want = ref.value
    if isinstance(got, str) or isinstance(want, str):
        if got != want:
            raise ValueError(f"{field} gives {got!r}, the published answer is {want!r}")
    elif abs(got - want) > max(1e-5, 1e-6 * abs(want)):
        raise ValueError(f"{field} gives {got!r}, the published answer is {want!r}")


def _context(entry: dict) -> list[str]:
    def text(key: str) -> str:
        value = entry.get(key) or []
        return "\n".join(str(s).strip() for s in value if str(s).strip() and str(s).strip() != ".")
    table = entry.get("table")
    if not isinstance(table, list) or not all(isinstance(r, list) for r in table):
        raise ValueError("field 'table' is not a list of rows")
    return [text("pre_text"), render_table(table), text("post_text")]


def _finqa_row(name: str, entry: dict) -> Row:
    qa = entry.get("qa")
    if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
        raise ValueError("no 'qa' object with a 'question'")
    if qa.get("exe_ans") is None:
        raise ValueError("no published answer (qa.exe_ans)")
    ref = _number_ref(qa["exe_ans"])
    if ref.kind == "number" and str(qa.get("answer", "")).strip().endswith("%"):
        ref = dataclasses.replace(ref, unit="percent")
    _checked(qa.get("program"), entry.get("table"), ref, "qa.program")
    row = task(f"finqa:{entry.get('id')}", _context(entry), qa["question"], ref)
    return Row(row, _split_of(name), str(qa["exe_ans"]))


def _span_ref(text: str, scale: str) -> Reference:
    """A span that is a number is graded as a number in the question's scale."""
    number = parse_number(text)
    if number is None:
        return Reference("span", text)
    if number.unit:
        return Reference("number", number.base, number.unit)
    return Reference("number", number.value * SCALES[scale], scale)


def _tatqa_ref(q: dict) -> Reference:
    kind, answer, scale = q.get("answer_type"), q.get("answer"), q.get("scale") or ""
    if answer is None or answer == "" or answer == []:
        raise ValueError("no published answer")
    if scale not in SCALES:
        raise ValueError(f"scale {scale!r} is not one of {sorted(SCALES)}")
    if kind in ("span", "multi-span"):
        if not isinstance(answer, list) or not answer or not all(isinstance(a, (str, int, float)) for a in answer):
            raise ValueError(f"a {kind} answer must be a list of texts, got {answer!r:.60}")
        spans = tuple(_span_ref(str(a), scale) for a in answer)
        return spans[0] if kind == "span" and len(spans) == 1 else Reference("spans", spans)
    if kind == "count":
        if isinstance(answer, bool) or not isinstance(answer, (int, float, str)) or not str(answer).strip().isdigit():
            raise ValueError(f"a count answer must be a whole number, got {answer!r}")
        return Reference("count", float(int(str(answer).strip())))
    if kind == "arithmetic":
        return _number_ref(answer, scale)
    raise ValueError(f"answer_type {kind!r} is not span, multi-span, arithmetic or count")


def _tatqa_rows(name: str, entry: dict) -> Iterator[tuple[str, str | None, Row | str]]:
    table = (entry.get("table") or {}).get("table")
    if not isinstance(table, list):
        yield "", None, "field 'table.table' is not a list of rows"
        return
    paragraphs = sorted(entry.get("paragraphs") or [], key=lambda p: p.get("order", 0))
    context = [render_table(table), "\n".join(str(p.get("text", "")).strip() for p in paragraphs)]
    for j, q in enumerate(entry.get("questions") or [], 1):
        uid = q.get("uid") if isinstance(q, dict) else None
        try:
            if not isinstance(q, dict) or not isinstance(q.get("question"), str):
                raise ValueError("no 'question' text")
            ref = _tatqa_ref(q)
        except ValueError as e:
            yield f"question {j}", uid, str(e)
            continue
        answer = q["answer"]
        published = json.dumps(answer) if isinstance(answer, list) and len(answer) > 1 else (
            str(answer[0]) if isinstance(answer, list) else str(answer))
        yield f"question {j}", uid, Row(task(f"tatqa:{uid}", context, q["question"], ref), _split_of(name), published)


def _turns(entry: dict) -> Iterator[tuple[int, list, list, Any]]:
    """(turn index, questions up to it, published answers, turn program) of each turn to grade."""
    ann = entry.get("annotation")
    if not isinstance(ann, dict):
        raise ValueError("no 'annotation' object")
    dialogue, answers, programs = ann.get("dialogue_break"), ann.get("exe_ans_list"), ann.get("turn_program")
    if not (isinstance(dialogue, list) and isinstance(answers, list) and isinstance(programs, list)
            and len(dialogue) == len(answers) == len(programs)):
        raise ValueError("annotation.dialogue_break, exe_ans_list and turn_program are not lists of one length")
    if "cur_dial" in entry:  # a turn-level file: this entry's turn only
        turn = entry.get("turn_ind")
        if not isinstance(turn, int) or not 0 <= turn < len(dialogue):
            raise ValueError(f"turn_ind {turn!r} is not a turn of the conversation")
        answers = answers[:turn] + [entry.get("exe_ans", answers[turn])]  # the entry's own answer
        yield turn, dialogue[: turn + 1], answers, entry.get("cur_program", programs[turn])
        return
    for turn in range(len(dialogue)):
        yield turn, dialogue[: turn + 1], answers, programs[turn]


def _convfinqa_rows(name: str, entry: dict) -> Iterator[tuple[str, str | None, Row | str]]:
    ident = entry.get("id")
    try:
        context = _context(entry)
        turns = list(_turns(entry))
    except ValueError as e:
        yield "", ident, str(e)
        return
    for turn, questions, answers, prog in turns:
        where = f"turn {turn}"
        try:
            ref = _number_ref(answers[turn])
            _checked(prog, entry.get("table"), ref, f"turn_program[{turn}]")
        except ValueError as e:
            yield where, f"{ident}#{turn}", str(e)
            continue
        history = [(str(q), _shown(a)) for q, a in zip(questions[:-1], answers)]
        row = task(f"convfinqa:{ident}#{turn}", context, str(questions[-1]), ref, history)
        yield where, f"{ident}#{turn}", Row(row, _split_of(name), str(answers[turn]))


def _shown(answer: Any) -> str:
    try:
        return demonstrate(_number_ref(answer))
    except ValueError:
        return str(answer)


def _entry_rows(source: str, name: str, entry: Any) -> Iterator[tuple[str, str | None, Row | str]]:
    if not isinstance(entry, dict):
        yield "", None, f"expected a JSON object, got {type(entry).__name__}"
    elif source == "tatqa":
        yield from _tatqa_rows(name, entry)
    elif source == "convfinqa":
        yield from _convfinqa_rows(name, entry)
    else:
        try:
            yield "", entry.get("id"), _finqa_row(name, entry)
        except ValueError as e:
            yield "", entry.get("id"), str(e)


def load(source: str, path: str | pathlib.Path) -> tuple[list[Row], list[Refused]]:
    """(rows, refused rows) of a source's published file(s) at `path`."""
    if source not in SOURCES:
        raise ValueError(f"unknown finance source {source!r}; allowed: {SOURCES}")
    rows: list[Row] = []
    refused: list[Refused] = []
    seen: set[str] = set()
    for name, entries in _files(pathlib.Path(path).expanduser(), source):
        for i, entry in enumerate(entries, 1):
            for where, ident, item in _entry_rows(source, name, entry):
                place = f"{name}: row {i}" + (f", {where}" if where else "")
                if isinstance(item, str):
                    refused.append(Refused(place, None if ident is None else str(ident), item))
                elif item.task.key in seen:
                    refused.append(Refused(place, None if ident is None else str(ident), "duplicate id"))
                else:
                    seen.add(item.task.key)
                    rows.append(item)
    return rows, refused
