"""Host side of the sandbox: a thread-safe pool of pre-forked workers.

Each slot of the pool owns at most one long-lived worker process
(`worker.py`), started lazily by a `Launcher` (plain, or wrapped in bubblewrap)
and replaced when it dies, hangs, or has served `max_jobs_per_worker` jobs.
`SandboxPool.run` blocks until a slot is free, so any number of threads (e.g.
envs stepped from a ThreadPoolExecutor) can share one pool; at most `size`
jobs run at once. Infrastructure failures never raise: they come back as
`JobResult(status=Status.SANDBOX_ERROR)` so callers can mask them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import queue
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Protocol

from environments.sandbox import worker as wire

log = logging.getLogger(__name__)

# Extra host-side wait beyond a job's own timeout before the worker is
# declared hung (covers fork, workspace setup and snapshotting).
_HOST_GRACE_S = 5.0
_START_TIMEOUT_S = 20.0
WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-job resource limits, applied with setrlimit in the job's process.

    address_space_bytes: RLIMIT_AS (virtual memory) per process.
    cpu_s: RLIMIT_CPU in CPU seconds; None means ceil(timeout_s) + 1.
    file_size_bytes: RLIMIT_FSIZE, the largest file the job may write.
    open_files: RLIMIT_NOFILE.
    processes: RLIMIT_NPROC for the job's uid; 0 forbids fork entirely.
    """

    address_space_bytes: int = 256 << 20
    cpu_s: int | None = None
    file_size_bytes: int = 1 << 20
    open_files: int = 64
    processes: int = 0

    def to_wire(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PythonJob:
    """Exec `source`, then call `entry(*args)` for each args list in `calls`.

    Arguments and return values cross the process boundary as JSON; returned
    values are type-exact (see worker._encode_value).
    """

    source: str
    entry: str | None = None
    calls: tuple[tuple[Any, ...], ...] = ()
    timeout_s: float = 1.0
    limits: Limits = Limits()
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    output_limit: int = 4096

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": "python",
            "source": self.source,
            "entry": self.entry,
            "calls": [list(c) for c in self.calls],
            "timeout_s": self.timeout_s,
            "limits": self.limits.to_wire(),
            "files": self.files,
            "output_limit": self.output_limit,
        }


@dataclasses.dataclass(frozen=True)
class ShellJob:
    """Run `script` with /bin/sh -c in a workspace pre-filled with `files`;
    the final workspace comes back as `JobResult.files`."""

    script: str
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    timeout_s: float = 2.0
    limits: Limits = Limits(processes=64)
    output_limit: int = 4096

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": "shell",
            "script": self.script,
            "files": self.files,
            "timeout_s": self.timeout_s,
            "limits": self.limits.to_wire(),
            "collect_files": True,
            "output_limit": self.output_limit,
        }


class Status(enum.Enum):
    OK = "ok"  # the job ran to completion (its own result may still be an error)
    TIMEOUT = "timeout"  # wall-clock or CPU limit hit; the job was killed
    NO_RESULT = "no_result"  # a Python job ended without a valid nonce-tagged result
    SANDBOX_ERROR = "sandbox_error"  # the worker/launcher failed; not the job's fault


@dataclasses.dataclass(frozen=True)
class JobResult:
    """What happened to one job.

    result: the Python harness payload ({"phase", "results" | "error", ...}) for
      OK Python jobs, else None.
    exit_code / signal: of the job's top process (informational only; never
      used to decide success).
    output: first `output_limit` bytes of stdout+stderr, decoded; output_bytes
      is the total the job wrote.
    files: workspace snapshot for shell jobs.
    wall_s / cpu_s: seconds of wall-clock time (worker side) and CPU time.
    detail: why the status is not OK.
    """

    status: Status
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    signal: int | None = None
    output: str = ""
    output_bytes: int = 0
    files: dict[str, Any] | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    detail: str = ""


class Launcher(Protocol):
    """Builds the command line that starts one worker."""

    name: str

    def argv(self, worker_config: dict[str, Any]) -> list[str]: ...


class PlainLauncher:
    """Worker as a plain child process; isolation is rlimits + uid drop only."""

    name = "plain"

    def __init__(self, python: str | None = None) -> None:
        self._python = python or _system_python()

    def argv(self, worker_config: dict[str, Any]) -> list[str]:
        return [self._python, "-I", "-S", "-B", WORKER_SCRIPT, json.dumps(worker_config)]


def _system_python() -> str:
    # The worker needs only the standard library; the resolved interpreter
    # avoids venv indirection (and lets a sandbox bind just its prefix).
    return os.path.realpath(sys.executable)


# Jobs of worker slot i run as uid/gid JOB_UID_BASE + i when the worker is root:
# a uid no other process uses, so leftovers can be reaped by uid.
JOB_UID_BASE = 61000


def default_worker_config() -> dict[str, Any]:
    root = os.geteuid() == 0
    return {"uid": JOB_UID_BASE if root else None, "gid": JOB_UID_BASE if root else None, "tmp_dir": None, "reap": "uid" if root else "none"}


class WorkerError(Exception):
    pass


