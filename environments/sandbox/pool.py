"""Host side of the sandbox: a thread-safe pool of pre-forked workers.

Each slot of the pool owns at most one long-lived worker process
(`worker.py`), started lazily by a `Launcher` (plain, or wrapped in bubblewrap)
and replaced when it dies, hangs, or has served `max_jobs_per_worker` jobs.
`SandboxPool.run` blocks until a slot is free, so any number of threads (e.g.
envs stepped from a ThreadPoolExecutor) can share one pool; at most `size`
jobs run at once. Infrastructure failures never raise: they come back as
`JobResult(status=Status.SANDBOX_ERROR)` so callers can mask them.

Time: a job's `timeout_s` is a limit on its CPU time (user + system, all its
processes and threads together), so other jobs sharing the cores cannot turn
a correct answer into TIMEOUT; a wall-clock ceiling (`wall_s`, by default
`wall_ceiling(timeout_s)`) ends jobs that sleep, block or hang. The worker
enforces both (worker._supervise, cleanup._CpuMeter); `JobResult.limit_hit`
and `detail` say which one a TIMEOUT hit.

Isolation between jobs and pools: as root, each slot leases a job uid no
other live worker on the host uses (uids.py), so one pool's fork-heavy job
never exhausts another's RLIMIT_NPROC; each worker gets its own memory
cgroup where the host allows one (cgroup.py), capping a job's memory as a
whole (`Limits.memory_bytes`, `Status.MEMORY`); and nothing a job creates
(processes, System V IPC objects, files outside its work directory) reaches
the next job (cleanup._clean_leftovers).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
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

from environments.sandbox import cgroup, cleanup, uids
from environments.sandbox import worker as wire

log = logging.getLogger(__name__)

# Extra host-side wait beyond a job's own timeout before the worker is
# declared hung (covers fork, workspace setup and snapshotting).
_HOST_GRACE_S = 5.0
_START_TIMEOUT_S = 20.0
# The default wall-clock ceiling of a job: WALL_FACTOR times its CPU limit,
# and never less than the CPU limit plus WALL_SLACK_S (see wall_ceiling).
WALL_FACTOR = 3.0
WALL_SLACK_S = 30.0


def wall_ceiling(cpu_limit_s: float) -> float:
    """The default wall-clock ceiling, in seconds, of a job allowed
    `cpu_limit_s` seconds of CPU: max(3 x the CPU limit, the limit + 30 s).

    It only has to stop jobs that do not compute (sleeps, blocking reads,
    deadlocks): a correct job is held to its CPU limit instead. A job that
    needs all of its CPU limit still finishes under the ceiling with three
    runnable jobs per core (3x), and for the short limits of code tests (1-5 s)
    with 7-31 per core (+30 s), where start-up and a busy host's scheduling
    delays weigh most; a hung job holds its worker at most that long, well
    under the rollout scheduler's 120 s watchdog.
    """
    return max(WALL_FACTOR * cpu_limit_s, cpu_limit_s + WALL_SLACK_S)


def _check_times(job: PythonJob | ShellJob) -> None:
    if not (isinstance(job.timeout_s, (int, float)) and 0 < job.timeout_s < float("inf")):
        raise ValueError(f"{type(job).__name__}.timeout_s must be a positive number of CPU seconds, got {job.timeout_s!r}")
    if job.wall_s is not None and not (isinstance(job.wall_s, (int, float)) and 0 < job.wall_s < float("inf")):
        raise ValueError(f"{type(job).__name__}.wall_s must be None or a positive number of seconds, got {job.wall_s!r}")


def _time_wire(job: PythonJob | ShellJob) -> dict[str, float]:
    _check_times(job)
    return {"timeout_s": float(job.timeout_s), "wall_s": float(job.wall_s if job.wall_s is not None else wall_ceiling(job.timeout_s))}
WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-job resource limits, applied with setrlimit in the job's process.

    address_space_bytes: RLIMIT_AS (virtual memory) per process.
    memory_bytes: memory of the job as a whole (all its processes, and the
      System V shared memory it touched). A cgroup enforces it where the host
      allows one, else the worker polls the job's memory use; either way a
      job over it is killed with Status.MEMORY. See
      `SandboxPool.memory_enforcement`.
    file_size_bytes: RLIMIT_FSIZE, the largest file the job may write.
    open_files: RLIMIT_NOFILE.
    processes: RLIMIT_NPROC for the job's uid; 0 forbids fork entirely.
    """

    address_space_bytes: int = 256 << 20
    file_size_bytes: int = 1 << 20
    open_files: int = 64
    processes: int = 0
    memory_bytes: int = 512 << 20

    def to_wire(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PythonJob:
    """Exec `source`, then call `entry(*args)` for each args list in `calls`.

    Arguments and return values cross the process boundary as JSON; each
    returned value as tagged plain data of exact builtin types (tagged.py;
    decoded by environments.programs.values.untag).

    timeout_s: CPU seconds (user + system, every process and thread of the
      job together) the job may use; past them it is killed as TIMEOUT.
    wall_s: wall-clock seconds after which the job is killed as TIMEOUT
      however little CPU it used (sleeps, blocking reads, hangs); None means
      wall_ceiling(timeout_s).
    """

    source: str
    entry: str | None = None
    calls: tuple[tuple[Any, ...], ...] = ()
    timeout_s: float = 1.0
    wall_s: float | None = None
    limits: Limits = Limits()
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    output_limit: int = 4096

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": "python",
            "source": self.source,
            "entry": self.entry,
            "calls": [list(c) for c in self.calls],
            **_time_wire(self),
            "limits": self.limits.to_wire(),
            "files": self.files,
            "output_limit": self.output_limit,
        }


