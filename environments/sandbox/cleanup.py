"""What a sandbox job leaves behind, and what it uses: removal of its work
directory however deep (`_force_rmtree`), its leftover processes (`_reap`,
`kill_until_gone`), System V IPC objects and scratch files
(`_clean_leftovers`), and the accounting of its memory and its CPU time as a
whole (`_MemoryMeter`, `_CpuMeter`). Standard library only: the worker script (worker.py) imports
it inside the sandbox as a sibling file; the host imports it from the package.
"""

from __future__ import annotations

import os
import resource
import signal
import stat
import struct
import time

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    """fd of a directory to empty (never a symlink), made fully accessible.

    The job may have chmod-ed its directories (000, 500, 600). That only
    binds a worker without CAP_DAC_OVERRIDE, i.e. one sharing the job's uid,
    so chmod (which follows a symlink) grants nothing the job lacks; the
    O_NOFOLLOW open still refuses a symlink.
    """
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=dir_fd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    if os.geteuid() != 0:
        try:
            os.fchmod(fd, 0o700)
        except OSError:
            pass
    return fd


def _in_writable(fd: int, op, subdir: str | None = None) -> None:
    """op(), retried once after making directory `fd` (and its entry `subdir`,
    which a rename moves) writable again."""
    try:
        op()
    except PermissionError:
        os.fchmod(fd, 0o700)
        if subdir is not None:
            os.chmod(subdir, 0o700, dir_fd=fd)
        op()


