"""Sandbox worker: a long-lived process that forks one child per job.

Runs as a standalone script with only the standard library
(`python -I -S -B worker.py CONFIG_JSON`) so it can live inside a minimal,
read-only bubblewrap sandbox; the host side (`pool.py`) imports this module
only for the frame codec.

Per job the worker creates a fresh work directory and forks a child that:
starts a new session (so the whole job is one process group), redirects
stdin/stdout/stderr, closes every other descriptor, applies rlimits, drops to
an unprivileged uid when running as root (RLIMIT_NPROC does not bind root),
clears the environment, and then either runs a Python harness or execs
/bin/sh. The worker enforces the wall-clock deadline by SIGKILLing the child's
process group, drains output without buffering more than a bounded prefix,
and reports what happened. It never trusts the child's exit status: a Python
job counts only if the child wrote exactly one result frame carrying the
job's nonce, and the host grades the returned values against expected values
the child never sees.

Protocol on stdin/stdout: frames of a 4-byte big-endian length followed by
UTF-8 JSON. One request frame, one response frame, strictly alternating.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import stat
import struct
import sys
import tempfile
import time
import traceback

_HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 64 << 20
MAX_RESULT_BYTES = 4 << 20
MAX_SNAPSHOT_FILES = 256
MAX_SNAPSHOT_FILE_BYTES = 64 << 10
_RESULT_FD = 3
_SETUP_FD = 4
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


# ----------------------------------------------------------------------------- framing


def encode_frame(obj: object) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    if len(body) > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(body)) + body


def decode_length(header: bytes) -> int:
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ValueError(f"frame length {length} exceeds {MAX_FRAME_BYTES}")
    return length


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_frame(fd: int) -> dict | None:
    """Blocking read of one frame; None on EOF."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    body = _read_exact(fd, decode_length(header))
    return None if body is None else json.loads(body)


# ----------------------------------------------------------------------------- child side


def _encode_value(v: object, depth: int = 0) -> object:
    """JSON-safe, type-exact encoding of a returned value.

    Only exact builtin types are passed through, so a subclass with a rigged
    __eq__ cannot reach the grader; anything else becomes {"opaque": repr}.
    Tuples and lists both become JSON arrays.
    """
    t = type(v)
    if v is None or t is bool or t is float:
        return v
    if t is int:
        return v if v.bit_length() <= 4096 else {"opaque": f"<int of {v.bit_length()} bits>"}
    if t is str:
        return v if len(v) <= 4096 else {"opaque": f"<str of {len(v)} chars>"}
    if t in (list, tuple) and depth < 4 and len(v) <= 1024:
        return [_encode_value(x, depth + 1) for x in v]
    try:
        return {"opaque": repr(v)[:200]}
    except BaseException:
        return {"opaque": f"<unrepresentable {t.__name__}>"}


def _last_line(exc: BaseException) -> str:
    try:
        return traceback.format_exception_only(type(exc), exc)[-1].strip()[:500]
    except BaseException:
        return type(exc).__name__


def _run_python(job: dict) -> dict:
    """Compiles and runs the candidate; returns the result payload (no nonce)."""
    # Compilation happens here, in the limited child: constant folding of
    # e.g. 9**9**9 is candidate-controlled work.
    try:
        code = compile(job["source"], "<candidate>", "exec")
    except BaseException as e:
        return {"phase": "compile", "error": _last_line(e), "error_type": type(e).__name__}
    namespace = {"__name__": "__candidate__"}
    try:
        exec(code, namespace)
    except BaseException as e:
        return {"phase": "load", "error": _last_line(e), "error_type": type(e).__name__}
    entry = job.get("entry")
    if entry is None:
        return {"phase": "done", "results": []}
    fn = namespace.get(entry)
    if not callable(fn):
        return {"phase": "entry", "error": f"no callable {entry!r} defined", "error_type": "NameError"}
    results = []
    for args in job["calls"]:
        try:
            results.append({"ok": _encode_value(fn(*args))})
        except BaseException as e:
            results.append({"error": _last_line(e), "error_type": type(e).__name__})
    return {"phase": "done", "results": results}