@dataclasses.dataclass(frozen=True)
class ShellJob:
    """Run `script` with /bin/sh -c in a workspace pre-filled with `files`;
    the final workspace comes back as `JobResult.files`. timeout_s and wall_s
    are the CPU and wall-clock limits, as for PythonJob."""

    script: str
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    timeout_s: float = 2.0
    wall_s: float | None = None
    limits: Limits = Limits(processes=64)
    output_limit: int = 4096

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": "shell",
            "script": self.script,
            "files": self.files,
            **_time_wire(self),
            "limits": self.limits.to_wire(),
            "collect_files": True,
            "output_limit": self.output_limit,
        }


class Status(enum.Enum):
    OK = "ok"  # the job ran to completion (its own result may still be an error)
    TIMEOUT = "timeout"  # CPU limit or wall-clock ceiling hit (JobResult.limit_hit); the job was killed
    NO_RESULT = "no_result"  # a Python job ended without a valid nonce-tagged result
    MEMORY = "memory"  # the job as a whole went over Limits.memory_bytes; it was killed
    SANDBOX_ERROR = "sandbox_error"  # the worker/launcher failed; not the job's fault


@dataclasses.dataclass(frozen=True)
class JobResult:
    """What happened to one job.

    result: the Python harness payload ({"phase", "results" | "error", ...}) for
      OK Python jobs, else None.
    exit_code / signal: of the job's top process (informational only; never
      used to decide success).
    output: first `output_limit` bytes (at most worker.MAX_OUTPUT_BYTES) of
      stdout+stderr, decoded; output_bytes is the total the job wrote.
    files: workspace snapshot for shell jobs, {path: entry} (see
      worker._snapshot): {"type": "dir"}, {"type": "link", "target"},
      {"type": "other"}, or {"type": "file", "size", "mode", "sha256" (of the
      full contents), "data" (its start), "truncated" (data is not all of it)}.
    files_truncated: the listing is incomplete (too many entries, too deep,
      too long a path, an unreadable directory): a path absent from `files`
      may still exist.
    wall_s / cpu_s: seconds of wall-clock time (worker side) and CPU time
      (user + system of all the job's processes).
    detail: why the status is not OK.
    limit_hit: for a TIMEOUT, "cpu" (the job used its CPU limit, timeout_s)
      or "wall" (it reached its wall-clock ceiling, wall_s); else None.
    """

    status: Status
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    signal: int | None = None
    output: str = ""
    output_bytes: int = 0
    files: dict[str, Any] | None = None
    files_truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float = 0.0
    detail: str = ""
    limit_hit: str | None = None


