"""What every sandbox harness shares: how values cross back to the host.

A real module (lintable, importable by tests), and shipped as source: each
harness of this package is sent to the sandbox as the text of
environments/sandbox/tagged.py (the one encoding of returned values,
`_rlpt_tag`, which the sandbox worker uses too), then this file's, then its own
(`environments.programs.harness.source`), so the names below are the
harness's own copies, taken when it loads, before the candidate's program runs
(which may patch builtins or collections).

Values cross as tagged plain data built from exact builtin types only
(`_rlpt_tag`); everything else is {"opaque": type name}. The host decodes them
with `environments.programs.values.untag`.
"""
# Shipped after tagged.py: nothing above the standard library may be imported
# here but tagged.py's names, whose import the shipped source leaves out.

from environments.sandbox.tagged import _rlpt_tag  # noqa: F401  shipped after tagged.py, not importing it

# Builtins a test may apply to a call's result (`int(f(x)) == 35`, `sorted(f(x)) == [...]`,
# `round(f(x), 2) == 0.33`): they run in the sandbox, on the returned object, as part of the
# call (the harness's own copies, taken before the candidate loads), and the host compares
# what they return. Pure and bounded by the job's limits; their extra arguments are literals.
APPLIED = ("int", "float", "str", "bool", "len", "abs", "round", "list", "tuple", "set", "frozenset", "sorted")
# Results travel as one JSON text, in str chunks (a list of str, which the worker's
# tagged encoding carries as it is).
CHUNK = 4000
import builtins as _builtins, json as _json, sys as _sys, traceback as _tb  # noqa: F401,E401  (_sys: the harnesses')

_rlpt_applied = {name: getattr(_builtins, name) for name in APPLIED}

def _rlpt_last(e):
    try:
        return _tb.format_exception_only(type(e), e)[-1].strip()[:500]
    except BaseException:
        return type(e).__name__

def _rlpt_line(e, filename):
    tb, line = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line

def _rlpt_chunks(payload):
    text = _json.dumps(payload)
    return [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]

def _rlpt_load(source, name):
    namespace = {"__name__": name}
    try:
        code = compile(source, "<candidate>", "exec")
    except BaseException as e:
        return None, {"phase": "compile", "error": _rlpt_last(e), "error_type": type(e).__name__}
    try:
        exec(code, namespace)
    except BaseException as e:
        return None, {"phase": "load", "error": _rlpt_last(e), "error_type": type(e).__name__}
    return namespace, None
