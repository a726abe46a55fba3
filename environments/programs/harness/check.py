"""The check harness: runs a task's check(candidate) in the candidate's process,
the candidate's every return value first encoded as it would cross to the host
(`_rlpt_tag`) and rebuilt from that as exact builtin objects, so check() sees
what the host would decode. Shipped after wire.py (see harness.source)."""

from environments.programs.harness.wire import (  # noqa: F401  shipped after wire.py, not importing it
    _rlpt_applied, _rlpt_chunks, _rlpt_last, _rlpt_line, _rlpt_load, _rlpt_tag, _sys)


# Containers rebuilt from their tags: the harness's own copies, taken before the candidate loads.
_rlpt_rebuilt = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}

def _rlpt_plain(t):
    """A value tagged by _rlpt_tag rebuilt as exact builtin objects, as the host's
    untag would; an opaque value (any type the encoding does not carry) raises."""
    if type(t) is not dict:
        return t
    (tag, body), = t.items()
    if tag == "opaque":
        raise TypeError("candidate returned a %s, not a plain builtin value" % body)
    if tag == "dict":
        return {_rlpt_plain(k): _rlpt_plain(x) for k, x in body}
    if tag == "bytes":
        return bytes.fromhex(body)
    if tag == "complex":
        return complex(*body)
    return _rlpt_rebuilt[tag]([_rlpt_plain(x) for x in body])

def _rlpt_main(source, entry, prelude, test):
    namespace, problem = _rlpt_load(source, "__candidate__")
    if problem is not None:
        return _rlpt_chunks(problem)
    fn = namespace.get(entry)
    if not callable(fn):
        return _rlpt_chunks({"phase": "entry", "error": "no function %r defined" % entry, "error_type": "NameError"})
    def candidate(*args, **kwargs):
        return _rlpt_plain(_rlpt_tag(fn(*args, **kwargs)))
    checker = {"__name__": "__check__"}
    try:
        exec(compile(prelude, "<prelude>", "exec"), checker)
        checker[entry] = candidate  # as in HumanEval's harness, where the test sees the completed program
        exec(compile(test, "<test>", "exec"), checker)
        checker["check"](candidate)
    except BaseException as e:
        return _rlpt_chunks({"phase": "done", "passed": False, "error": _rlpt_last(e), "error_type": type(e).__name__, "line": _rlpt_line(e, "<test>")})
    return _rlpt_chunks({"phase": "done", "passed": True})
