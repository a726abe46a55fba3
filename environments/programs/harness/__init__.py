"""The sandbox side of program grading: harnesses as real modules.

``wire`` (what they share: how values cross back) and one module per test
form: ``calls`` (decomposed asserts and replayed calls), ``check`` (check() in
the candidate's process), ``stdio`` (stdin -> stdout). Each is lintable and
importable here; ``source(name)`` is what the sandbox runs: the text of
environments/sandbox/tagged.py (the one encoding of returned values, which the
sandbox worker uses too), then wire.py's without its import of it, then the
harness's without its import of wire (in the sandbox nothing of this package
exists).
"""

from __future__ import annotations

import functools
import os

from environments.sandbox import tagged

HARNESSES = ("calls", "check", "stdio")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _text(name: str) -> str:
    with open(os.path.join(_HERE, f"{name}.py"), encoding="utf-8") as f:
        return f.read()


def _without_import(text: str, module: str) -> str:
    """`text` less its (one) `from module import ...` statement, parenthesised or on one line."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(f"from {module} import"))
    end = start + 1
    if lines[start].split("#")[0].rstrip().endswith("("):
        end = next(i for i in range(start, len(lines)) if lines[i].split("#")[0].rstrip().endswith(")")) + 1
    return "".join(lines[:start] + lines[end:])


@functools.cache
def source(name: str) -> str:
    """The source the sandbox runs for harness ``name`` (its entry: ``_rlpt_main``)."""
    if name not in HARNESSES:
        raise ValueError(f"unknown harness {name!r}; known: {HARNESSES}")
    with open(tagged.__file__, encoding="utf-8") as f:
        encoder = f.read()
    wire = _without_import(_text("wire"), "environments.sandbox.tagged")
    return encoder + "\n\n" + wire + "\n\n" + _without_import(_text(name), "environments.programs.harness.wire")
