"""The one encoding of values a Python job returns to the host: tagged plain data.

None, bool, int, float and str cross as themselves; {"list": [...]},
{"tuple": [...]}, {"set": [...]}, {"frozenset": [...]}, {"dict": [[key,
value], ...]} (a Counter, OrderedDict or defaultdict as the dict it is),
{"bytes": hex} and {"complex": [real, imag]} carry the other builtin types,
items tagged in turn; a value of any other type (a subclass included) is
{"opaque": its type's name}, never its repr or its state. Only exact builtin
types are looked at, so no object of the candidate's can take part in how a
value is sent, nor reach the host: the host decodes with
`environments.programs.values.untag` (exact builtin types; an opaque value
stays a placeholder equal to nothing) and compares with
`environments.programs.values.same`.

Who encodes with it: the sandbox worker, for the value of every call of a
`PythonJob` (it imports this module when it starts, before any job: standalone
in the sandbox, where only this directory exists, as it imports cleanup), and
every program-test harness, which is shipped to the sandbox as source headed
by this file's text (`environments.programs.harness.source`). Its names carry
the harnesses' `_rlpt_` prefix for that reason.
"""
# Imported by the standalone worker and shipped as source: nothing above the
# standard library may be imported here.

import collections as _collections

# Taken when this module loads, before any candidate's program runs (which may
# patch builtins or collections): the only code that decides how a value is sent.
_rlpt_dict_items = dict.items
# Dicts by another name: Python's == compares them with a dict as a dict, and the
# expected side is always a plain dict, so they cross as one (their exact types only).
_rlpt_dicts = (dict, _collections.Counter, _collections.OrderedDict, _collections.defaultdict)


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
