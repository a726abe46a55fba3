"""Whole-job memory and task caps through cgroups, where this host allows them.

Per-process rlimits bound each process of a job (RLIMIT_AS), not the job: a
shell job of 64 processes could use 64 times the limit. Where the host
process may create cgroups (cgroup v1 memory hierarchy, or a cgroup v2
subtree with the memory controller enabled, e.g. delegated by systemd and
named by RLPT_SANDBOX_CGROUP), every worker lives in a cgroup of its own,
created by the host under its own cgroup: the kernel then caps the memory of
the worker and its job together (memory.max / memory.limit_in_bytes = the
job's `Limits.memory_bytes` + WORKER_ALLOWANCE_BYTES) and their task count
(pids.max), and counts OOM kills there. Job processes get oom_score_adj 1000,
so the OOM killer picks them, never the worker; the worker watches the OOM
counter (bind-mounted read-only into a bubblewrap sandbox) and stops the
whole job when it rises. Memory charged includes System V and tmpfs pages
the job touched. Where cgroups are not available the worker falls back to
polling the job's memory use (worker.py, _MemoryMeter).

`probe()` decides once per process; `WorkerCgroup` is one worker's cgroup.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import itertools
import os
import re
import signal
import time

WORKER_ALLOWANCE_BYTES = 16 << 20  # the worker's own charges on top of a job's cap
_PREFIX = "rlpt-sandbox-"
_STALE = re.compile(rf"^{_PREFIX}(\d+)-\d+$")
ENV_PARENT = "RLPT_SANDBOX_CGROUP"  # a delegated cgroup v2 directory to create worker cgroups in


@dataclasses.dataclass(frozen=True)
class Layout:
    version: int  # 1 or 2
    memory_parent: str  # directory the worker cgroups are created in
    pids_parent: str | None  # same as memory_parent for v2; None without a pids controller
    cpu_parent: str | None = None  # same as memory_parent for v2; v1: the cpuacct hierarchy's, None without one

    @property
    def mechanism(self) -> str:
        return f"cgroup v{self.version}"


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root within the filesystem, fstype, super options) of each mount."""
    out = []
    for line in _read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            out.append((fields[4], fields[3], tail[0], set(tail[2].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """{controller or "" for v2: path} of this process."""
    own = {}
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    return own


def _join(mount: str, root: str, path: str) -> str:
    if root != "/" and path.startswith(root):
        path = path[len(root) :]
    elif root != "/":
        raise ValueError(f"own cgroup {path} lies outside the mounted subtree {root}")
    return os.path.join(mount, path.lstrip("/"))


def _v1_parent(controller: str, mounts, own) -> str | None:
    for mount, root, fstype, options in mounts:
        if fstype == "cgroup" and controller in options and controller in own:
            parent = _join(mount, root, own[controller])
            if os.access(parent, os.W_OK):
                return parent
    return None


def _find_layout() -> tuple[Layout | None, str]:
    mounts, own = _mounts(), _own_cgroups()
    parent = os.environ.get(ENV_PARENT)
    if not parent:
        memory = _v1_parent("memory", mounts, own)
        if memory is not None:
            return Layout(1, memory, _v1_parent("pids", mounts, own), _v1_parent("cpuacct", mounts, own)), "ok"
        v2 = [(m, r) for m, r, fstype, _ in mounts if fstype == "cgroup2"]
        if not v2 or "" not in own:
            return None, "no writable cgroup v1 memory hierarchy and no cgroup v2 mount"
        parent = _join(v2[0][0], v2[0][1], own[""])
    controllers = set(_read(os.path.join(parent, "cgroup.controllers")).split())
    if "memory" not in controllers:
        return None, f"the memory controller is not available in {parent}"
    enabled = set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
    for name in ("memory", "pids"):
        if name in controllers and name not in enabled:
            try:
                _write(os.path.join(parent, "cgroup.subtree_control"), f"+{name}")
            except OSError as e:
                if name == "memory":  # EBUSY: processes live in `parent` itself
                    return None, f"cannot enable the memory controller below {parent}: {e}"
    pids = "pids" in set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
    return Layout(2, parent, parent if pids else None, parent), "ok"


@functools.lru_cache(maxsize=1)
def probe() -> tuple[Layout | None, str]:
    """(layout, reason): where worker cgroups can be created, or None and why not.

    Creates, limits and removes a test cgroup, so permission problems and
    read-only mounts show up here; also removes cgroups that dead host
    processes left behind.
    """
    try:
        layout, reason = _find_layout()
        if layout is None:
            return None, reason
        _sweep_stale(layout)
        test = WorkerCgroup(layout)
        try:
            test.set_limits(64 << 20, 8)
            test.oom_kills()
            if test.cpu_file is not None:
                test.cpu_seconds()
        finally:
            test.remove()
    except (OSError, ValueError) as e:
        return None, f"cgroups unusable here: {e}"
    return layout, "ok"


def _sweep_stale(layout: Layout) -> None:
    for parent in {layout.memory_parent, layout.pids_parent, layout.cpu_parent} - {None}:
        for name in os.listdir(parent):
            m = _STALE.match(name)
            if m is None or _alive(int(m.group(1))):
                continue
            _kill_and_rmdir(os.path.join(parent, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _kill_and_rmdir(path: str) -> bool:
    for _ in range(100):
        try:
            pids = [int(p) for p in _read(os.path.join(path, "cgroup.procs")).split()]
        except FileNotFoundError:
            return True
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno != errno.EBUSY:
                return False
        time.sleep(0.01)  # killed tasks leave the cgroup once reaped
    return False


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in _read(f"/proc/{p}/task/{tid}/children").split()]
        except OSError:
            pass
    return out


class WorkerCgroup:
    """The cgroup (one per hierarchy) of one worker process and its jobs."""

    _serial = itertools.count()

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        name = f"{_PREFIX}{os.getpid()}-{next(self._serial)}"
        self.memory_dir = os.path.join(layout.memory_parent, name)
        os.mkdir(self.memory_dir, 0o755)
        self.pids_dir: str | None = None
        self.cpu_dir: str | None = None
        self.cpu_file: str | None = None
        try:
            self._setup(layout, name)
        except BaseException:
            self.remove()
            raise

    def _setup(self, layout: Layout, name: str) -> None:
        if layout.pids_parent is not None:
            self.pids_dir = os.path.join(layout.pids_parent, name)
            if self.pids_dir != self.memory_dir:
                try:
                    os.mkdir(self.pids_dir, 0o755)
                except OSError:
                    self.pids_dir = None
        if layout.cpu_parent is not None:
            self.cpu_dir = os.path.join(layout.cpu_parent, name)
            if self.cpu_dir not in (self.memory_dir, self.pids_dir):
                try:
                    os.mkdir(self.cpu_dir, 0o755)
                except OSError:
                    self.cpu_dir = None
        if self.cpu_dir is not None:
            self.cpu_file = os.path.join(self.cpu_dir, "cpu.stat" if layout.version == 2 else "cpuacct.usage")
        self.events_file = "memory.oom_control" if layout.version == 1 else "memory.events"
        self.base_tasks = 0
        self._memory: int | None = None
        self._tasks: int | None = None
        if layout.version == 2 and os.path.exists(os.path.join(self.memory_dir, "memory.swap.max")):
            _write(os.path.join(self.memory_dir, "memory.swap.max"), "0")

    def _dirs(self) -> list[str]:
        return [d for d in (self.memory_dir, self.pids_dir, self.cpu_dir) if d is not None]

    def worker_view(self) -> dict:
        """What the worker needs to watch its cgroup's memory (see cleanup._MemoryMeter)."""
        return {"mode": "cgroup", "dir": self.memory_dir, "events": self.events_file, "mechanism": self.layout.mechanism}

    def cpu_view(self) -> dict:
        """What the worker needs to read its cgroup's CPU time (see cleanup._CpuMeter)."""
        if self.cpu_file is None:
            return {"mode": "poll"}
        return {"mode": "cgroup", "dir": self.cpu_dir, "file": self.cpu_file}

    def cpu_seconds(self) -> float:
        """CPU time of every task that has been in this cgroup."""
        with open(self.cpu_file, "rb") as f:
            data = f.read()
        if self.layout.version == 1:
            return int(data) / 1e9
        return int(data.split(b"\n", 1)[0].split()[1]) / 1e6

    def attach(self, pid: int) -> None:
        """Moves `pid` and its descendants (bwrap's processes and the worker) in."""
        pids = _descendants(pid)
        for d in dict.fromkeys(self._dirs()):
            for p in pids:
                try:
                    _write(os.path.join(d, "cgroup.procs"), str(p))
                except ProcessLookupError:
                    pass
        self.base_tasks = len(pids)

    def set_limits(self, memory_bytes: int, processes: int) -> None:
        """Caps memory at the job's `memory_bytes` (+ the worker's allowance) and
        tasks at the job's `processes` (+ the worker's own and the job's first)."""
        memory = int(memory_bytes) + WORKER_ALLOWANCE_BYTES
        if memory != self._memory:
            self._memory = None
            if self.layout.version == 2:
                _write(os.path.join(self.memory_dir, "memory.max"), str(memory))
            else:
                limit = os.path.join(self.memory_dir, "memory.limit_in_bytes")
                memsw = os.path.join(self.memory_dir, "memory.memsw.limit_in_bytes")
                # memory.limit_in_bytes <= memory.memsw.limit_in_bytes at all times.
                order = [limit]
                if os.path.exists(memsw):
                    order = [memsw, limit] if self._raise_v1(memory) else [limit, memsw]
                for path in order:
                    _write(path, str(memory))
            self._memory = memory
        tasks = self.base_tasks + max(int(processes), 0) + 2
        if self.pids_dir is not None and tasks != self._tasks:
            _write(os.path.join(self.pids_dir, "pids.max"), str(tasks))
            self._tasks = tasks

    def _raise_v1(self, memory: int) -> bool:
        try:
            return memory > int(_read(os.path.join(self.memory_dir, "memory.limit_in_bytes")))
        except (OSError, ValueError):
            return True

    def oom_kills(self) -> int:
        for line in _read(os.path.join(self.memory_dir, self.events_file)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        raise OSError(errno.ENOTSUP, f"{self.events_file} has no oom_kill counter")

    def remove(self) -> bool:
        """Kills whatever is left inside and removes the cgroup; True when gone."""
        ok = True
        for d in dict.fromkeys(self._dirs()):
            ok = _kill_and_rmdir(d) and ok
        return ok