def text_sha256(text: str) -> str:
    """The "sha256" a workspace snapshot gives a file whose contents are `text` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Launcher(Protocol):
    """Builds the command line that starts one worker."""

    name: str

    def argv(self, worker_config: dict[str, Any]) -> list[str]: ...


class PlainLauncher:
    """Worker as a plain child process; isolation is rlimits + uid drop only."""

    name = "plain"
    shares_host_fs = True  # the worker's directories are the host's (see SandboxPool._discard)

    def __init__(self, python: str | None = None) -> None:
        self._python = python or _system_python()

    def argv(self, worker_config: dict[str, Any]) -> list[str]:
        return [self._python, "-I", "-S", "-B", WORKER_SCRIPT, json.dumps(worker_config)]


def _system_python() -> str:
    # The worker needs only the standard library; the resolved interpreter
    # avoids venv indirection (and lets a sandbox bind just its prefix).
    return os.path.realpath(sys.executable)


# When the host is root, the jobs of each worker slot run as a uid (and gid)
# of its own from [JOB_UID_BASE, JOB_UID_BASE + JOB_UID_COUNT), leased
# host-wide for the slot's life (uids.acquire): no other live worker, of this
# pool or of any other pool on the host, uses it, so RLIMIT_NPROC counts only
# that slot's job and leftovers can be reaped by uid. (Not the fixed
# 61000 + slot of earlier versions, which an older pool still running on the
# same host would share.)
JOB_UID_BASE = 62000
JOB_UID_COUNT = 1000


def default_worker_config() -> dict[str, Any]:
    """uid/gid: first job uid to lease (None: no uid drop). ipc / scratch:
    which System V IPC objects and which files outside the work dir count as
    the job's leftovers, removed after each job (see cleanup._clean_leftovers)."""
    root = os.geteuid() == 0
    return {
        "uid": JOB_UID_BASE if root else None,
        "gid": JOB_UID_BASE if root else None,
        "tmp_dir": None,
        "reap": "uid" if root else "none",
        "ipc": "uid" if root else "new",
        "scratch": "host" if root else "none",
    }


class WorkerError(Exception):
    pass