class _Worker:
    """One live worker process and its framed pipes. Not thread-safe; owned by a slot."""

    def __init__(self, argv: list[str]) -> None:
        self.jobs = 0
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            close_fds=True,
            start_new_session=True,
        )
        hello = self._read(time.monotonic() + _START_TIMEOUT_S)
        if not hello.get("ready"):
            raise WorkerError(f"worker did not start: {hello}")

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        try:
            self.proc.stdin.write(wire.encode_frame(message))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerError(f"worker stdin closed: {e}") from e
        self.jobs += 1
        return self._read(time.monotonic() + timeout_s)

    def _read(self, deadline: float) -> dict[str, Any]:
        fd = self.proc.stdout.fileno()
        header = self._read_exact(fd, 4, deadline)
        body = self._read_exact(fd, wire.decode_length(header), deadline)
        return json.loads(body)

    def _read_exact(self, fd: int, n: int, deadline: float) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerError("worker did not answer in time")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                code = self.proc.poll()
                raise WorkerError(f"worker exited (status {code})")
            buf += chunk
        return bytes(buf)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.proc.wait()

    def close(self) -> None:
        """Graceful stop: EOF on stdin lets the worker clean its temp dir."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=2.0)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class _Slot:
    def __init__(self, index: int) -> None:
        self.index = index
        self.worker: _Worker | None = None


class SandboxPool:
    """Fixed number of worker slots shared by all threads of the host process.

    size: concurrent jobs (defaults to the CPU count).
    launcher: how workers start (`PlainLauncher` or `bwrap.BwrapLauncher`).
    max_jobs_per_worker: recycle a worker after this many jobs, bounding any
      state (leaked memory, a poisoned interpreter) a job might leave behind.
    """

    def __init__(
        self,
        size: int | None = None,
        launcher: Launcher | None = None,
        max_jobs_per_worker: int = 1000,
        worker_config: dict[str, Any] | None = None,
    ) -> None:
        self.size = size or os.cpu_count() or 1
        self.launcher = launcher or PlainLauncher()
        self.max_jobs_per_worker = max_jobs_per_worker
        self._config = worker_config or default_worker_config()
        self._slots: queue.LifoQueue[_Slot] = queue.LifoQueue()
        self._all = [_Slot(i) for i in range(self.size)]
        for slot in self._all:
            self._slots.put(slot)
        self._closed = False
        self.workers_started = 0
        self._lock = threading.Lock()

    def run(self, job: PythonJob | ShellJob) -> JobResult:
        """Runs `job` on a free worker (blocking until one is free)."""
        if self._closed:
            raise RuntimeError("SandboxPool is closed")
        slot = self._slots.get()
        try:
            return self._run_on(slot, job)
        finally:
            self._slots.put(slot)

    def _run_on(self, slot: _Slot, job: PythonJob | ShellJob) -> JobResult:
        message = job.to_wire()
        message["nonce"] = secrets.token_hex(16)
        # One retry only if the worker was already dead before taking the job
        # (the job did not run, so re-running it cannot double-count).
        for attempt in range(2):
            try:
                if slot.worker is None:
                    slot.worker = _Worker(self.launcher.argv(self._slot_config(slot)))
                    with self._lock:
                        self.workers_started += 1
            except (WorkerError, OSError, ValueError) as e:
                self._discard(slot)
                return JobResult(Status.SANDBOX_ERROR, detail=f"could not start {self.launcher.name} worker: {e}")
            fresh = slot.worker.jobs == 0
            try:
                response = slot.worker.request(message, job.timeout_s + _HOST_GRACE_S)
            except (WorkerError, ValueError) as e:
                self._discard(slot)
                if attempt == 0 and not fresh and "stdin closed" in str(e):
                    continue
                return JobResult(Status.SANDBOX_ERROR, detail=str(e))
            if slot.worker.jobs >= self.max_jobs_per_worker:
                self._discard(slot, graceful=True)
            return _to_result(response, message["nonce"])
        raise AssertionError("unreachable")

    def _slot_config(self, slot: _Slot) -> dict[str, Any]:
        config = dict(self._config)
        if config.get("uid") is not None:
            config["uid"] += slot.index
            config["gid"] += slot.index
        return config

    def _discard(self, slot: _Slot, graceful: bool = False) -> None:
        if slot.worker is not None:
            (slot.worker.close if graceful else slot.worker.kill)()
            slot.worker = None

    def close(self) -> None:
        """Stops every worker; waits for running jobs to finish first."""
        self._closed = True
        for _ in self._all:
            slot = self._slots.get()
            self._discard(slot, graceful=True)


def _to_result(response: dict[str, Any], nonce: str) -> JobResult:
    if response.get("nonce") != nonce:
        return JobResult(Status.SANDBOX_ERROR, detail="worker answered with the wrong nonce")
    if "worker_error" in response:
        return JobResult(Status.SANDBOX_ERROR, detail=f"worker failed: {response['worker_error']}")
    if "setup_error" in response:
        return JobResult(Status.SANDBOX_ERROR, detail=response["setup_error"])
    common = dict(
        exit_code=response["exit_code"],
        signal=response["signal"],
        output=response["output"],
        output_bytes=response["output_bytes"],
        files=response.get("files"),
        wall_s=response["wall_s"],
        cpu_s=response["cpu_s"],
    )
    if response["timed_out"]:
        return JobResult(Status.TIMEOUT, detail="time limit exceeded", **common)
    if response["result_problem"] is not None:
        return JobResult(Status.NO_RESULT, detail=response["result_problem"], **common)
    return JobResult(Status.OK, result=response["result"], **common)
