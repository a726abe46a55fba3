"""Sandboxed execution of untrusted (model-written) programs.

    from environments import sandbox
    result = sandbox.run(sandbox.PythonJob(source="def f(x): return x+1", entry="f", calls=((1,), (2,))))
    result.status, result.result["results"]   # Status.OK, [{"ok": 2}, {"ok": 3}]

`run` uses one process-wide `SandboxPool` (created on first use, recreated in
a forked child process, closed at exit). Its workers live in bubblewrap
sandboxes (`bwrap.BwrapLauncher`) when `bwrap.probe()` succeeds; otherwise they
are plain forked processes with rlimits and a uid drop, and a warning is
logged once. Never exec()s candidate code in the calling process.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading

from environments.sandbox import bwrap
from environments.sandbox.pool import (
    JobResult,
    Launcher,
    Limits,
    PlainLauncher,
    PythonJob,
    SandboxPool,
    ShellJob,
    Status,
    text_sha256,
    wall_ceiling,
)

__all__ = [
    "HIDDEN_FILES_KEY",
    "SandboxRequired",
    "default_launcher",
    "JobResult",
    "Launcher",
    "Limits",
    "PlainLauncher",
    "PythonJob",
    "SandboxPool",
    "ShellJob",
    "Status",
    "text_sha256",
    "wall_ceiling",
    "default_pool",
    "require_sealed_disk",
    "run",
    "set_default_pool",
]

log = logging.getLogger(__name__)
_lock = threading.Lock()
_pool: SandboxPool | None = None
_pool_pid: int | None = None


def default_pool() -> SandboxPool:
    """The shared pool of this process (lazily created)."""
    global _pool, _pool_pid
    with _lock:
        # After os.fork the inherited pool's pipes belong to the parent.
        if _pool is None or _pool_pid != os.getpid():
            _pool = SandboxPool(launcher=default_launcher())
            _pool_pid = os.getpid()
        return _pool


def default_launcher() -> Launcher:
    """bwrap when this machine can run it, else the plain forked worker (with a warning)."""
    ok, reason = bwrap.probe()
    if ok:
        return bwrap.BwrapLauncher()
    log.warning("sandbox: falling back to plain forked workers (rlimits only, no namespaces): %s", reason)
    return PlainLauncher()


def set_default_pool(pool: SandboxPool | None) -> SandboxPool | None:
    """Replaces the shared pool (e.g. a bwrap-backed or differently sized one);
    returns the previous pool, which the caller should close."""
    global _pool, _pool_pid
    with _lock:
        previous, _pool, _pool_pid = _pool, pool, os.getpid()
        return previous


def run(job: PythonJob | ShellJob) -> JobResult:
    return default_pool().run(job)


# Set to 1 to grade domains whose hidden material lies on this host's disk
# with plain workers, which can read it (see require_sealed_disk).
HIDDEN_FILES_KEY = "RLPT_PLAIN_SANDBOX_ANSWERS_CAN_READ_HIDDEN_FILES"
_accepted: set[str] = set()


class SandboxRequired(RuntimeError):
    """A domain whose hidden material is on disk was asked to grade with plain
    workers. Not a verifier failure: environments.env lets it through, so the
    run stops with its message instead of masking every answer."""


def require_sealed_disk(what: str, pool: SandboxPool | None = None) -> None:
    """Refuses (SandboxRequired) to grade `what` on `pool` (default: the shared
    pool) when its workers are plain processes: their jobs see the host's
    filesystem, where `what` keeps what it grades against (a public set's
    reference meshes, a dataset file's hidden tests, a packaged benchmark's
    tests). bubblewrap workers see only the runtime and their own work
    directory (bwrap.py). `HIDDEN_FILES_KEY`=1 in the environment accepts the
    risk: one warning per domain, then grading goes on."""
    launcher = (pool or default_pool()).launcher
    if getattr(launcher, "name", "") != "plain":
        return
    if os.environ.get(HIDDEN_FILES_KEY) == "1":
        if what not in _accepted:
            _accepted.add(what)
            log.warning("sandbox: grading %s with plain workers, which can read its hidden files (%s=1)", what, HIDDEN_FILES_KEY)
        return
    raise SandboxRequired(
        f"{what} keeps its hidden tests or references on this host's disk, and answers run by plain workers (no bubblewrap: "
        f"{bwrap.probe()[1]}) could read them; install bubblewrap (launch/setup_system.sh) or set {HIDDEN_FILES_KEY}=1 to accept the risk")


@atexit.register
def _close_default_pool() -> None:
    if _pool is not None and _pool_pid == os.getpid():
        _pool.close()