class _Spawner:
    """Forks every worker process from one long-lived daemon thread.

    A worker's death signal (PR_SET_PDEATHSIG in worker.py, bwrap's own
    --die-with-parent) fires when the *thread* that forked it exits, not when
    the host process does. Forking from the calling thread would kill a worker
    as soon as that thread ended (a pool first used from a short-lived thread,
    a ThreadPoolExecutor shut down), failing the next job on it. This thread
    ends only with the host process, so workers still die with the host, even
    when it is SIGKILLed, but never with a caller thread. It is recreated in a
    forked child (threads do not survive fork).
    """

    def __init__(self) -> None:
        self._after_fork()
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._requests: queue.SimpleQueue = queue.SimpleQueue()

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        done, box = threading.Event(), {}
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, args=(self._requests,), name="rlpt-sandbox-spawner", daemon=True)
                self._thread.start()
            self._requests.put((argv, kwargs, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["proc"]

    @staticmethod
    def _serve(requests: queue.SimpleQueue) -> None:
        while True:
            argv, kwargs, box, done = requests.get()
            try:
                box["proc"] = subprocess.Popen(argv, **kwargs)
            except BaseException as e:  # handed to the caller
                box["error"] = e
            finally:
                done.set()


_spawner = _Spawner()


class _Worker:
    """One live worker process and its framed pipes. Not thread-safe; owned by a slot."""

    def __init__(self, argv: list[str], start_timeout_s: float = _START_TIMEOUT_S) -> None:
        self.jobs = 0
        self.proc = _spawner.popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            close_fds=True,
            start_new_session=True,
        )
        hello = self._read(time.monotonic() + start_timeout_s)
        if not hello.get("ready"):
            raise WorkerError(f"worker did not start: {hello}")
        self.tmp_root: str | None = hello.get("tmp_root")  # where it puts job work dirs

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
        self.lease: uids.UidLease | None = None  # the slot's job uid, held for the pool's life
        self.cgroup: cgroup.WorkerCgroup | None = None  # the live worker's cgroup
        self.oom_kills = 0  # OOM kills in that cgroup already accounted for


class SandboxPool:
    """Fixed number of worker slots shared by all threads of the host process.

    size: concurrent jobs (defaults to the CPU count).
    launcher: how workers start (`PlainLauncher` or `bwrap.BwrapLauncher`).
    max_jobs_per_worker: recycle a worker after this many jobs, bounding any
      state (leaked memory, a poisoned interpreter) a job might leave behind.
    memory_cgroups: cap each job's memory with a per-worker cgroup (None:
      where `cgroup.probe()` finds this host allows it; False: never, the
      worker polls the job's memory use, and sums its CPU time in /proc, instead).

    memory_enforcement: what enforces `Limits.memory_bytes` for this pool:
      "cgroup v1" / "cgroup v2" (the kernel caps the job; the OOM killer picks
      job processes and the worker then kills the whole job) or "polling" (the
      worker sums the job's resident anonymous memory and System V segments
      every 20 ms and kills the job above the cap; a fast allocator can
      overshoot by what it allocates in that time, each process still bounded
      by RLIMIT_AS).
    cpu_accounting: where the worker reads a job's CPU time for its limit:
      "cgroup v1" / "cgroup v2" (the worker's cgroup counts every process of
      the job, exited ones too) or "polling" (the worker sums the job's
      processes in /proc every 20-50 ms; see cleanup._CpuMeter).
    start_timeout_s: how long a starting worker may take to report ready (a
      kernel worker imports its library first: environments/cad).
    worker_config keys a kernel worker adds: "paths" (host directories put on
      its sys.path; bubblewrap binds them read-only), "preload" (modules it
      imports before its first job) and "env" (variables set before that).
    """

    def __init__(
        self,
        size: int | None = None,
        launcher: Launcher | None = None,
        max_jobs_per_worker: int = 1000,
        worker_config: dict[str, Any] | None = None,
        memory_cgroups: bool | None = None,
        start_timeout_s: float = _START_TIMEOUT_S,
    ) -> None:
        self.size = size or os.cpu_count() or 1
        self.start_timeout_s = start_timeout_s
        self.launcher = launcher or PlainLauncher()
        self.max_jobs_per_worker = max_jobs_per_worker
        self._config = worker_config or default_worker_config()
        self._cgroups: cgroup.Layout | None = None
        if memory_cgroups is not False:
            self._cgroups, reason = cgroup.probe()
            if self._cgroups is None and memory_cgroups:
                raise ValueError(f"memory_cgroups=True, but {reason}")
            if self._cgroups is None:
                log.info("sandbox: job memory caps are enforced by polling (%s)", reason)
        self.memory_enforcement = self._cgroups.mechanism if self._cgroups is not None else "polling"
        self.cpu_accounting = self._cgroups.mechanism if self._cgroups is not None and self._cgroups.cpu_parent is not None else "polling"
        self._slots: queue.LifoQueue[_Slot] = queue.LifoQueue()
        self._all = [_Slot(i) for i in range(self.size)]
        for slot in self._all:
            self._slots.put(slot)
        # Without a uid drop (an unprivileged host) a job runs as its worker's
        # uid and can signal the worker and its zygote; see _run_on.
        self.jobs_share_worker_uid = self._config.get("uid") is None
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
        message = job.to_wire()  # raises ValueError on a bad time limit: the caller's mistake
        message["nonce"] = secrets.token_hex(16)
        # One retry only if the worker was already dead before taking the job
        # (the job did not run, so re-running it cannot double-count).
        for attempt in range(2):
            try:
                if slot.worker is not None and slot.worker.proc.poll() is not None:
                    self._discard(slot)  # died while idle: never hand it a job
                if slot.worker is None:
                    slot.worker = self._start_worker(slot)
                    with self._lock:
                        self.workers_started += 1
                if slot.cgroup is not None:
                    slot.cgroup.set_limits(job.limits.memory_bytes, job.limits.processes)
            except (WorkerError, OSError, ValueError) as e:
                self._discard(slot)
                return JobResult(Status.SANDBOX_ERROR, detail=f"could not start {self.launcher.name} worker: {e}")
            fresh = slot.worker.jobs == 0
            try:
                response = slot.worker.request(message, message["wall_s"] + _HOST_GRACE_S)
            except (WorkerError, ValueError) as e:
                over_memory = self._oom_killed(slot)
                self._discard(slot)
                if over_memory:
                    # The job filled the cgroup with memory no process holds
                    # (shared memory, tmpfs files) until the worker itself was
                    # the OOM killer's only choice: the job's doing.
                    return JobResult(Status.MEMORY, detail=f"{_memory_detail(job.limits.memory_bytes, self.memory_enforcement)}; the worker was killed")
                if attempt == 0 and not fresh and "stdin closed" in str(e):
                    continue
                if "stdin closed" not in str(e) and self.jobs_share_worker_uid:
                    return JobResult(Status.NO_RESULT, detail=f"{e} while the job ran; {_SHARED_UID}")
                return JobResult(Status.SANDBOX_ERROR, detail=str(e))
            slot.oom_kills = response.get("oom_kills", slot.oom_kills)
            if slot.worker.jobs >= self.max_jobs_per_worker or response.get("retire"):
                self._discard(slot, graceful=True)
            if response.get("zygote_lost") and self.jobs_share_worker_uid:
                return JobResult(Status.NO_RESULT, detail=f"{response.get('worker_error')} while the job ran; {_SHARED_UID}")
            return _to_result(response, message)
        raise AssertionError("unreachable")

    def _start_worker(self, slot: _Slot) -> _Worker:
        config = self._slot_config(slot)
        if self._cgroups is not None:
            slot.cgroup = cgroup.WorkerCgroup(self._cgroups)
            slot.oom_kills = 0
            config["memory"] = slot.cgroup.worker_view()
            config["cpu"] = slot.cgroup.cpu_view()
        else:
            config["memory"] = {"mode": "poll", "mechanism": "polling"}
            config["cpu"] = {"mode": "poll"}
        worker = _Worker(self.launcher.argv(config), self.start_timeout_s)
        if slot.cgroup is not None:
            try:
                slot.cgroup.attach(worker.proc.pid)
            except OSError:
                worker.kill()
                raise
        return worker

    def _slot_config(self, slot: _Slot) -> dict[str, Any]:
        config = dict(self._config)
        if config.get("uid") is not None:
            if slot.lease is None:
                slot.lease = uids.acquire(config["uid"], JOB_UID_COUNT)
                if slot.lease is None:
                    raise WorkerError(f"every job uid in [{config['uid']}, {config['uid'] + JOB_UID_COUNT}) is in use by a live worker")
            offset = slot.lease.uid - config["uid"]
            config["uid"] += offset
            config["gid"] += offset
        return config

    def _oom_killed(self, slot: _Slot) -> bool:
        try:
            return slot.cgroup is not None and slot.cgroup.oom_kills() > slot.oom_kills
        except OSError:
            return False

    def _discard(self, slot: _Slot, graceful: bool = False) -> None:
        if slot.worker is not None:
            (slot.worker.close if graceful else slot.worker.kill)()
            if getattr(self.launcher, "shares_host_fs", False):
                # A killed worker could not remove its directory (nor the job's
                # work dir in it); on the host's own filesystem, the host does.
                _remove_worker_dir(slot.worker.tmp_root)
            slot.worker = None
        if slot.cgroup is not None:
            slot.cgroup.remove()  # also kills what the job may have left running
            slot.cgroup = None

    def close(self) -> None:
        """Stops every worker; waits for running jobs to finish first."""
        self._closed = True
        for _ in self._all:
            slot = self._slots.get()
            self._discard(slot, graceful=True)
            if slot.lease is not None:
                slot.lease.release()
                slot.lease = None


# A worker (or its zygote) that dies or stops answering while a job runs is
# that job's doing when the job could have signalled it: its failure is then
# the job's own (NO_RESULT, scored as an ERROR), never a masked SANDBOX_ERROR.
_SHARED_UID = "jobs here run as their worker's uid and can signal it, so this counts as the job's failure"


def _remove_worker_dir(path: str | None) -> None:
    if path and os.path.basename(path).startswith("rlpt-sandbox-") and os.path.isdir(path) and not os.path.islink(path):
        cleanup._force_rmtree(path)


def _memory_detail(memory_bytes: int, mechanism: str) -> str:
    return f"memory limit of {memory_bytes / (1 << 20):g} MiB exceeded (enforced by {mechanism})"


def _time_detail(limit_hit: str, message: dict[str, Any], cpu_s: float, wall_s: float) -> str:
    if limit_hit == "cpu":
        return f"CPU time limit of {message['timeout_s']:g} s exceeded (used {cpu_s:.2f} s of CPU in {wall_s:.2f} s)"
    return (f"wall-clock limit of {message['wall_s']:g} s exceeded (used {cpu_s:.2f} s of its {message['timeout_s']:g} s CPU limit: "
            "it slept, waited or hung)")


def _to_result(response: dict[str, Any], message: dict[str, Any]) -> JobResult:
    if response.get("nonce") != message["nonce"]:
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
        files_truncated=bool(response.get("files_truncated")),
        wall_s=response["wall_s"],
        cpu_s=response["cpu_s"],
    )
    if response.get("memory_exceeded"):
        return JobResult(Status.MEMORY, detail=response["memory_exceeded"], **common)
    if response["timed_out"]:
        limit_hit = response["timed_out"]
        return JobResult(Status.TIMEOUT, detail=_time_detail(limit_hit, message, response["cpu_s"], response["wall_s"]), limit_hit=limit_hit, **common)
    if response["result_problem"] is not None:
        return JobResult(Status.NO_RESULT, detail=response["result_problem"], **common)
    return JobResult(Status.OK, result=response["result"], **common)