def _apply_limits(limits: dict, timeout_s: float) -> None:
    cpu = int(limits.get("cpu_s") or int(timeout_s) + 1)
    pairs = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),  # SIGXCPU at soft, SIGKILL at hard
        (resource.RLIMIT_AS, (limits["address_space_bytes"],) * 2),
        (resource.RLIMIT_FSIZE, (limits["file_size_bytes"],) * 2),
        (resource.RLIMIT_NOFILE, (limits["open_files"],) * 2),
        (resource.RLIMIT_NPROC, (limits["processes"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    for which, value in pairs:
        resource.setrlimit(which, value)


def _child(job: dict, cfg: dict, workdir: str, res_w: int, out_w: int, setup_w: int) -> None:
    """Runs in the forked child; never returns.

    Setup failures are reported on the setup pipe, which is closed before any
    job code runs (and is close-on-exec for shell jobs): a job cannot forge a
    setup failure to have its attempt discarded as an infrastructure error.
    """
    try:
        os.setsid()
        # SIGXFSZ stays ignored (as Python sets it) so oversized writes fail with
        # EFBIG instead of killing the job without a result.
        for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.dup2(res_w, _RESULT_FD, inheritable=False)
        os.dup2(setup_w, _SETUP_FD, inheritable=False)
        setup_w = _SETUP_FD
        os.closerange(_SETUP_FD + 1, 1 << 16)
        os.chdir(workdir)
        _apply_limits(job["limits"], job["timeout_s"])
        if os.getuid() == 0 and cfg.get("uid") is not None:
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(cfg["uid"])
        env = {"PATH": _DEFAULT_PATH, "HOME": workdir, "LANG": "C.UTF-8", "TMPDIR": workdir}
        os.environ.clear()
        os.environ.update(env)
        if job["kind"] == "shell":
            os.execve("/bin/sh", ["sh", "-c", job["script"]], env)
        os.close(setup_w)
        nonce = job.pop("nonce")
        payload = _run_python(job)
        payload["nonce"] = nonce
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()  # os._exit below skips interpreter shutdown
            except BaseException:
                pass
        try:
            frame = encode_frame(payload)
        except BaseException as e:
            frame = encode_frame({"nonce": nonce, "phase": "encode", "error": _last_line(e), "error_type": type(e).__name__})
        _write_all(_RESULT_FD, frame)
        os._exit(0)
    except BaseException as e:
        try:
            _write_all(setup_w, f"job setup failed: {_last_line(e)}".encode("utf-8", "replace"))
        except BaseException:
            pass
        os._exit(70)
    finally:
        os._exit(71)


# ----------------------------------------------------------------------------- worker side


def _force_rmtree(path: str) -> None:
    def onerror(func, p, _exc):
        # The job may have chmod-ed its own directories to 000.
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


def _snapshot(workdir: str) -> dict:
    """Bounded description of the workspace after the job (regular files, dirs, links)."""
    files: dict[str, dict] = {}
    for root, dirs, names in os.walk(workdir):
        dirs.sort()
        for name in sorted(dirs) + sorted(names):
            if len(files) >= MAX_SNAPSHOT_FILES:
                return files
            path = os.path.join(root, name)
            rel = os.path.relpath(path, workdir)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                files[rel] = {"type": "dir"}
            elif stat.S_ISLNK(st.st_mode):
                files[rel] = {"type": "link", "target": os.readlink(path)}
            elif stat.S_ISREG(st.st_mode):
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                    try:
                        data = os.read(fd, MAX_SNAPSHOT_FILE_BYTES)
                    finally:
                        os.close(fd)
                except OSError:
                    continue
                files[rel] = {
                    "type": "file",
                    "size": st.st_size,
                    "data": data.decode("utf-8", "backslashreplace"),
                    "mode": stat.S_IMODE(st.st_mode),
                }
            else:
                files[rel] = {"type": "other"}
    return files


def _write_files(workdir: str, files: dict, uid: int | None, gid: int | None) -> None:
    for rel, content in files.items():
        path = os.path.normpath(os.path.join(workdir, rel))
        if not path.startswith(workdir + os.sep):
            raise ValueError(f"workspace path {rel!r} escapes the work directory")
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)
    if uid is not None:
        for root, dirs, names in os.walk(workdir):
            for name in dirs + names:
                os.chown(os.path.join(root, name), uid, gid)


def _reap(cfg: dict, job_uid: int | None) -> None:
    """SIGKILLs processes a job left behind outside its process group.

    "uid": every process of the job's dedicated uid (the worker is root and
    each worker slot has its own job uid). "namespace": every process of this
    sandbox's private PID namespace except its init (pid 1) and the worker.
    """
    mode = cfg.get("reap")
    if mode not in ("uid", "namespace") or (mode == "uid" and job_uid is None):
        return
    me = os.getpid()
    for _ in range(20):  # leftovers may fork while being scanned
        victims = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in (1, me):
                continue
            if mode == "uid":
                try:
                    if os.stat(f"/proc/{name}").st_uid != job_uid:
                        continue
                except OSError:
                    continue
            victims.append(int(name))
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.001)


def _reap_children() -> None:
    """Collects exited descendants (the worker is their subreaper) so zombies
    never pile up and count against the job uid's RLIMIT_NPROC."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def run_job(job: dict, cfg: dict) -> dict:
    """Runs one job in a forked child and returns the response frame."""
    start = time.monotonic()
    uid = cfg.get("uid") if os.getuid() == 0 else None
    workdir = tempfile.mkdtemp(prefix="job-", dir=cfg["tmp_root"])
    try:
        if uid is not None:
            os.chown(workdir, uid, cfg["gid"])
        _write_files(workdir, job.get("files") or {}, uid, cfg.get("gid"))
        res_r, res_w = os.pipe()
        out_r, out_w = os.pipe()
        setup_r, setup_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(res_r)
            os.close(out_r)
            os.close(setup_r)
            _child(job, cfg, workdir, res_w, out_w, setup_w)
        os.close(res_w)
        os.close(out_w)
        os.close(setup_w)
        response = _supervise(job, pid, res_r, out_r, start)
        # The child is dead and was the only writer: this read cannot block.
        with os.fdopen(setup_r, "rb") as f:
            setup_error = f.read(4096)
        if setup_error:
            response["setup_error"] = setup_error.decode("utf-8", "replace")
        _reap_children()
        if job["limits"]["processes"] > 0:
            _reap(cfg, uid)
        if job.get("collect_files"):
            response["files"] = _snapshot(workdir)
        return response
    finally:
        _force_rmtree(workdir)


def _supervise(job: dict, pid: int, res_r: int, out_r: int, start: float) -> dict:
    deadline = start + float(job["timeout_s"])
    output_limit = int(job.get("output_limit", 4096))
    result, output, output_bytes, result_overflow = bytearray(), bytearray(), 0, False
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    open_fds = {res_r, out_r}
    for fd in open_fds:
        poller.register(fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    timed_out = exited = False
    try:
        while open_fds:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            # Once the child itself has exited, descendants holding the pipes
            # open get only a short grace period before the group is killed.
            wait_s = min(deadline - now, 0.05) if exited else deadline - now
            events = poller.poll(wait_s * 1000.0)
            if not events and exited:
                break
            for fd, _ in events:
                if fd == pidfd:
                    exited = True
                    poller.unregister(pidfd)
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                elif fd == res_r:
                    if len(result) + len(chunk) > MAX_RESULT_BYTES:
                        result_overflow = True
                    else:
                        result += chunk
                else:
                    output_bytes += len(chunk)
                    if len(output) < output_limit:
                        output += chunk[: output_limit - len(output)]
    finally:
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()
            except ProcessLookupError:
                pass
        _, status, rusage = os.wait4(pid, 0)
        try:
            os.killpg(pid, signal.SIGKILL)  # stragglers left in the group
        except ProcessLookupError:
            pass
        os.close(pidfd)
        os.close(res_r)
        os.close(out_r)
    cpu_s = rusage.ru_utime + rusage.ru_stime
    code = os.waitstatus_to_exitcode(status)
    cpu_limit = int(job["limits"].get("cpu_s") or int(job["timeout_s"]) + 1)
    if not timed_out and code in (-signal.SIGXCPU, -signal.SIGKILL) and cpu_s >= cpu_limit - 0.05:
        timed_out = True
    response = {
        "nonce": job["nonce"],
        "exit_code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "timed_out": timed_out,
        "cpu_s": cpu_s,
        "wall_s": time.monotonic() - start,
        "output": output.decode("utf-8", "backslashreplace"),
        "output_bytes": output_bytes,
        "result": None,
        "result_problem": None,
    }
    if job["kind"] == "python" and not timed_out:
        response["result"], response["result_problem"] = _parse_result(bytes(result), result_overflow, job["nonce"])
    return response


def _parse_result(data: bytes, overflow: bool, nonce: str) -> tuple[dict | None, str | None]:
    if overflow:
        return None, "result exceeded the size limit"
    if not data:
        return None, "no result was reported"
    try:
        length = decode_length(data[: _HEADER.size])
        if len(data) != _HEADER.size + length:
            return None, "result stream had trailing or missing bytes"
        payload = json.loads(data[_HEADER.size :])
    except (ValueError, struct.error):
        return None, "result was not a valid frame"
    if not isinstance(payload, dict) or payload.get("nonce") != nonce:
        return None, "result did not carry the job nonce"
    return payload, None


def _prctl_setup() -> None:
    """Dies with the host even when it is SIGKILLed (PR_SET_PDEATHSIG), and
    adopts orphaned job processes (PR_SET_CHILD_SUBREAPER) so it can reap them."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        libc.prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


# Imported before any job so that (a) jobs do not pay for them and (b) jobs,
# which run as an unprivileged uid, can use them even when the interpreter's
# own directory is not readable by that uid.
_PRELOAD = ("bisect", "collections", "fractions", "functools", "heapq", "itertools", "math", "operator", "random", "re", "statistics", "string")


def main() -> None:
    cfg = json.loads(sys.argv[1])
    _prctl_setup()
    for module in _PRELOAD:
        __import__(module)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # fd 0/1 carry the protocol; park copies and point the std streams away
    # so nothing else in this process can corrupt the frame stream.
    req_fd, resp_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    root = tempfile.mkdtemp(prefix="rlpt-sandbox-", dir=cfg.get("tmp_dir"))
    os.chmod(root, 0o711)  # the unprivileged job uid must traverse, not list
    cfg["tmp_root"] = root
    try:
        _write_all(resp_fd, encode_frame({"ready": True, "pid": os.getpid(), "uid": os.getuid()}))
        while True:
            job = read_frame(req_fd)
            if job is None:
                return
            try:
                response = run_job(job, cfg)
            except Exception as e:
                response = {"nonce": job.get("nonce"), "worker_error": _last_line(e)}
            _write_all(resp_fd, encode_frame(response))
    finally:
        _force_rmtree(root)


if __name__ == "__main__":
    main()
