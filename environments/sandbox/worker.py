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
/bin/sh. The worker enforces the job's two time limits by SIGKILLing the
child's process group: its CPU limit (`timeout_s`: CPU seconds of all its
processes together, read from the worker's cgroup or summed over the job's
processes in /proc, cleanup._CpuMeter; RLIMIT_CPU backs it up per process)
and its wall-clock ceiling (`wall_s`), and the job's whole-job memory cap by
watching its cgroup's OOM counter or polling its memory use
(cleanup._MemoryMeter). It drains output without
buffering more than a bounded prefix, and reports what happened. After the
job it reaps leftover processes and removes the System V IPC objects and
scratch files the job left outside its work directory (cleanup._clean_leftovers). It never trusts the child's exit status: a Python
job counts only if the child wrote exactly one result frame carrying the
job's nonce, and the host grades the returned values, sent as tagged plain
data (tagged.py: exact builtin types only), against expected values the child
never sees. Afterwards it removes the work directory iteratively and
fd-relative (no depth or path length breaks it); should that fail, the answer
asks the host to retire this worker. What leaves the worker is bounded
(output, result, workspace snapshot: see the MAX_* constants) and valid text.

Protocol on stdin/stdout: frames of a 4-byte big-endian length followed by
UTF-8 JSON. One request frame, one response frame, strictly alternating.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import resource
import select
import signal
import socket
import stat
import struct
import sys
import tempfile
import time
import traceback

try:  # imported as part of the package (the host's pool)
    from environments.sandbox import cleanup
    from environments.sandbox.tagged import _rlpt_tag
except ImportError:  # run as the sandbox's standalone script (`python -I`: no script dir on sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cleanup
    from tagged import _rlpt_tag

_HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 64 << 20
MAX_RESULT_BYTES = 4 << 20
# Output kept per job, whatever output_limit a job asks for.
MAX_OUTPUT_BYTES = 1 << 20
# Workspace snapshot bounds (see _snapshot): entries listed, directory depth
# descended, path length, contents returned per file and in all. With names,
# link targets and contents escaped (at most 6 JSON bytes per byte), a response
# stays far below MAX_FRAME_BYTES.
MAX_SNAPSHOT_FILES = 256
MAX_SNAPSHOT_DEPTH = 32
MAX_SNAPSHOT_PATH_CHARS = 1024
MAX_SNAPSHOT_FILE_BYTES = 64 << 10
MAX_SNAPSHOT_BYTES = 1 << 20
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


def valid_text(text: str) -> str:
    """`text` as strict-UTF-8-encodable text: lone surrogates (from an exception
    message, a non-UTF-8 file name) become their backslash escape."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _fs_text(name: str) -> str:
    """A file name or link target as valid text (non-UTF-8 bytes escaped as in file data)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _last_line(exc: BaseException) -> str:
    try:
        return valid_text(traceback.format_exception_only(type(exc), exc)[-1].strip()[:500])
    except BaseException:
        return type(exc).__name__


def _run_python(job: dict) -> dict:
    """Compiles and runs the candidate; returns the result payload (no nonce)."""
    # Compilation happens here, in the limited child: constant folding of
    # e.g. 9**9**9 is candidate-controlled work.
    try:
        code = compile(job.pop("source"), "<candidate>", "exec")
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
        try:  # the one encoding of returned values (tagged.py), bound when the worker started
            results.append({"ok": _rlpt_tag(fn(*args))})
        except BaseException as e:
            results.append({"error": _last_line(e), "error_type": type(e).__name__})
    return {"phase": "done", "results": results}


def _rlimit_cpu(timeout_s: float) -> int:
    """RLIMIT_CPU's soft limit for a job allowed `timeout_s` CPU seconds in all.

    Only a backstop per process for the worker's own accounting, which decides
    (cleanup._CpuMeter): the kernel checks RLIMIT_CPU against tick-sampled
    time, which can run ahead of a process's real CPU time (SIGXCPU at 0.92 s
    of a 1 s limit on our VMs), so it sits a second above the limit."""
    return math.ceil(timeout_s) + 1


