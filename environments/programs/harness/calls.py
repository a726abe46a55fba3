"""The calls harness: loads the candidate, runs the test setup, then each
decomposed call (with the builtins applied around it) and returns every result
as tagged plain data. Shipped after wire.py (see harness.source)."""

from environments.programs.harness.wire import (  # noqa: F401  shipped after wire.py, not importing it
    _rlpt_applied, _rlpt_chunks, _rlpt_last, _rlpt_line, _rlpt_load, _rlpt_tag, _sys)


def _rlpt_argument(source, namespace):
    import ast as _ast
    try:
        return _ast.literal_eval(source)
    except (ValueError, TypeError, SyntaxError):  # an expression over the names the setup bound
        return eval(source, namespace)

def _rlpt_main(source, setup, calls):
    import ast as _ast
    namespace, problem = _rlpt_load(source, "__candidate__")
    if problem is not None:
        return _rlpt_chunks(problem)
    for entry, _, _, _ in calls:
        if not callable(namespace.get(entry)):
            return _rlpt_chunks({"phase": "entry", "error": "no function %r defined" % entry, "error_type": "NameError"})
    if setup:
        try:
            exec(compile(setup, "<test setup>", "exec"), namespace)
        except BaseException as e:
            return _rlpt_chunks({"phase": "setup", "error": "the test setup code raised " + _rlpt_last(e), "error_type": type(e).__name__})
    results = []
    for entry, args, kwargs, wraps in calls:
        fn = namespace[entry]
        try:
            value = fn(*[_rlpt_argument(a, namespace) for a in args], **{k: _rlpt_argument(v, namespace) for k, v in kwargs})
            for name, extra, named in wraps:
                value = _rlpt_applied[name](value, *[_ast.literal_eval(a) for a in extra], **{k: _ast.literal_eval(v) for k, v in named})
            results.append({"ok": _rlpt_tag(value)})
        except BaseException as e:
            results.append({"error": _rlpt_last(e), "error_type": type(e).__name__})
    try:
        return _rlpt_chunks({"phase": "done", "results": results})
    except BaseException as e:
        return _rlpt_chunks({"phase": "encode", "error": _rlpt_last(e), "error_type": type(e).__name__})
