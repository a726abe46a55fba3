"""Dataset domains: rlpt domains made from a local file of prompts and answers.

    from environments import datasets
    spec = datasets.register_file("rlpt/dataset-mymath-v0", "problems.jsonl", verifier="math",
                                  fields={"prompt": "question", "answer": "solution"})
    env = gymnasium.make(spec.id)

A file is JSONL, JSON (a list of objects), Parquet, a single Arrow IPC stream
file, or a Hugging Face `save_to_disk` folder (`environments.datasets.loaders`).
Each row maps to a task through `fields` (defaults: prompt, answer, id, split,
system, entry_point, test_setup_code, test_imports; all but prompt and answer
are optional; entry_point names the function a code row's check(candidate)
tests call; test_setup_code and test_imports run before a code row's tests, as
MBPP's columns of those names). The prompt shown is
"<system>\\n\\n<prompt>" when the row has a system prompt, else the prompt. The
answer is graded by a verifier kind (`environments.datasets.verifiers`: math,
exact, choice, numeric, regex; `environments.datasets.code`: code, whose answer
field holds unit tests run in the sandbox, and whose domains are tagged
"sandbox"; more by `register_verifier`).

Splits: a mapped split column ("train"; "eval"/"test"/"validation" -> eval)
decides, else the content hash of the row's id (of its prompt if the file has
no ids) via `environments.splits.split_of` (1 in 10 rows eval). Hash splits are
stable when rows are appended and disjoint by construction. `reset(seed)`
picks uniformly among the split's rows with the env's seeded generator.

A published file's answer field often holds a worked solution: `reference=`
takes the reference out of it ("after:####" for GSM8K, "boxed" for MATH,
"regex:<pattern>" with one group; `reference_extractor`), so such files
register as they are.

The whole file is validated (streamed, constant memory apart from the id
set) at registration, before anything compiles. A file problem (syntax, a
missing or mistyped field, a duplicate id) is a ValueError naming file,
line/row and field. A row whose reference the verifier cannot grade (no
"####" in it, an assert the code verifier cannot split) is refused alone: the
file loads the rest, the refusals are logged with their rows, ids and reasons
and kept in the domain's `refused`; `strict=True` makes the first one a
ValueError instead. The registered domain then holds the mapped fields of
every row in memory.

Plain-data form for configs: "rlpt/dataset-name-v0=path.jsonl:math" or a dict
with keys id, path, verifier and optionally fields, options, difficulty, tags,
format, max_answer_chars (`register`).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import pathlib
import re
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from environments import answers, registry, sandbox, splits
from environments.datasets import loaders, verifiers
from environments.datasets import code as _code  # noqa: F401  (registers the "code" verifier kind)
from environments.datasets.verifiers import (
    VerifierKind,
    get_verifier,
    register_verifier,
    verifier_kinds,
)
from environments.verdicts import Grade, Instruct, Problem

__all__ = [
    "DatasetDomain", "Refused", "Stats", "VerifierKind", "get_verifier", "load_tasks", "reference_extractor",
    "register", "register_file", "register_verifier", "validate_file", "verifier_kinds",
]

logger = logging.getLogger(__name__)

FAMILY = "dataset"
DEFAULT_MAX_ANSWER_CHARS = 4096
INSTRUCT_ANSWER_SLACK = 4096  # an instruct reply's reasoning, beyond the longest answer


def _fields(fields: Mapping[str, str] | None) -> dict[str, str]:
    fields = dict(fields or {})
    unknown = sorted(set(fields) - set(loaders.FIELDS))
    if unknown:
        raise ValueError(f"unknown field names {unknown} in fields=; allowed: {list(loaders.FIELDS)}")
    for name, column in fields.items():
        if not isinstance(column, str) or not column:
            raise ValueError(f"fields[{name!r}] must be a non-empty column name, got {column!r}")
    return {name: fields.get(name, name) for name in loaders.FIELDS}


def _task(row: loaders.Row, kind: VerifierKind, hidden: Any) -> tuple[Problem, str]:
    """(task, split) for a validated row, in both prompt styles (the instruct
    style's prompt ends with the kind's answer format in words)."""
    key = row.id if row.id is not None else row.prompt
    prompt = f"{row.system}\n\n{row.prompt}" if row.system else row.prompt
    instruct = Instruct(f"{prompt}\n\n{kind.instruct.instruction()}", kind.instruct_demonstrate(row.answer))
    task = Problem(key=key, prompt=prompt, demonstration=kind.demonstrate(row.answer), hidden=hidden,
                   instruct=instruct)
    return task, row.split or splits.split_of(key)


def _max_answer_chars(kind: VerifierKind, max_answer_chars: int | None) -> int:
    if max_answer_chars is not None:
        return max_answer_chars
    return kind.max_answer_chars or DEFAULT_MAX_ANSWER_CHARS


def reference_extractor(reference: str | None) -> Callable[[str], str] | None:
    """The function taking a row's answer field to its reference, for `reference=`:

    * None: the field as it is;
    * "after:<marker>": the text after the field's last <marker>, e.g. "after:####"
      for GSM8K's worked solutions ending in "#### 18";
    * "boxed": the content of the field's last \\boxed{} (or \\fbox{}), as in MATH;
    * "regex:<pattern>": the one group of the pattern's last match in the field.

    The function raises ValueError for a field it finds no reference in (that
    row is refused); a malformed `reference` raises ValueError here."""
    if reference is None:
        return None
    if not isinstance(reference, str):
        raise ValueError(f"reference= must be a string ('after:<marker>', 'boxed' or 'regex:<pattern>'), "
                         f"got {reference!r}")
    kind, _, arg = reference.partition(":")
    if kind == "after" and arg:
        def after(field: str) -> str:
            head, marker, tail = field.rpartition(arg)
            if not marker or not tail.strip():
                raise ValueError(f"has no reference after {arg!r}")
            return tail.strip()
        return after
    if reference == "boxed":
        def boxed(field: str) -> str:
            content = answers.last_boxed(field)
            if content is None or not content.strip():
                raise ValueError("has no \\boxed{...} reference")
            return content.strip()
        return boxed
    if kind == "regex" and arg:
        try:
            pattern = re.compile(arg, re.DOTALL)
        except re.error as e:
            raise ValueError(f"reference={reference!r}: not a valid regular expression ({e})") from None
        if pattern.groups != 1:
            raise ValueError(f"reference={reference!r}: the pattern must have exactly one group, "
                             f"it has {pattern.groups}")

        def regex(field: str) -> str:
            matches = list(pattern.finditer(field))
            if not matches or not (matches[-1].group(1) or "").strip():
                raise ValueError(f"has no match of {arg!r}")
            return matches[-1].group(1).strip()
        return regex
    raise ValueError(f"reference={reference!r} must be 'after:<marker>' (e.g. 'after:####'), 'boxed' "
                     "or 'regex:<pattern with one group>'")


@dataclasses.dataclass(frozen=True)
class Refused:
    """A row left out at registration: where it is, its id (None if the file has
    none) and why its reference cannot be graded."""

    where: str
    id: str | None
    reason: str


def _row_task(path: pathlib.Path, row: loaders.Row, kind: VerifierKind, verifier: str, opts: Mapping[str, Any],
              column: str, extract: Callable[[str], str] | None,
              max_answer_chars: int) -> tuple[Problem, str]:
    """(task, split) of one row; ValueError (the row's problem, naming the field) if it cannot be graded."""
    where = f"field {column!r}"
    if extract is not None:
        try:
            row = dataclasses.replace(row, answer=extract(row.answer))
        except ValueError as e:
            raise ValueError(f"{where} {e}") from None
        where = f"field {column!r} (reference {row.answer[:40]!r})"
    problem = kind.check_reference(row.answer, opts)
    if problem is not None:
        raise ValueError(f"{where}: {problem} ({verifier} verifier)")
    hidden: Any = row.answer
    if kind.prepare is not None:
        try:
            hidden = kind.prepare(row.answer, row, opts)
        except ValueError as e:
            raise ValueError(f"{where}: {e} ({verifier} verifier)") from None
    task, split = _task(row, kind, hidden)
    if len(task.demonstration.strip()) > max_answer_chars:
        raise ValueError(f"{where} is longer than max_answer_chars={max_answer_chars}")
    return task, split


def _rows(path: os.PathLike | str, fields: Mapping[str, str] | None, verifier: str,
          options: Mapping[str, Any] | None, format: str | None,
          max_answer_chars: int | None, reference: str | None = None,
          strict: bool = False) -> Iterator[tuple[loaders.Row, Problem, str] | Refused]:
    """Each row as (row, task, split), or as `Refused` when its reference cannot be
    graded (with `strict`, that raises ValueError instead). A file problem (bad
    syntax, a missing or mistyped field, a duplicate id) always raises."""
    path = pathlib.Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    kind = get_verifier(verifier)
    opts = verifiers.resolve_options(kind, options)
    max_answer_chars = _max_answer_chars(kind, max_answer_chars)
    mapping = _fields(fields)
    extract = reference_extractor(reference)
    if extract is not None and kind.structured_reference:
        raise ValueError(f"reference={reference!r} extracts a reference from text; the {verifier} verifier "
                         "takes its answer field as it is")
    fmt = format or loaders.detect_format(path)
    for row in loaders.iter_rows(path, fmt, mapping, structured_answer=kind.structured_reference):
        try:
            task, split = _row_task(path, row, kind, verifier, opts, mapping["answer"], extract, max_answer_chars)
        except ValueError as e:
            if strict:
                raise ValueError(f"{path}: {row.where}: {e}") from None
            yield Refused(row.where, row.id, str(e))
            continue
        yield row, task, split


@dataclasses.dataclass(frozen=True)
class Stats:
    """Summary of a validated file: row counts per split, the longest prompt, and
    the rows refused (their references cannot be graded)."""

    rows: int
    train: int
    eval: int
    max_prompt_chars: int
    refused: tuple[Refused, ...] = ()


def _load(path: os.PathLike | str, verifier: str, fields: Mapping[str, str] | None,
          options: Mapping[str, Any] | None, format: str | None, max_answer_chars: int | None,
          reference: str | None, strict: bool) -> tuple[list[tuple[Problem, str]], tuple[Refused, ...]]:
    """(tasks with their splits, refused rows) of a file with at least one usable row."""
    tasks: list[tuple[Problem, str]] = []
    refused: list[Refused] = []
    for item in _rows(path, fields, verifier, options, format, max_answer_chars, reference, strict):
        if isinstance(item, Refused):
            refused.append(item)
        else:
            tasks.append(item[1:])
    if not tasks:
        first = refused[0]
        raise ValueError(f"{path}: {first.where}: {first.reason} (no row of the file can be graded: "
                         f"{len(refused)} refused)")
    return tasks, tuple(refused)


def _refusal_summary(path: os.PathLike | str, refused: Sequence[Refused], limit: int = 5) -> str:
    shown = "; ".join(f"{r.where}{f' (id {r.id})' if r.id is not None else ''}: {r.reason}" for r in refused[:limit])
    more = f"; and {len(refused) - limit} more" if len(refused) > limit else ""
    return f"{path}: {len(refused)} rows refused (pass strict=True to refuse the file instead): {shown}{more}"


def validate_file(path: os.PathLike | str, verifier: str = "math", fields: Mapping[str, str] | None = None,
                  options: Mapping[str, Any] | None = None, format: str | None = None,
                  max_answer_chars: int | None = None, reference: str | None = None,
                  strict: bool = False) -> Stats:
    """Validates every row of `path` (streamed; keeps only counts, the id set and
    the refused rows). See `register_file` for the arguments."""
    counts = {"train": 0, "eval": 0}
    longest = 0
    refused: list[Refused] = []
    for item in _rows(path, fields, verifier, options, format, max_answer_chars, reference, strict):
        if isinstance(item, Refused):
            refused.append(item)
            continue
        _, task, split = item
        counts[split] += 1
        longest = max(longest, len(task.prompt))
    return Stats(counts["train"] + counts["eval"], counts["train"], counts["eval"], longest, tuple(refused))


def load_tasks(path: os.PathLike | str, verifier: str = "math", fields: Mapping[str, str] | None = None,
               options: Mapping[str, Any] | None = None, format: str | None = None,
               max_answer_chars: int | None = None, reference: str | None = None,
               strict: bool = False) -> list[tuple[Problem, str]]:
    """Every usable row of `path` as (task, split), in file order, after validation
    (refused rows are left out: `validate_file` lists them)."""
    return _load(path, verifier, fields, options, format, max_answer_chars, reference, strict)[0]


class DatasetDomain(registry.Domain):
    """A domain over a fixed list of tasks, graded by one verifier kind."""

    def __init__(self, spec: registry.DomainSpec, tasks: Sequence[tuple[Problem, str]], verifier: str,
                 options: Mapping[str, Any] | None = None,
                 registration: Mapping[str, Any] | None = None, refused: Sequence[Refused] = ()) -> None:
        self.spec = spec
        self.refused = tuple(refused)  # rows of the file left out, with why
        # What it was registered from (`_registration`): `register(exist_ok=True)` compares it.
        self.registration = dict(registration or {})
        self._kind = get_verifier(verifier)
        self._options = verifiers.resolve_options(self._kind, options)
        self.answer_format = self._kind.answer_format
        self._tasks = tuple(task for task, _ in tasks)
        self._by_split = {s: np.array([i for i, (_, sp) in enumerate(tasks) if sp == s], dtype=np.int64)
                          for s in splits.SPLITS}
        self.verifier = verifier

    def split_sizes(self) -> dict[str, int]:
        return {s: len(ix) for s, ix in self._by_split.items()}

    def sample_in_split(self, rng: np.random.Generator, split: str) -> Problem:
        """A uniformly drawn task of `split`; a split with no rows raises ValueError."""
        rows = self._by_split[splits.check_split(split)]
        if len(rows) == 0:
            raise ValueError(f"dataset domain {self.spec.id!r} has no {split!r} rows; add some, "
                             "or a split field, to the file")
        return self._tasks[int(rows[int(rng.integers(len(rows)))])]

    def sample(self, rng: np.random.Generator) -> Problem:
        return self._tasks[int(rng.integers(len(self._tasks)))]

    def grade(self, task: Problem, answer: str) -> Grade:
        if "sandbox" in self._kind.tags:  # its hidden tests are in a file on this host
            sandbox.require_sealed_disk(f"dataset domain {self.spec.id!r} ({self.registration.get('path', 'a file')})")
        return self._kind.grade(answer, task.hidden, self._options)


def register_file(domain_id: str, path: os.PathLike | str, verifier: str = "math",
                  fields: Mapping[str, str] | None = None, options: Mapping[str, Any] | None = None,
                  difficulty: str = "medium", tags: Sequence[str] = (), format: str | None = None,
                  max_answer_chars: int | None = None, description: str = "",
                  reference: str | None = None, strict: bool = False) -> registry.DomainSpec:
    """Validates and loads `path`, registers it as `domain_id` (family "dataset",
    so the id must look like "rlpt/dataset-<name>-v<N>") here and with gymnasium,
    and returns its spec.

    reference: how the reference is taken from the answer field (`reference_extractor`:
      "after:####", "boxed", "regex:<pattern>"); None: the field is the reference.
    strict: a row whose reference the verifier cannot grade refuses the whole
      file; by default that row alone is left out, logged, and listed in the
      domain's `refused` (and `validate_file(...).refused`).

    Every file problem raises ValueError before anything is registered."""
    if not isinstance(domain_id, str) or not domain_id.startswith(f"rlpt/{FAMILY}-"):
        raise ValueError(f"dataset domain id {domain_id!r} must look like 'rlpt/{FAMILY}-<name>-v<N>'")
    tasks, refused = _load(path, verifier, fields, options, format, max_answer_chars, reference, strict)
    if refused:
        logger.warning("%s", _refusal_summary(path, refused))
    kind = get_verifier(verifier)
    spec = registry.DomainSpec(
        id=domain_id,
        family=FAMILY,
        difficulty=difficulty,
        tags=tuple(dict.fromkeys((FAMILY, verifier, *kind.tags, *tags))),
        max_prompt_chars=max(len(task.prompt) for task, _ in tasks),
        max_answer_chars=_max_answer_chars(kind, max_answer_chars),
        max_instruct_prompt_chars=max(len(task.instruct.prompt) for task, _ in tasks),
        max_instruct_answer_chars=_max_answer_chars(kind, max_answer_chars) + INSTRUCT_ANSWER_SLACK,
        description=description or (f"{pathlib.Path(path).name}: {len(tasks)} rows graded by the {verifier} verifier"
                                     + (f" ({len(refused)} refused)" if refused else "")),
    )
    registration = _registration(dict(path=path, verifier=verifier, fields=fields, options=options,
                                      difficulty=difficulty, tags=tags, format=format,
                                      max_answer_chars=max_answer_chars, description=description,
                                      reference=reference, strict=strict))
    registry.register(DatasetDomain(spec, tasks, verifier, options, registration, refused))
    return spec


_DESCRIPTION_KEYS = {"id", "path", "verifier", "fields", "options", "difficulty", "tags", "format",
                     "max_answer_chars", "description", "reference", "strict"}


def parse_description(description: str | Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of `register_file` from a plain-data description.

    A string "rlpt/dataset-name-v0=path[:verifier][?field=column&...]" (the
    verifier defaults to math; each field=column pair maps one of
    `loaders.FIELDS` to the file's column, and reference=... sets `reference`,
    e.g. "?prompt=question&reference=after:####"), or a dict with
    `register_file`'s keyword names ("id" for the domain id)."""
    if isinstance(description, str):
        domain_id, sep, rest = description.partition("=")
        if not sep or not rest or not domain_id.strip():
            raise ValueError(f"dataset description {description!r} must look like "
                             "'rlpt/dataset-<name>-v0=path[:verifier][?field=column&...]'")
        rest, _, query = rest.partition("?")
        fields = {}
        reference = None
        for pair in filter(None, query.split("&")):
            key, eq, column = pair.partition("=")
            if key == "reference" and eq and column:
                reference = column
                continue
            if not eq or not column or key not in loaders.FIELDS:
                raise ValueError(f"dataset description {description!r}: {pair!r} must be field=column "
                                 f"with field one of {list(loaders.FIELDS)}, or reference=<how>")
            fields[key] = column
        path, verifier = rest, "math"
        head, colon, tail = rest.rpartition(":")
        if colon and tail in verifier_kinds():
            path, verifier = head, tail
        elif colon and tail and "/" not in tail and "." not in tail:
            get_verifier(tail)  # an unknown kind: raises listing the known ones
        out = {"domain_id": domain_id.strip(), "path": path, "verifier": verifier}
        return out | ({"fields": fields} if fields else {}) | ({"reference": reference} if reference else {})
    if not isinstance(description, Mapping):
        raise ValueError(f"a dataset description must be a string or a dict, got {type(description).__name__}")
    unknown = sorted(set(description) - _DESCRIPTION_KEYS)
    if unknown or "id" not in description or "path" not in description:
        raise ValueError(f"dataset description needs 'id' and 'path' and allows {sorted(_DESCRIPTION_KEYS)}; "
                         f"got {sorted(description)}")
    kwargs = {k: v for k, v in description.items() if k != "id"}
    return {"domain_id": description["id"], **kwargs}


def register(description: str | Mapping[str, Any], exist_ok: bool = False) -> registry.DomainSpec:
    """`register_file` from a plain-data description (see `parse_description`).

    `exist_ok`: a domain already registered from the same description (the
    same file, resolved, and arguments) is returned as it is, so a run's
    several components, and a resumed run, may each register a config's files;
    the same id from another file or with other arguments still raises."""
    kwargs = parse_description(description)
    kwargs["path"] = str(pathlib.Path(kwargs["path"]).expanduser().resolve())
    domain_id = kwargs["domain_id"]
    if exist_ok and registry.is_registered(domain_id):
        existing = registry.domain(domain_id)
        bound = inspect.signature(register_file).bind(**kwargs)
        bound.apply_defaults()
        if getattr(existing, "registration", None) == _registration(bound.arguments):
            return existing.spec
        raise ValueError(f"domain {domain_id!r} is already registered "
                         f"({getattr(existing, 'registration', {}).get('path', 'not from a file')}); "
                         f"choose another id for {kwargs['path']}")
    return register_file(**kwargs)


def _registration(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies a file registration: every argument, the path resolved."""
    out = {k: v for k, v in kwargs.items()
           if k != "domain_id" and v is not None and v is not False and not (isinstance(v, (str, dict, tuple)) and not v)}
    out["path"] = str(pathlib.Path(out["path"]).expanduser().resolve())
    for k in ("fields", "options"):
        if k in out:
            out[k] = dict(out[k])
    if "tags" in out:
        out["tags"] = tuple(out["tags"])
    return out


DATA_DIR = pathlib.Path(__file__).resolve().parent.parent / "data"


def _register_builtin() -> None:
    for difficulty in registry.DIFFICULTIES:
        register_file(f"rlpt/dataset-arith-{difficulty}-v0", DATA_DIR / f"arith-{difficulty}.jsonl",
                      verifier="math", difficulty=difficulty, tags=("arithmetic", "word-problem"),
                      max_answer_chars=1024)


_register_builtin()
