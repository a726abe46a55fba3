"""Streaming row readers for dataset files, and the row validator.

Formats (chosen by `detect_format` from the path, or given explicitly):

* "jsonl": one JSON object per line, read line by line (blank lines skipped).
* "json": one JSON array of objects (read whole: JSON arrays cannot stream
  without a streaming parser; use JSONL or Parquet for big files).
* "parquet": read one record batch at a time, only the mapped columns.
* "hf": a Hugging Face `datasets.Dataset.save_to_disk` folder (state.json
  lists its "_data_files"; each is an Arrow IPC *stream* file), read one
  record batch at a time with pyarrow (no `datasets` dependency).
* "arrow": a single Arrow IPC stream file.

`iter_rows` yields (row number, dict); row numbers are 1-based line numbers
for JSONL ("line N") and 1-based row indices otherwise ("row N"). Every
problem is a ValueError naming the file, the line/row and the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import pathlib
from typing import Any, Iterator, Mapping

FORMATS = ("jsonl", "json", "parquet", "hf", "arrow")
FIELDS = ("prompt", "answer", "id", "split", "system", "entry_point", "test_setup_code", "test_imports")
OPTIONAL = ("id", "split", "system", "entry_point", "test_setup_code", "test_imports")
# Optional fields that may be absent or null on any row (a file may mix task kinds).
PER_ROW = ("system", "entry_point", "test_setup_code", "test_imports")
REQUIRED = ("prompt", "answer")
SPLIT_VALUES = {"train": "train", "eval": "eval", "test": "eval", "validation": "eval"}
_BATCH_ROWS = 1024


def detect_format(path: pathlib.Path) -> str:
    """Format of `path` from its suffix (or "hf" for a folder)."""
    if path.is_dir():
        if (path / "dataset_dict.json").exists():
            raise ValueError(
                f"{path}: is a Hugging Face DatasetDict folder; point at one split's subfolder "
                f"(e.g. {path / 'train'}) and map splits with the 'split' field or by hashing")
        return "hf"
    suffix = path.suffix.lower()
    by_suffix = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
                 ".pq": "parquet", ".arrow": "arrow"}
    if suffix not in by_suffix:
        raise ValueError(f"{path}: cannot tell the format from suffix {suffix!r}; pass format= one of {FORMATS}")
    return by_suffix[suffix]


def _jsonl(path: pathlib.Path) -> Iterator[tuple[str, int, Any]]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: line {lineno}: invalid UTF-8 (bad byte at column {e.start + 1})") from None
            if lineno == 1:
                text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark
            if not text.strip():
                continue
            try:
                yield "line", lineno, json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {lineno}: malformed JSON ({e.msg} at column {e.colno})") from None


def _json(path: pathlib.Path) -> Iterator[tuple[str, int, Any]]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {line}: invalid UTF-8 (bad byte at offset {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: line {e.lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: a .json dataset must be a list of objects, got {type(data).__name__}")
    for i, row in enumerate(data, 1):
        yield "row", i, row


def _check_columns(path: pathlib.Path, names: list[str], wanted: Mapping[str, str]) -> list[str]:
    """Columns to read: every mapped column present; missing required ones raise."""
    for field in REQUIRED:
        if wanted[field] not in names:
            raise _missing(path, "row 1", field, wanted[field], names)
    return [col for field, col in wanted.items() if col in names]


def _batches(path: pathlib.Path, reader: Any, start: int) -> Iterator[tuple[str, int, Any]]:
    row = start
    for batch in reader:
        for record in batch.to_pylist():
            row += 1
            yield "row", row, record


def _parquet(path: pathlib.Path, wanted: Mapping[str, str]) -> Iterator[tuple[str, int, Any]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001  (pyarrow raises several types for bad files)
        raise ValueError(f"{path}: not a readable Parquet file ({e})") from None
    columns = _check_columns(path, pf.schema_arrow.names, wanted)
    yield from _batches(path, pf.iter_batches(batch_size=_BATCH_ROWS, columns=columns), 0)


def _arrow_stream(path: pathlib.Path, wanted: Mapping[str, str], start: int) -> Iterator[tuple[str, int, Any]]:
    import pyarrow as pa

    try:
        source = pa.memory_map(str(path), "r")
        reader = pa.ipc.open_stream(source)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{path}: not an Arrow IPC stream file ({e})") from None
    columns = _check_columns(path, reader.schema.names, wanted)

    def selected() -> Iterator[Any]:
        for batch in reader:
            yield batch.select(columns)

    yield from _batches(path, selected(), start)


def _hf(path: pathlib.Path, wanted: Mapping[str, str]) -> Iterator[tuple[str, int, Any]]:
    state = path / "state.json"
    if not state.exists():
        raise ValueError(f"{path}: not a Hugging Face save_to_disk folder (no state.json)")
    try:
        files = [entry["filename"] for entry in json.loads(state.read_text("utf-8"))["_data_files"]]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{state}: no readable '_data_files' list ({e})") from None
    if not files:
        raise ValueError(f"{path}: empty file (state.json lists no data files)")
    offset = 0
    for name in files:
        rows = 0
        for item in _arrow_stream(path / name, wanted, offset):
            rows = item[1]
            yield item
        offset = max(offset, rows)


def _missing(path: pathlib.Path, where: str, field: str, column: str, keys: list[str]) -> ValueError:
    close = difflib.get_close_matches(column, keys, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}? (map it with fields={{{field!r}: {close[0]!r}}})" if close else ""
    return ValueError(f"{path}: {where}: missing field {column!r} (the {field}){hint}; the row has fields {sorted(keys)}")


@dataclasses.dataclass(frozen=True)
class Row:
    """One validated row: mapped fields as text. `split` is "train"/"eval" or None.
    A structured answer (a list or object, allowed only with structured_answer=True)
    is given as its JSON text. `test_setup_code` and `test_imports` are code run
    before a code row's tests (MBPP's columns of those names; a list of import
    lines is joined with newlines); None when the row has none."""

    where: str
    prompt: str
    answer: str
    id: str | None
    split: str | None
    system: str | None
    entry_point: str | None = None
    test_setup_code: str | None = None
    test_imports: str | None = None


def iter_rows(path: pathlib.Path, fmt: str, fields: Mapping[str, str],
              structured_answer: bool = False) -> Iterator[Row]:
    """Validated rows of `path`, streamed. Checks per row: an object; prompt and
    answer present (close-match hint for misspellings); prompt/system non-empty
    strings, answer a non-empty string or number (or, with structured_answer, a
    non-empty list or object, passed on as JSON text); id a string or int present
    on every row if on the first, and unique; split one of SPLIT_VALUES;
    entry_point a string. An empty file is an error."""
    readers = {"jsonl": lambda: _jsonl(path), "json": lambda: _json(path),
               "parquet": lambda: _parquet(path, fields), "hf": lambda: _hf(path, fields),
               "arrow": lambda: _arrow_stream(path, fields, 0)}
    if fmt not in readers:
        raise ValueError(f"{path}: unknown format {fmt!r}; allowed: {FORMATS}")
    optional_present: dict[str, bool] | None = None
    seen_ids: set[str] = set()
    count = 0
    for unit, number, record in readers[fmt]():
        where = f"{unit} {number}"
        if not isinstance(record, dict):
            raise ValueError(f"{path}: {where}: expected a JSON object, got {type(record).__name__}")
        keys = list(record)
        for field in REQUIRED:
            if fields[field] not in record:
                raise _missing(path, where, field, fields[field], keys)
        if optional_present is None:
            optional_present = {f: fields[f] in record and record[fields[f]] is not None for f in OPTIONAL}
            optional_present.update({f: True for f in PER_ROW})
        values: dict[str, str | None] = {}
        for field in FIELDS:
            column = fields[field]
            if field not in REQUIRED and not optional_present[field]:
                values[field] = None
                continue
            if column not in record or record[column] is None:
                if field in PER_ROW:
                    values[field] = None
                    continue
                if column in record:
                    raise ValueError(f"{path}: {where}: field {column!r} (the {field}) is null")
                raise _missing(path, where, field, column, keys)
            values[field] = _text(path, where, field, column, record[column], structured_answer)
        if values["id"] is not None:
            if values["id"] in seen_ids:
                raise ValueError(f"{path}: {where}: duplicate id {values['id']!r} in field {fields['id']!r}")
            seen_ids.add(values["id"])
        if values["split"] is not None:
            if values["split"] not in SPLIT_VALUES:
                raise ValueError(f"{path}: {where}: field {fields['split']!r} is {values['split']!r}; "
                                 f"allowed: {sorted(SPLIT_VALUES)}")
            values["split"] = SPLIT_VALUES[values["split"]]
        count += 1
        yield Row(where, values["prompt"], values["answer"], values["id"], values["split"], values["system"],
                  values["entry_point"], values["test_setup_code"] or None, values["test_imports"] or None)
    if count == 0:
        raise ValueError(f"{path}: empty file (no rows)")


def _text(path: pathlib.Path, where: str, field: str, column: str, value: Any,
          structured_answer: bool = False) -> str:
    ok_types: tuple[type, ...] = (str,)
    if field == "test_imports" and isinstance(value, list):
        if not all(isinstance(line, str) for line in value):
            raise ValueError(f"{path}: {where}: field {column!r} (the {field}) must be a string or a list of "
                             f"strings, got {value!r:.80}")
        return "\n".join(line.strip() for line in value)
    if field in ("test_setup_code", "test_imports") and isinstance(value, str):
        return value
    if field == "answer" and structured_answer and isinstance(value, (list, dict)):
        if not value:
            raise ValueError(f"{path}: {where}: field {column!r} (the {field}) is empty")
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {where}: field {column!r} (the {field}) is not plain JSON data ({e})") from None
    if field == "answer":
        ok_types = (str, int, float)
    elif field == "id":
        ok_types = (str, int)
    if isinstance(value, bool) or not isinstance(value, ok_types):
        names = " or ".join(t.__name__ for t in ok_types)
        raise ValueError(f"{path}: {where}: field {column!r} (the {field}) must be {names}, got {type(value).__name__}")
    text = value if isinstance(value, str) else str(value)
    if field in ("prompt", "answer") and not text.strip():
        raise ValueError(f"{path}: {where}: field {column!r} (the {field}) is empty")
    return text