def _force_rmtree(path: str) -> bool:
    """Removes `path` and everything below it; True when nothing is left.

    Iterative and fd-relative, so neither depth (a chain of thousands of
    directories) nor path length (far past PATH_MAX) can break it: every
    directory found below the top level is first renamed into `path` itself,
    so each operation names one entry of an open directory and at most two
    directories are open. Symlinks are never followed. Errors do not raise;
    they make the result False.
    """
    try:
        top = _open_dir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    clean, serial = True, 0
    try:
        pending: list[str | None] = [None]  # directories to empty: None is `path`, else a name in it
        while pending:
            name = pending.pop()
            try:
                fd = top if name is None else _open_dir(name, dir_fd=top)
            except FileNotFoundError:
                continue
            except OSError:
                clean = False
                continue
            try:
                for entry in os.listdir(fd):
                    try:
                        if not stat.S_ISDIR(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                            _in_writable(fd, lambda: os.unlink(entry, dir_fd=fd))
                        elif fd == top:
                            pending.append(entry)
                        else:
                            while True:  # a fresh name in `path` (the job may have used some)
                                serial += 1
                                flat = f".rm-{serial}"
                                try:
                                    os.stat(flat, dir_fd=top, follow_symlinks=False)
                                except FileNotFoundError:
                                    break
                            _in_writable(fd, lambda: os.rename(entry, flat, src_dir_fd=fd, dst_dir_fd=top), subdir=entry)
                            pending.append(flat)
                    except FileNotFoundError:
                        pass
                    except OSError:
                        clean = False
            except OSError:
                clean = False
            finally:
                if fd != top:
                    os.close(fd)
            if name is not None:
                try:
                    _in_writable(top, lambda: os.rmdir(name, dir_fd=top))
                except FileNotFoundError:
                    pass
                except OSError:
                    clean = False
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return clean


def _reap(cfg: dict, job_uid: int | None) -> None:
    """SIGKILLs processes a job left behind outside its process group.

    "uid": every process of the job's dedicated uid (the worker is root and
    each worker slot has its own job uid). "namespace": every process of this
    sandbox's private PID namespace except its init (pid 1) and the worker.
    """
    mode = cfg.get("reap")
    if mode not in ("uid", "namespace") or (mode == "uid" and job_uid is None):
        return
    keep = worker_pids(cfg)
    if mode == "uid":
        kill_until_gone(lambda: processes_of(job_uid, exclude=keep), collect=True)
    else:
        kill_until_gone(lambda: processes_of(None, exclude=keep), collect=True)


def worker_pids(cfg: dict) -> tuple[int, ...]:
    """The processes no cleanup may kill or charge to a job: the sandbox's init
    (pid 1), the worker itself and its zygote (worker.py), which forks every job."""
    return (1, os.getpid(), *((cfg["zygote_pid"],) if cfg.get("zygote_pid") else ()))


def processes_of(uid: int | None, exclude: tuple[int, ...] = ()) -> list[int]:
    """Pids in /proc owned by `uid` (every pid when None), less `exclude`."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in exclude:
            continue
        if uid is not None:
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
            except OSError:
                continue
        pids.append(int(name))
    return pids


def kill_until_gone(victims, collect: bool) -> None:
    """SIGKILLs every pid `victims()` lists until it lists none (leftovers may
    fork while being scanned; 20 rounds at most). collect: also wait for this
    process's exited children (in the worker the killed are its adopted
    orphans, whose zombies would otherwise stay listed and count against the
    uid's RLIMIT_NPROC in the next job; never on the host, whose other
    children are not ours to collect)."""
    for _ in range(20):
        pids = victims()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.001)
        if collect:
            _reap_children()


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


# ----------------------------------------------------------------------------- leftovers and memory
#
# Nothing a job creates may reach the next job. Besides its processes (reaped
# above) and its work directory, a job can leave System V IPC objects (shared
# memory segments keep their memory until removed) and files in directories
# outside its work directory it can write to (host /tmp, /dev/shm, ... for a
# plain worker; the sandbox's own tmpfs directories when the job shares the
# worker's uid). POSIX message queues are refused outright (RLIMIT_MSGQUEUE 0).
# After every job the worker removes what belongs to the job:
#
#   cfg["ipc"]: "all"  every object of this IPC namespace (bwrap: the worker's
#                      private namespace holds only jobs' objects);
#               "uid"  objects the job uid created or owns (plain worker as root);
#               "new"  objects of the worker's uid created during the job (plain
#                      worker as an ordinary user, whose jobs share its uid).
#   cfg["scratch"]: "host"     the host's shared scratch directories (and their
#                              world-writable subdirectories): entries of the job uid;
#                   "sandbox"  every directory of the sandbox the job can write:
#                              entries of the job uid, or (job uid == worker uid)
#                              entries that were not there when the worker started;
#                   otherwise  nothing (a plain worker without a uid drop).

_SHARED_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm", "/run/lock", "/var/lock", "/dev/mqueue")
_MEMORY_POLL_S = {"cgroup": 0.01, "poll": 0.02}
_IPC_LIBC = None


def _ipc_libc():
    global _IPC_LIBC
    if _IPC_LIBC is None:
        import ctypes

        _IPC_LIBC = ctypes.CDLL(None, use_errno=True)
    return _IPC_LIBC


def _sysv_counts_zero() -> bool:
    """True when this IPC namespace holds no System V object at all (three
    cheap *_INFO calls instead of reading /proc/sysvipc after every job)."""
    try:
        import ctypes

        libc, buf = _ipc_libc(), ctypes.create_string_buffer(128)
        if libc.shmctl(0, 14, buf) == -1 or struct.unpack_from("i", buf, 0)[0]:  # SHM_INFO: shm_info.used_ids
            return False
        if libc.semctl(0, 0, 19, buf) == -1 or struct.unpack_from("8i", buf, 0)[7]:  # SEM_INFO: seminfo.semusz
            return False
        return libc.msgctl(0, 12, buf) != -1 and struct.unpack_from("i", buf, 0)[0] == 0  # MSG_INFO: msginfo.msgpool
    except (OSError, AttributeError):
        return False


def _sysv_objects() -> list[tuple[str, int, int, int, int]]:
    """(kind, id, uid, cuid, bytes held) of every System V IPC object of this IPC namespace."""
    out = []
    if _sysv_counts_zero():
        return out
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}", "rb") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        if len(lines) < 2:  # header only: the common case
            continue
        head = lines[0].split()
        i_uid, i_cuid = head.index(b"uid"), head.index(b"cuid")
        i_bytes = [head.index(c) for c in (b"rss", b"swap", b"cbytes") if c in head]
        for line in lines[1:]:
            f = line.split()
            if len(f) == len(head):
                out.append((kind, int(f[1]), int(f[i_uid]), int(f[i_cuid]), sum(int(f[i]) for i in i_bytes)))
    return out


def _job_ipc(cfg: dict, job_uid: int | None, before: set | None) -> list[tuple[str, int, int, int, int]]:
    mode = cfg.get("ipc")
    objects = _sysv_objects() if mode in ("all", "uid", "new") else []
    if mode == "uid":
        return [o for o in objects if job_uid is not None and job_uid in (o[2], o[3])]
    if mode == "new":
        me = os.getuid()
        return [o for o in objects if before is not None and o[3] == me and o[:2] not in before]
    return objects


def _remove_ipc(kind: str, ident: int, cuid: int) -> None:
    try:
        _remove_ipc_as(kind, ident, cuid)
    except OSError:
        pass  # checked by the caller


def _remove_ipc_as(kind: str, ident: int, cuid: int) -> None:
    libc = _ipc_libc()
    if kind == "shm":
        remove = lambda: libc.shmctl(ident, 0, None)  # noqa: E731  IPC_RMID
    elif kind == "sem":
        remove = lambda: libc.semctl(ident, 0, 0)  # noqa: E731
    else:
        remove = lambda: libc.msgctl(ident, 0, None)  # noqa: E731
    if remove() == 0 or os.geteuid() != 0 or cuid == 0:
        return
    # A bwrap worker lacks CAP_SYS_ADMIN: only the creator (or owner) may remove it.
    os.seteuid(cuid)
    try:
        remove()
    finally:
        os.seteuid(0)


def _job_writable(path: str, st: os.stat_result, job_uid: int | None, job_gid: int | None) -> bool:
    m = st.st_mode
    if job_uid is None:  # the job runs as the worker's own uid
        writable = os.access(path, os.W_OK)
    else:
        writable = bool(m & 0o002 or (st.st_uid == job_uid and m & 0o200) or (st.st_gid == job_gid and m & 0o020))
    try:
        return writable and not os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError:
        return False


def _scratch_targets(cfg: dict, job_uid: int | None, job_gid: int | None) -> list[list]:
    """[path, names there at worker start (None: judge entries by owner), mtime seen, when seen]
    for every directory outside the work dirs where a job could leave entries."""
    mode, found = cfg.get("scratch"), []

    def visit(path: str, depth: int) -> None:
        try:
            st = os.lstat(path)
        except OSError:
            return
        if not stat.S_ISDIR(st.st_mode) or any(t[0] == path for t in found):
            return
        if _job_writable(path, st, job_uid, job_gid):
            found.append([path, None, None, 0])
        if depth <= 0 or path in ("/proc", "/sys"):
            return
        try:
            if os.statvfs(path).f_flag & os.ST_RDONLY:
                return  # a read-only mount (bwrap's --ro-bind): nothing below is writable
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            visit(os.path.join(path, name), depth - 1)

    if mode == "host" and job_uid is not None:
        for path in _SHARED_SCRATCH:  # and their subdirectories
            visit(os.path.realpath(path), 1)
    elif mode == "sandbox":
        visit("/", 3)
    if job_uid is None:
        for target in found:
            target[1] = set(os.listdir(target[0]))
    return found


def _remove_entry(path: str) -> None:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            _force_rmtree(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def _clean_scratch(cfg: dict, job_uid: int | None, keep: str | None = None, force: bool = False) -> None:
    for target in cfg.get("_scratch", ()):
        path, baseline = target[0], target[1]
        try:
            st = os.stat(path)
        except OSError:
            continue
        now = time.time_ns()
        # An untouched directory needs no listing: same mtime as when last
        # listed, and that mtime was already old then (timestamps are coarse).
        # Only for directories the job does not own (an owner can reset mtime).
        if not force and st.st_uid != job_uid and baseline is None and st.st_mtime_ns == target[2] and target[3] - target[2] > 50_000_000:
            continue
        target[2], target[3] = st.st_mtime_ns, now
        try:
            names = os.listdir(path)
        except OSError:
            continue
        for name in names:
            entry = os.path.join(path, name)
            if entry == keep or (baseline is not None and name in baseline):
                continue
            if baseline is None:
                try:
                    if os.lstat(entry).st_uid != job_uid:
                        continue
                except OSError:
                    continue
            _remove_entry(entry)


def _oom_kills(path: str) -> int:
    try:
        with open(path, "rb") as f:
            for line in f.read().splitlines():
                if line.startswith(b"oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class _MemoryMeter:
    """Whether the running job is over its whole-job cap (limits["memory_bytes"]).

    cgroup mode (cfg["memory"]["mode"] == "cgroup"): the kernel caps the
    worker's cgroup, whose OOM-kill counter the worker can read; a rise means
    the job hit the cap. Poll mode: the job's resident anonymous memory (all
    its processes) plus the System V memory it holds, summed every 20 ms.
    """

    def __init__(self, job: dict, cfg: dict, pid: int, job_uid: int | None, ipc_before: set | None) -> None:
        memory = cfg.get("memory") or {}
        self.cgroup = memory.get("mode") == "cgroup"
        self._events = os.path.join(memory["dir"], memory["events"]) if self.cgroup else None
        self.limit = int(job["limits"].get("memory_bytes") or 0)
        self.detail = f"memory limit of {self.limit / (1 << 20):g} MiB exceeded (enforced by {memory.get('mechanism', 'polling')})"
        self._cfg, self._pid, self._uid, self._ipc_before = cfg, pid, job_uid, ipc_before
        self._forks = job["limits"]["processes"] > 0
        self._interval = _MEMORY_POLL_S["cgroup" if self.cgroup else "poll"]
        self.due = time.monotonic() + self._interval
        self.exceeded = False

    def check(self) -> bool:
        """True once the job is over the cap (checked at most every interval)."""
        now = time.monotonic()
        if not self.exceeded and now >= self.due:
            self.due = now + self._interval
            if self.cgroup:
                self.exceeded = _oom_kills(self._events) > self._cfg.get("_oom_kills", 0)
            elif self.limit > 0:
                held = sum(o[4] for o in _job_ipc(self._cfg, self._uid, self._ipc_before))
                self.exceeded = held > self.limit or held + self._resident() > self.limit
        return self.exceeded

    def finish(self, job_ipc: list) -> int | None:
        """Final verdict once the job's processes are gone; returns the cgroup's OOM-kill count."""
        if not self.cgroup:
            if self.limit > 0 and sum(o[4] for o in job_ipc) > self.limit:
                self.exceeded = True
            return None
        kills = _oom_kills(self._events)
        if kills > self._cfg.get("_oom_kills", 0):
            self.exceeded = True
        self._cfg["_oom_kills"] = kills
        return kills

    def _resident(self) -> int:
        total = 0
        for pid in self._processes():
            try:
                with open(f"/proc/{pid}/statm", "rb") as f:
                    fields = f.read().split()
                total += (int(fields[1]) - int(fields[2])) * _PAGE  # resident - file/shmem backed
            except (OSError, ValueError, IndexError):
                pass
        return total

    def _processes(self) -> list[int]:
        return _job_processes(self._cfg, self._pid, self._uid, self._forks)


def _job_processes(cfg: dict, pid: int, job_uid: int | None, forks: bool) -> list[int]:
    """Pids of the running job: its top process `pid` alone when it cannot
    fork, else every process of the job uid ("uid" reaping), of the sandbox's
    PID namespace but pid 1 and the worker ("namespace"), or of the job's
    session (otherwise: a setsid escapee is missed there)."""
    if not forks:
        return [pid]
    mode, keep, out = cfg.get("reap"), worker_pids(cfg), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep:
            continue
        try:
            if mode == "uid" and job_uid is not None:
                if os.stat(f"/proc/{name}").st_uid != job_uid:
                    continue
            elif mode != "namespace":
                with open(f"/proc/{name}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[3]) != pid:  # session id
                        continue
        except (OSError, ValueError, IndexError):
            continue
        out.append(int(name))
    return out


_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
# CPU checks: a cgroup counter or one process's /proc entry is cheap to read
# every 20 ms; a scan of /proc for a forking job's processes every 50 ms.
_CPU_POLL_S = {"cgroup": 0.02, "process": 0.02, "scan": 0.05}


class _CpuMeter:
    """CPU seconds (user + system) the running job has used, all its processes
    and threads together, and whether that is over its limit (job["timeout_s"]).

    cgroup mode (cfg["cpu"]["mode"] == "cgroup"): the worker's cgroup counts
    the CPU time of every task in it, exited ones included (cgroup v1
    cpuacct.usage, v2 cpu.stat usage_usec); the job's share is the rise since
    just before its fork less the worker's and its zygote's own CPU time meanwhile (bubblewrap's
    processes in the cgroup only wait). Exact.

    Poll mode: the sum over the job's processes (_job_processes) of their own
    and their waited-for children's CPU time in /proc/PID/stat, in 10 ms
    ticks; after the job, at least what wait4 reports for its top process.
    It misses the CPU time of processes whose parent ignores SIGCHLD (they
    are never waited for) if they exit between two checks: RLIMIT_CPU still
    bounds each one, and the wall-clock ceiling the job.
    """

    def __init__(self, job: dict, cfg: dict, job_uid: int | None) -> None:
        self.limit = float(job["timeout_s"])
        cpu = cfg.get("cpu") or {}
        self._file = cpu.get("file") if cpu.get("mode") == "cgroup" else None
        self._cfg, self._uid = cfg, job_uid
        self._forks = job["limits"]["processes"] > 0
        self._interval = _CPU_POLL_S["cgroup" if self._file else "scan" if self._forks else "process"]
        self.pid: int | None = None  # the job's top process, once forked
        self.used = 0.0
        self._base = self._cgroup_s() - self._own_s() if self._file else 0.0
        self.due = time.monotonic() + self._interval

    def check(self) -> bool:
        """True once the job is over its CPU limit (read at most every interval,
        and sooner as it nears the limit)."""
        now = time.monotonic()
        if now < self.due:
            return False
        self.used = max(self.used, self._sample())
        if self.used > self.limit and not self._file:
            # A child waited for between reading it and reading its parent
            # counts twice in one scan: only a second look decides.
            self.used = self._sample()
        left = self.limit - self.used
        self.due = now + min(self._interval, max(left / (os.cpu_count() or 1), 0.002))
        return left < 0

    def final(self, waited_s: float) -> float:
        """The job's CPU seconds once all its processes are gone; `waited_s`:
        what wait4 reported for its top process."""
        if self._file:
            return max(self._cgroup_s() - self._own_s() - self._base, 0.0)
        return max(self.used, waited_s)

    def _sample(self) -> float:
        if self._file:
            return self._cgroup_s() - self._own_s() - self._base
        if self.pid is None:
            return 0.0
        ticks = 0
        for pid in _job_processes(self._cfg, self.pid, self._uid, self._forks):
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
            except (OSError, ValueError, IndexError):
                pass
        return ticks * _TICK_S

    def _cgroup_s(self) -> float:
        with open(self._file, "rb") as f:
            data = f.read()
        if not data.startswith(b"usage_usec"):
            return int(data) / 1e9  # cgroup v1 cpuacct.usage: nanoseconds
        return int(data.split(b"\n", 1)[0].split()[1]) / 1e6  # cgroup v2 cpu.stat

    def _own_s(self) -> float:
        """CPU seconds of the worker and its zygote themselves (their own
        work in the shared cgroup: fork, supervision), not the jobs'."""
        own = resource.getrusage(resource.RUSAGE_SELF)
        zygote = 0.0
        if self._cfg.get("zygote_pid"):
            try:
                with open(f"/proc/{self._cfg['zygote_pid']}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                zygote = (int(fields[11]) + int(fields[12])) * _TICK_S  # its own utime, stime
            except (OSError, ValueError, IndexError):
                pass
        return own.ru_utime + own.ru_stime + zygote


def _reap_cgroup(cfg: dict) -> None:
    """In cgroup mode, also SIGKILLs every other process of the worker's cgroup:
    that catches what a scan of /proc by uid misses (a job process that made
    itself non-dumpable shows as root there)."""
    memory = cfg.get("memory") or {}
    if memory.get("mode") != "cgroup":
        return
    keep = (0, *worker_pids(cfg))

    def members() -> list[int]:
        try:
            with open(os.path.join(memory["dir"], "cgroup.procs"), "rb") as f:
                # Processes outside this PID namespace (bwrap's own) read as 0.
                return [p for p in map(int, f.read().split()) if p not in keep]
        except (OSError, ValueError):
            return []

    kill_until_gone(members, collect=True)


def _ipc_before(cfg: dict) -> set | None:
    return {o[:2] for o in _sysv_objects()} if cfg.get("ipc") == "new" else None


def _clean_leftovers(cfg: dict, job_uid: int | None, ipc_before: set | None, meter: _MemoryMeter | None, response: dict, keep: str | None) -> None:
    """After a job: final memory verdict, then removes its IPC objects and scratch files."""
    mine = _job_ipc(cfg, job_uid, ipc_before)
    if meter is not None:
        kills = meter.finish(mine)
        if kills is not None:
            response["oom_kills"] = kills
        if meter.exceeded:
            response["memory_exceeded"] = meter.detail
    for kind, ident, _uid, cuid, _bytes in mine:
        _remove_ipc(kind, ident, cuid)
    if mine and _job_ipc(cfg, job_uid, ipc_before):
        # Could not remove them all: with bwrap, retiring the worker ends its
        # IPC namespace and with it every object left.
        response["retire"] = True
    _clean_scratch(cfg, job_uid, keep)


def _prepare_cleaning(cfg: dict) -> None:
    """At worker start: finds the scratch directories, and removes what a
    previous holder of this job uid may have left (a crashed host's pool)."""
    job_uid = cfg.get("uid") if os.getuid() == 0 else None
    job_gid = cfg.get("gid") if job_uid is not None else None
    cfg["_scratch"] = _scratch_targets(cfg, job_uid, job_gid)
    memory = cfg.get("memory") or {}
    if memory.get("mode") == "cgroup":
        cfg["_oom_kills"] = _oom_kills(os.path.join(memory["dir"], memory["events"]))
    if job_uid is not None:
        _reap(cfg, job_uid)
        for kind, ident, _uid, cuid, _bytes in _job_ipc(cfg, job_uid, None):
            _remove_ipc(kind, ident, cuid)
        _clean_scratch(cfg, job_uid, force=True)
