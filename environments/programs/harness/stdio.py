"""The stdio harness: runs the program as __main__ with input.txt on fd 0 and
output.txt on fd 1, returning at most CAP bytes of its output. Shipped after
wire.py (see harness.source)."""

from environments.programs.harness.wire import (  # noqa: F401  shipped after wire.py, not importing it
    _rlpt_applied, _rlpt_chunks, _rlpt_last, _rlpt_line, _rlpt_load, _rlpt_tag, _sys)

CAP = 1 << 20  # bytes of output read back

def _rlpt_main(source):
    import os as _os
    fd = _os.open("input.txt", _os.O_RDONLY)
    _os.dup2(fd, 0)
    _os.close(fd)
    fd = _os.open("output.txt", _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC, 0o600)
    _os.dup2(fd, 1)
    _os.close(fd)
    _sys.stdin = open(0, "r", closefd=False)
    _sys.stdout = open(1, "w", closefd=False)
    error = None
    try:
        code = compile(source, "<program>", "exec")
    except BaseException as e:
        return _rlpt_chunks({"phase": "compile", "error": _rlpt_last(e), "error_type": type(e).__name__})
    try:
        exec(code, {"__name__": "__main__"})
    except SystemExit as e:
        if e.code not in (None, 0):
            error = {"error": "exit status %r" % (e.code,), "error_type": "SystemExit"}
    except BaseException as e:
        error = {"error": _rlpt_last(e), "error_type": type(e).__name__}
    try:
        _sys.stdout.flush()
    except BaseException:
        pass
    with open("output.txt", "rb") as f:
        data = f.read(CAP + 1)
    payload = {"phase": "done", "stdout": data[:CAP].decode("utf-8", "replace"), "truncated": len(data) > CAP}
    payload.update(error or {})
    return _rlpt_chunks(payload)
