"""What every sandbox harness shares: how values cross back to the host.

A real module (lintable, importable by tests), and shipped as source: each
harness of this package is sent to the sandbox as this file's text followed by
its own (`environments.programs.harness.source`), so the names below are the
harness's own copies, taken when it loads, before the candidate's program runs
(which may patch builtins or collections).

Values cross as tagged plain data built from exact builtin types only
(`_rlpt_tag`); everything else is {"opaque": type name}. The host decodes them
with `environments.programs.values.untag`.
"""
# Shipped as the first part of every harness's source: nothing above the
# standard library may be imported here.

# Builtins a test may apply to a call's result (`int(f(x)) == 35`, `sorted(f(x)) == [...]`,
# `round(f(x), 2) == 0.33`): they run in the sandbox, on the returned object, as part of the
# call (the harness's own copies, taken before the candidate loads), and the host compares
# what they return. Pure and bounded by the job's limits; their extra arguments are literals.
APPLIED = ("int", "float", "str", "bool", "len", "abs", "round", "list", "tuple", "set", "frozenset", "sorted")
# Results travel as a list of str chunks (the sandbox worker keeps str <= 4096).
CHUNK = 4000
import builtins as _builtins, collections as _collections, json as _json, sys as _sys, traceback as _tb  # noqa: F401,E401  (_sys: the harnesses')

# Taken when the harness loads, before the candidate's program runs (which may
# patch builtins or collections): the only code that decides how a value is sent.
_rlpt_dict_items = dict.items
# Dicts by another name: Python's == compares them with a dict as a dict, and the
# expected side is always a plain dict, so they cross as one (their exact types only).
_rlpt_dicts = (dict, _collections.Counter, _collections.OrderedDict, _collections.defaultdict)
_rlpt_applied = {name: getattr(_builtins, name) for name in APPLIED}

def _rlpt_tag(v, depth=0):
    if depth > 64:
        raise ValueError("value nested too deeply")
    t = type(v)
    if v is None or t is bool or t is int or t is float or t is str:
        return v
    if t is list:
        return {"list": [_rlpt_tag(x, depth + 1) for x in v]}
    if t is tuple:
        return {"tuple": [_rlpt_tag(x, depth + 1) for x in v]}
    if t in _rlpt_dicts:
        return {"dict": [[_rlpt_tag(k, depth + 1), _rlpt_tag(x, depth + 1)] for k, x in _rlpt_dict_items(v)]}
    if t is set or t is frozenset:
        return {t.__name__: [_rlpt_tag(x, depth + 1) for x in v]}
    if t is bytes:
        return {"bytes": v.hex()}
    if t is complex:
        return {"complex": [v.real, v.imag]}
    return {"opaque": t.__name__}

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