def _apply_limits(limits: dict, timeout_s: float) -> None:
    cpu = _rlimit_cpu(timeout_s)
    pairs = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),  # SIGXCPU at soft, SIGKILL at hard
        (resource.RLIMIT_AS, (limits["address_space_bytes"],) * 2),
        (resource.RLIMIT_FSIZE, (limits["file_size_bytes"],) * 2),
        (resource.RLIMIT_NOFILE, (limits["open_files"],) * 2),
        (resource.RLIMIT_NPROC, (limits["processes"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_MSGQUEUE, (0, 0)),  # no POSIX message queues: they would outlive the job
    ]
    for which, value in pairs:
        resource.setrlimit(which, value)


def _oom_victim_first() -> None:
    """Makes this job (and what it forks) the OOM killer's first choice, in the
    worker's memory cgroup and on the host alike: never the worker or the host."""
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, b"1000")
        finally:
            os.close(fd)
    except OSError:
        pass


def _child(job: dict, cfg: dict, workdir: str, res_w: int, out_w: int, setup_w: int) -> None:
    """Runs in the forked child; never returns.

    Setup failures are reported on the setup pipe, which is closed before any
    job code runs (and is close-on-exec for shell jobs): a job cannot forge a
    setup failure to have its attempt discarded as an infrastructure error.
    """
    try:
        os.setsid()
        # Dies with the worker (the worker's own handler kills the job when the
        # host dies; this covers a worker that is itself SIGKILLed).
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != cfg["zygote_pid"]:
            raise RuntimeError("the worker's zygote exited before the job started")
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
        _oom_victim_first()
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


# ----------------------------------------------------------------------------- the zygote
#
# Every job runs in a process forked from the zygote, a child the worker forks
# once it has imported what jobs use (its preload) and before it reads its
# first job. The worker itself reads every job's frame from the host (the
# candidate's source, a reference script, another candidate's answer, hidden
# test data), and freed memory is not cleared: a job forked from the worker
# would inherit a heap holding earlier jobs' frames, readable through
# /proc/self/mem. The zygote never holds a job: it receives only the job's
# pipes (SCM_RIGHTS) and forks; the job's child then reads its own job, and
# nothing else, from a socket the worker writes it to. The worker is made
# non-dumpable, so no process of its uid can read its memory either.
#
# Protocol on the zygote's SOCK_SEQPACKET socket, one exchange at a time:
#   worker: b"fork" + 4 fds (job socket, result pipe, output pipe, setup pipe)
#   zygote: pid (>i) of the forked job child
#   worker: b"wait" + pid (>i), once the job is over and its group killed
#   zygote: wait status, user and system CPU seconds of the child (>idd)

_PR_SET_DUMPABLE = 4
_ZYGOTE_FORK = b"fork"
_ZYGOTE_WAIT = b"wait"
_PID = struct.Struct(">i")
_WAITED = struct.Struct(">idd")
_ZYGOTE_ANSWER_S = 30.0
_JOB_FDS = 4
# Received descriptors are moved this high in the job's child, above the
# numbers it dup2()s its pipes to (0 to _SETUP_FD).
_FD_FLOOR = 16


class ZygoteError(Exception):
    """The zygote died or stopped answering: this worker can run no more jobs."""


