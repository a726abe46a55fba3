"""The sandbox side of program grading: harnesses as real modules.

``wire`` (how values cross back) and one module per test form: ``calls``
(decomposed asserts and replayed calls), ``check`` (check() in the candidate's
process), ``stdio`` (stdin -> stdout). Each is lintable and importable here;
``source(name)`` is what the sandbox runs: wire.py's text, then the harness's
without its import of wire (in the sandbox nothing of this package exists).
"""

from __future__ import annotations

import functools
import os

HARNESSES = ("calls", "check", "stdio")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _text(name: str) -> str:
    with open(os.path.join(_HERE, f"{name}.py"), encoding="utf-8") as f:
        return f.read()


@functools.cache
def source(name: str) -> str:
    """The source the sandbox runs for harness ``name`` (its entry: ``_rlpt_main``)."""
    if name not in HARNESSES:
        raise ValueError(f"unknown harness {name!r}; known: {HARNESSES}")
    lines = _text(name).splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("from environments.programs.harness.wire import"))
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith(")")) + 1
    return _text("wire") + "\n\n" + "".join(lines[:start] + lines[end:])
