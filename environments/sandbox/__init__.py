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


@atexit.register
def _close_default_pool() -> None:
    if _pool is not None and _pool_pid == os.getpid():
        _pool.close()