class _Zygote:
    """The worker's handle on its zygote process."""

    def __init__(self, cfg: dict, protocol_fds: tuple[int, ...]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                for fd in protocol_fds:  # the host's pipes stay the worker's alone
                    os.close(fd)
                _zygote_main(cfg, theirs)
            finally:
                os._exit(1)
        theirs.close()
        ours.settimeout(_ZYGOTE_ANSWER_S)
        self.pid, self._sock = pid, ours

    def fork(self, fds: list[int]) -> int:
        """Forks a job child holding `fds`; returns its pid."""
        try:
            socket.send_fds(self._sock, [_ZYGOTE_FORK], fds)
            (pid,) = _PID.unpack(self._answer(_PID.size))
        except (OSError, struct.error) as e:
            raise ZygoteError(f"the zygote did not fork the job: {e}") from e
        if pid <= 0:
            raise ZygoteError("the zygote could not fork the job")
        return pid

    def wait(self, pid: int) -> tuple[int, float]:
        """(wait status, CPU seconds) of the exited job child `pid`."""
        try:
            self._sock.send(_ZYGOTE_WAIT + _PID.pack(pid))
            status, user_s, system_s = _WAITED.unpack(self._answer(_WAITED.size))
        except (OSError, struct.error) as e:
            raise ZygoteError(f"the zygote did not report the job's exit: {e}") from e
        return status, user_s + system_s

    def _answer(self, size: int) -> bytes:
        data = self._sock.recv(64)
        if len(data) != size:
            raise ZygoteError("the zygote closed its socket" if not data else "the zygote sent a malformed answer")
        return data


def _zygote_main(cfg: dict, sock: socket.socket) -> None:
    """The zygote's loop; never returns. Holds no job material, ever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the worker's host_died handler is the worker's
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != cfg["worker_pid"]:
        os._exit(1)
    _prctl(_PR_SET_DUMPABLE, 1)  # the worker's flag: job children start as before
    cfg["zygote_pid"] = os.getpid()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 64, _JOB_FDS)
        except OSError:
            os._exit(1)
        if not message:
            os._exit(0)  # the worker is gone
        if message == _ZYGOTE_FORK and len(fds) == _JOB_FDS:
            try:
                pid = os.fork()
            except OSError:
                pid = -1
            if pid == 0:
                sock.close()
                _job_child(cfg, fds)
            for fd in fds:
                os.close(fd)
            sock.send(_PID.pack(pid))
        elif message.startswith(_ZYGOTE_WAIT) and not fds:
            (pid,) = _PID.unpack(message[len(_ZYGOTE_WAIT):])
            _, status, rusage = os.wait4(pid, 0)
            sock.send(_WAITED.pack(status, rusage.ru_utime, rusage.ru_stime))
        else:
            os._exit(1)


def _job_child(cfg: dict, fds: list[int]) -> None:
    """In the job's child, just forked from the zygote: reads its job (all of
    it, and only it) from the worker, then becomes the job (_child). Never returns."""
    job_fd, res_w, out_w, setup_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _FD_FLOOR) for fd in fds)
    for fd in fds:
        os.close(fd)
    try:
        chunks = []
        while chunk := os.read(job_fd, 1 << 20):
            chunks.append(chunk)
        os.close(job_fd)
        job = json.loads(b"".join(chunks))
        del chunks
    except BaseException as e:
        try:
            _write_all(setup_w, f"job setup failed: the job did not arrive ({_last_line(e)})".encode("utf-8", "replace"))
        finally:
            os._exit(70)
    _child(job, cfg, job.pop("workdir"), res_w, out_w, setup_w)


def _hand_over(job: dict, workdir: str, sock: socket.socket) -> None:
    """Writes the job to its child, then forgets what the child alone needs
    (source, calls, files, script): the worker keeps only its limits."""
    data = json.dumps({**job, "workdir": workdir}, separators=(",", ":")).encode("utf-8")
    for key in ("source", "calls", "files", "script"):
        job.pop(key, None)
    try:
        sock.settimeout(float(job["wall_s"]))
        sock.sendall(data, socket.MSG_NOSIGNAL)
    except OSError:
        pass  # the child died before reading it: its setup error, or no result, says so
    finally:
        del data
        sock.close()


# ----------------------------------------------------------------------------- worker side


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_subdir(top: int, parts: tuple[str, ...]) -> int:
    """fd of the directory top/parts[0]/parts[1]/..., opened one name at a time
    without following symlinks (for parts == (), a duplicate of top)."""
    fd = os.dup(top)
    for part in parts:
        try:
            sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = sub
    return fd


def _read_file(dir_fd: int, name: str) -> tuple[bytes, int, str] | None:
    """(first MAX_SNAPSHOT_FILE_BYTES bytes, full size, sha256 of the full
    contents) of a regular file, or None when it cannot be read as one."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest, head, size = hashlib.sha256(), b"", 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return head, size, digest.hexdigest()
            if len(head) < MAX_SNAPSHOT_FILE_BYTES:
                head += chunk[: MAX_SNAPSHOT_FILE_BYTES - len(head)]
            digest.update(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def _snapshot(workdir: str) -> tuple[dict, bool]:
    """Bounded description of the workspace after the job, and whether it is complete.

    Entries (regular files, directories, symlinks, which are never followed,
    and "other") are listed top-down, each directory's entries sorted and
    listed before its subdirectories are entered, up to MAX_SNAPSHOT_FILES
    entries, MAX_SNAPSHOT_DEPTH levels and MAX_SNAPSHOT_PATH_CHARS per path;
    anything left out makes the listing incomplete. Directories are opened one
    name at a time (fd-relative), so depth and path length cannot break it.

    Every regular file carries its full "size" and the "sha256" of its full
    contents (None, with empty data, if it could not be read). Its "data" is
    the start of its contents (non-UTF-8 bytes backslash-escaped): at most
    MAX_SNAPSHOT_FILE_BYTES per file and MAX_SNAPSHOT_BYTES in all, given to
    the smallest files first; "truncated" is True when data is not the whole
    file. Names and link targets are valid text (bad bytes escaped likewise).
    """
    files: dict[str, dict] = {}
    contents: list[tuple[int, str, bytes]] = []  # (size, key, head) of every readable file
    complete = True
    try:
        top = os.open(workdir, _DIR_FLAGS)
    except OSError:
        return files, False
    try:
        stack: list[tuple[str, ...]] = [()]
        while stack:
            parts = stack.pop()
            try:
                fd = _open_subdir(top, parts)
            except OSError:
                complete = False
                continue
            try:
                names = []
                with os.scandir(fd) as it:
                    for entry in it:
                        if len(names) + len(files) >= MAX_SNAPSHOT_FILES:
                            complete = False
                            break
                        names.append(entry.name)
                subdirs = []
                for name in sorted(names):
                    key = "/".join(_fs_text(p) for p in parts + (name,))
                    if len(key) > MAX_SNAPSHOT_PATH_CHARS:
                        complete = False
                        continue
                    try:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue  # vanished
                    if stat.S_ISDIR(st.st_mode):
                        files[key] = {"type": "dir"}
                        if len(parts) + 1 < MAX_SNAPSHOT_DEPTH:
                            subdirs.append(parts + (name,))
                        else:
                            complete = False
                    elif stat.S_ISLNK(st.st_mode):
                        try:
                            target = _fs_text(os.readlink(name, dir_fd=fd))
                        except OSError:
                            target = ""
                        files[key] = {"type": "link", "target": target}
                    elif stat.S_ISREG(st.st_mode):
                        read = _read_file(fd, name)
                        info = {"type": "file", "size": st.st_size, "mode": stat.S_IMODE(st.st_mode), "sha256": None, "data": "", "truncated": True}
                        if read is not None:
                            head, info["size"], info["sha256"] = read
                            contents.append((info["size"], key, head))
                        files[key] = info
                    else:
                        files[key] = {"type": "other"}
                stack.extend(reversed(subdirs))
            finally:
                os.close(fd)
    finally:
        os.close(top)
    budget = MAX_SNAPSHOT_BYTES
    for size, key, head in sorted(contents, key=lambda c: (c[0], c[1])):
        data = head[:budget]
        budget -= len(data)
        files[key]["data"] = data.decode("utf-8", "backslashreplace")
        files[key]["truncated"] = len(data) < size
    return files, complete


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


def run_job(job: dict, cfg: dict, zygote: _Zygote) -> dict:
    """Runs one job in a child forked by `zygote` and returns the response frame."""
    start = time.monotonic()
    uid = cfg.get("uid") if os.getuid() == 0 else None
    workdir = tempfile.mkdtemp(prefix="job-", dir=cfg["tmp_root"])
    try:
        if uid is not None:
            os.chown(workdir, uid, cfg["gid"])
        _write_files(workdir, job.get("files") or {}, uid, cfg.get("gid"))
        ipc_before = cleanup._ipc_before(cfg)
        cpu = cleanup._CpuMeter(job, cfg, uid)  # its baseline: before the child exists
        res_r, res_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        setup_r, setup_w = os.pipe2(os.O_CLOEXEC)
        job_w, job_r = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = zygote.fork([job_r.fileno(), res_w, out_w, setup_w])
        except ZygoteError:
            for fd in (res_r, res_w, out_r, out_w, setup_r, setup_w):
                os.close(fd)
            job_w.close()
            raise
        finally:
            job_r.close()
        _RUNNING.update(pid=pid, uid=uid)
        os.close(res_w)
        os.close(out_w)
        os.close(setup_w)
        _hand_over(job, workdir, job_w)
        meter = cleanup._MemoryMeter(job, cfg, pid, uid, ipc_before)
        cpu.pid = pid
        response = _supervise(job, pid, res_r, out_r, start, meter, cpu, zygote.wait)
        # The child is dead and was the only writer: this read cannot block.
        with os.fdopen(setup_r, "rb") as f:
            setup_error = f.read(4096)
        if setup_error:
            response["setup_error"] = setup_error.decode("utf-8", "replace")
        cleanup._reap_children()
        if job["limits"]["processes"] > 0:
            cleanup._reap(cfg, uid)
            cleanup._reap_cgroup(cfg)
        _charge_cpu(response, cpu)
        cleanup._clean_leftovers(cfg, uid, ipc_before, meter, response, keep=workdir)
        if job.get("collect_files"):
            response["files"], complete = _snapshot(workdir)
            response["files_truncated"] = not complete
    finally:
        _RUNNING.clear()
        removed = cleanup._force_rmtree(workdir)
    if not removed:
        # Whatever was left must not reach later jobs: the host retires this
        # worker (and, with bwrap, its whole tmpfs) after this answer.
        response["retire"] = True
    return response


def _charge_cpu(response: dict, cpu: cleanup._CpuMeter) -> None:
    """Once every process of the job is gone: the CPU time it used in all, and
    a TIMEOUT when that is over its limit (one that finished between two
    checks, or whose processes each stayed under RLIMIT_CPU)."""
    response["cpu_s"] = cpu.final(response["cpu_s"])
    if response["timed_out"] != "cpu" and response["cpu_s"] > cpu.limit:
        response["timed_out"], response["result"], response["result_problem"] = "cpu", None, None


def _supervise(job: dict, pid: int, res_r: int, out_r: int, start: float, meter: cleanup._MemoryMeter | None,
               cpu: cleanup._CpuMeter | None, wait) -> dict:
    """Runs the job to its end, its CPU limit, its wall-clock ceiling or its
    memory cap; returns the response ("timed_out": False, "cpu" or "wall").
    `wait(pid)` collects the killed child: (wait status, CPU seconds)."""
    deadline = start + float(job["wall_s"])
    output_limit = min(int(job.get("output_limit", 4096)), MAX_OUTPUT_BYTES)
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
                timed_out = "wall"
                break
            # Once the child itself has exited, descendants holding the pipes
            # open get only a short grace period before the group is killed.
            wait_s = min(deadline - now, 0.05) if exited else deadline - now
            if meter is not None and not exited:
                wait_s = min(wait_s, max(meter.due - now, 0.0))
            if cpu is not None and not exited:
                wait_s = min(wait_s, max(cpu.due - now, 0.0))
            events = poller.poll(wait_s * 1000.0)
            if meter is not None and not exited and meter.check():
                break  # over the job's memory cap: kill it now (reported by run_job)
            if cpu is not None and not exited and cpu.check():
                timed_out = "cpu"
                break
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
        try:
            status, cpu_s = wait(pid)
        finally:
            try:
                os.killpg(pid, signal.SIGKILL)  # stragglers left in the group
            except ProcessLookupError:
                pass
            os.close(pidfd)
            os.close(res_r)
            os.close(out_r)
    # cpu_s: of the job's top process and the children it waited for; run_job
    # charges the whole job (_charge_cpu), which also decides a TIMEOUT that
    # RLIMIT_CPU's signals ended.
    code = os.waitstatus_to_exitcode(status)
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
    if job["kind"] == "python" and not timed_out:  # (_charge_cpu drops a result found over the CPU limit)
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


_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_libc = None
# The job being supervised, {"pid", "uid"}, for _host_died.
_RUNNING: dict = {}


def _prctl(option: int, arg: int) -> None:
    global _libc
    try:
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(option, arg)
    except (OSError, AttributeError):
        pass


def _prctl_setup(cfg: dict) -> None:
    """Dies with the host even when it is SIGKILLed, taking its job along, and
    adopts orphaned job processes (PR_SET_CHILD_SUBREAPER) so it can reap them.

    The host's death delivers SIGTERM (PR_SET_PDEATHSIG), whose handler
    SIGKILLs the running job's process group and its leftovers (cleanup._reap) before
    exiting; the job's own death signal alone would miss its descendants. The
    death signal fires when the *thread* that forked this process exits, not
    the host process; the host therefore forks every worker from one
    long-lived thread (pool._Spawner), which ends only with the host process.
    """

    def host_died(_signum: int, _frame: object) -> None:
        try:
            pid = _RUNNING.get("pid")
            if pid is not None:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            cleanup._reap(cfg, _RUNNING.get("uid"))
        finally:
            os._exit(1)

    signal.signal(signal.SIGTERM, host_died)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


# Imported before any job so that (a) jobs do not pay for them and (b) jobs,
# which run as an unprivileged uid, can use them even when the interpreter's
# own directory is not readable by that uid.
_PRELOAD = ("bisect", "collections", "fractions", "functools", "heapq", "itertools", "math", "operator", "random", "re", "statistics", "string")


def main() -> None:
    cfg = json.loads(sys.argv[1])
    cfg["worker_pid"] = os.getpid()
    _prctl_setup(cfg)
    # A kernel worker (environments/cad) imports a heavy library once here, so
    # that each forked job finds it loaded: its environment (thread counts set
    # before the import), its directories (bound read-only) and modules.
    os.environ.update(cfg.get("env") or {})
    sys.path.extend(cfg.get("paths") or ())
    for module in (*_PRELOAD, *(cfg.get("preload") or ())):
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
    cleanup._prepare_cleaning(cfg)
    try:
        # No process of the worker's uid may read its memory (/proc/PID/mem,
        # ptrace): it holds every job's frame. Then the zygote, before any job.
        _prctl(_PR_SET_DUMPABLE, 0)
        zygote = _Zygote(cfg, (req_fd, resp_fd))
        cfg["zygote_pid"] = zygote.pid
        _write_all(resp_fd, encode_frame({"ready": True, "pid": os.getpid(), "uid": os.getuid(), "tmp_root": root, "zygote_pid": zygote.pid}))
        while True:
            job = read_frame(req_fd)
            if job is None:
                return
            try:
                response = run_job(job, cfg, zygote)
            except ZygoteError as e:
                response = {"nonce": job.get("nonce"), "worker_error": _last_line(e), "zygote_lost": True, "retire": True}
            except Exception as e:
                response = {"nonce": job.get("nonce"), "worker_error": _last_line(e)}
            _write_all(resp_fd, _bounded_frame(response))
            if response.get("retire"):
                return
    finally:
        cleanup._force_rmtree(root)


def _bounded_frame(response: dict) -> bytes:
    """The response frame. The bounds on output, result and snapshot keep every
    response far below MAX_FRAME_BYTES; should one still exceed it, it loses
    its bulky parts (flagged) rather than crashing the worker."""
    try:
        return encode_frame(response)
    except ValueError:
        pass
    if "files" in response:
        response["files"], response["files_truncated"] = {}, True
    response["output"] = response.get("output", "")[:4096]
    try:
        return encode_frame(response)
    except ValueError:
        pass
    response["result"], response["result_problem"] = None, "result exceeded the size limit"
    return encode_frame(response)


if __name__ == "__main__":
    main()
