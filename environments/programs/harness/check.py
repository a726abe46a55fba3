"""The check harness: runs a task's check(candidate) in the candidate's process,
the candidate's every return value deep-copied into exact builtin types first.
Shipped after wire.py (see harness.source)."""

from environments.programs.harness.wire import (  # noqa: F401  shipped after wire.py, not importing it
    _rlpt_applied, _rlpt_chunks, _rlpt_last, _rlpt_line, _rlpt_load, _rlpt_tag, _sys)


def _rlpt_copy(v, depth=0):
    if depth > 64:
        raise TypeError("returned value nested too deeply")
    t = type(v)
    if v is None or t in (bool, int, float, complex, str, bytes):
        return v
    if t is list:
        return [_rlpt_copy(x, depth + 1) for x in v]
    if t is tuple:
        return tuple(_rlpt_copy(x, depth + 1) for x in v)
    if t is dict:
        return {_rlpt_copy(k, depth + 1): _rlpt_copy(x, depth + 1) for k, x in v.items()}
    if t is set:
        return {_rlpt_copy(x, depth + 1) for x in v}
    if t is frozenset:
        return frozenset(_rlpt_copy(x, depth + 1) for x in v)
    raise TypeError("candidate returned a %s, not a plain builtin value" % t.__name__)

def _rlpt_main(source, entry, prelude, test):
    namespace, problem = _rlpt_load(source, "__candidate__")
    if problem is not None:
        return _rlpt_chunks(problem)
    fn = namespace.get(entry)
    if not callable(fn):
        return _rlpt_chunks({"phase": "entry", "error": "no function %r defined" % entry, "error_type": "NameError"})
    def candidate(*args, **kwargs):
        return _rlpt_copy(fn(*args, **kwargs))
    checker = {"__name__": "__check__"}
    try:
        exec(compile(prelude, "<prelude>", "exec"), checker)
        checker[entry] = candidate  # as in HumanEval's harness, where the test sees the completed program
        exec(compile(test, "<test>", "exec"), checker)
        checker["check"](candidate)
    except BaseException as e:
        return _rlpt_chunks({"phase": "done", "passed": False, "error": _rlpt_last(e), "error_type": type(e).__name__, "line": _rlpt_line(e, "<test>")})
    return _rlpt_chunks({"phase": "done", "passed": True})
