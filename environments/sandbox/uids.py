"""Host-wide leases of job uids.

When the host runs as root, the jobs of every worker run as a uid of their
own. RLIMIT_NPROC counts processes per uid across the whole host, and
leftovers are reaped by uid, so a uid must never be shared by two live
workers, not even by workers of two pools in different processes (two runs,
a run and an evaluation). `acquire` hands out the first uid of a range whose
lock file it can flock exclusively; the lock is tied to the open file
description, so a second lease of the same uid fails in any process (this
one included), and it is released when the holder closes it or dies.
"""

from __future__ import annotations

import fcntl
import os
import stat
import threading

from environments.sandbox import cleanup

# Where the lock files live: the first of these that is (or can be made) a
# directory owned by this euid and writable by nobody else. /run is not swept
# by tmp cleaners, which could otherwise delete a held lock file.
LOCK_DIRS = ("/run/rlpt-sandbox-uids", "/tmp/rlpt-sandbox-uids")

_held: set[int] = set()  # lease fds of this process (closed in forked children)
_held_lock = threading.Lock()


class UidLease:
    """An exclusive claim on one job uid, held until `release` (or process exit)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd
        self._pid = os.getpid()

    def release(self) -> None:
        if self._pid != os.getpid():  # inherited by fork: the fd was closed at the fork
            self._fd = None
            return
        with _held_lock:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            _held.discard(fd)
        os.close(fd)

    def __repr__(self) -> str:
        return f"UidLease(uid={self.uid}, held={self._fd is not None})"


def _lock_dir() -> str:
    errors = []
    for path in LOCK_DIRS:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
            return path
        errors.append(f"{path}: not a private directory of uid {os.geteuid()}")
    raise OSError(f"no usable uid lock directory ({'; '.join(errors)})")


def acquire(first: int, count: int) -> UidLease | None:
    """Leases the lowest free uid in [first, first + count); None when all are taken.

    Before returning, kills whatever processes of that uid a dead previous
    holder may have left (a plain worker's job that escaped its process group).
    """
    directory = _lock_dir()
    for uid in range(first, first + count):
        fd = os.open(os.path.join(directory, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        with _held_lock:
            _held.add(fd)
        kill_processes_of(uid)
        return UidLease(uid, fd)
    return None


def kill_processes_of(uid: int) -> None:
    """SIGKILLs every process on the host whose /proc entry belongs to `uid`."""
    cleanup.kill_until_gone(lambda: cleanup.processes_of(uid), collect=False)


def _forget_in_child() -> None:
    # A forked child shares the parent's lock (same open file description):
    # closing its copies keeps the parent's leases, and means the child never
    # keeps a uid claimed after the parent is gone.
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)
