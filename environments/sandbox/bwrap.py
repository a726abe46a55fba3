"""Bubblewrap launcher: each worker lives in its own bwrap sandbox.

Layout inside the sandbox: the runtime (/usr, the interpreter's prefix, the
worker script) bind-mounted read-only; a private tmpfs /tmp that holds one
fresh work directory per job; its own /proc and /dev; an empty environment;
new mount, PID, network (no interfaces but loopback), IPC, UTS and cgroup
namespaces; the sandbox dies with the host process.

Two privilege models, chosen by who runs the host:

* root host: no user namespace. The worker runs as root holding only the
  capabilities it needs to set up and clean each job (setuid/setgid, chown,
  DAC override/fowner, kill); each job drops to an unprivileged uid that no
  other live worker on the host uses (leased by the pool, see uids.py), so
  RLIMIT_NPROC binds it and counts only this worker's job, it cannot signal
  the worker, and the worker can reap every leftover process of that uid
  (setsid escapees included). Nothing in the sandbox is writable by that uid
  but the job's work directory.
* unprivileged host: bwrap also unshares the user namespace; worker and job
  share one mapped uid, and leftovers are reaped by killing every other
  process of the sandbox's private PID namespace. RLIMIT_NPROC binds the job;
  since Linux 5.14 it counts the processes of that uid in the sandbox's own
  user namespace (worker and bwrap's init included), so sandboxes, and pools,
  do not share the count (the host user's own RLIMIT_NPROC, as it was when
  the sandbox started, still caps them all together); on older kernels it
  counts every process of the host user. A job can kill its own worker here; the host then reports
  SANDBOX_ERROR and starts a fresh sandbox. The job can write the sandbox's
  tmpfs directories; whatever it adds there is removed after the job.

System V IPC objects a job creates live in the worker's private IPC
namespace and are removed after each job (all jobs of one worker share that
namespace). Where the host uses memory cgroups (cgroup.py), the worker's
cgroup directory is bind-mounted read-only at /run/rlpt-cgroup so the worker
can watch its OOM counter.

`probe()` runs a throw-away sandbox once and caches the outcome; callers fall
back to `PlainLauncher` (with a logged warning) when it fails.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import subprocess
from typing import Any

from environments.sandbox.pool import WORKER_SCRIPT, _system_python

_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL")
_SANDBOX_WORKER_DIR = "/opt/rlpt-sandbox"
_SANDBOX_CGROUP_DIR = "/run/rlpt-cgroup"
_SANDBOX_CPU_CGROUP_DIR = "/run/rlpt-cgroup-cpu"


_SANDBOX_PYTHON_PREFIX = "/opt/rlpt-python"
_SANDBOX_PATHS_DIR = "/opt/rlpt-paths"


def _sandbox_python(python: str) -> str:
    """Interpreter path inside the sandbox.

    An interpreter outside /usr (pyenv, conda) is bind-mounted at a neutral
    path: its host location may sit under a directory the unprivileged job
    uid cannot traverse (e.g. /root), which would break stdlib imports.
    """
    if python.startswith("/usr/"):
        return python
    return os.path.join(_SANDBOX_PYTHON_PREFIX, "bin", os.path.basename(python))


def _runtime_binds(python: str) -> list[str]:
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/lib", "/lib64", "/lib32", "/sbin"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    if not python.startswith("/usr/"):
        prefix = os.path.dirname(os.path.dirname(python))
        args += ["--ro-bind", prefix, _SANDBOX_PYTHON_PREFIX]
        if glob.glob(os.path.join(prefix, "lib", "libpython*.so*")):
            # A shared-library build (pyenv's, for one) finds libpython by its
            # host prefix, which the sandbox does not have: point the loader at the bound one.
            args += ["--setenv", "LD_LIBRARY_PATH", os.path.join(_SANDBOX_PYTHON_PREFIX, "lib")]
    # Shell tasks expect a few name-service files, and Debian's /usr/bin/awk (and
    # other commands) are links through /etc/alternatives; nothing else from /etc.
    for path in ("/etc/passwd", "/etc/group", "/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


class BwrapLauncher:
    """Starts workers as `bwrap [isolation flags] -- python worker.py CONFIG`."""

    name = "bwrap"

    def __init__(self, bwrap: str | None = None, python: str | None = None, tmpfs_bytes: int = 256 << 20) -> None:
        """tmpfs_bytes: size of the sandbox's memory-backed /tmp, which holds every
        job's work directory; it bounds what a file bomb can consume."""
        self._bwrap = bwrap or shutil.which("bwrap") or "bwrap"
        self._tmpfs_bytes = tmpfs_bytes
        self._python = python or _system_python()
        self._root = os.geteuid() == 0

    def argv(self, worker_config: dict[str, Any]) -> list[str]:
        isolation = [
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            # bwrap's own PR_SET_PDEATHSIG: bound to the forking *thread*, which
            # is why the pool forks every worker from one long-lived thread.
            "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
            "--hostname", "sandbox",
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(self._tmpfs_bytes), "--tmpfs", "/tmp",
            # Directories bwrap creates are 0700 by default; the job uid must
            # traverse those holding the runtime.
            "--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", _SANDBOX_PATHS_DIR,
        ]  # fmt: skip
        if self._root:
            isolation += ["--cap-drop", "ALL"] + [a for cap in _CAPS for a in ("--cap-add", cap)]
        else:
            isolation += ["--unshare-user"]
        # The worker's private IPC namespace holds only jobs' objects, and the
        # sandbox's own tmpfs directories are the only writable places.
        config = dict(worker_config, tmp_dir="/tmp", reap="uid" if self._root else "namespace", ipc="all", scratch="sandbox")
        memory = dict(config.get("memory") or {})
        if memory.get("mode") == "cgroup":
            # The worker's cgroup, read-only: the worker watches its OOM counter.
            isolation += ["--ro-bind", memory["dir"], _SANDBOX_CGROUP_DIR]
            config["memory"] = dict(memory, dir=_SANDBOX_CGROUP_DIR)
        cpu = dict(config.get("cpu") or {})
        if cpu.get("mode") == "cgroup":
            # Its CPU counter, read-only (the memory cgroup's own directory on v2).
            inside = _SANDBOX_CGROUP_DIR if memory.get("mode") == "cgroup" and cpu["dir"] == memory["dir"] else _SANDBOX_CPU_CGROUP_DIR
            if inside != _SANDBOX_CGROUP_DIR:
                isolation += ["--ro-bind", cpu["dir"], inside]
            config["cpu"] = dict(cpu, dir=inside, file=os.path.join(inside, os.path.basename(cpu["file"])))
        paths = [os.path.join(_SANDBOX_PATHS_DIR, str(i)) for i in range(len(config.get("paths") or ()))]
        for host, inside in zip(config.get("paths") or (), paths):
            # Extra import directories of a kernel worker (environments/cad): read-only, at neutral paths.
            isolation += ["--ro-bind", host, inside]
        config["paths"] = paths
        return [
            self._bwrap,
            *isolation,
            *_runtime_binds(self._python),
            "--ro-bind", os.path.dirname(WORKER_SCRIPT), _SANDBOX_WORKER_DIR,
            "--chdir", "/tmp",
            "--",
            _sandbox_python(self._python), "-I", "-S", "-B", os.path.join(_SANDBOX_WORKER_DIR, os.path.basename(WORKER_SCRIPT)),
            json.dumps(config),
        ]  # fmt: skip


@functools.lru_cache(maxsize=1)
def probe() -> tuple[bool, str]:
    """(usable, reason): whether this machine can run the bwrap sandbox.

    Runs the real launcher command with a trivial script, so missing binaries,
    disabled user namespaces, seccomp/AppArmor denials and missing mounts all
    show up here rather than at the first graded job.
    """
    if shutil.which("bwrap") is None:
        return False, "bwrap is not installed (Debian package 'bubblewrap'; see launch/setup_system.sh)"
    argv = BwrapLauncher().argv({"uid": None, "gid": None})
    # Replace the worker invocation (last 2 args: script, config) by a self-test.
    check = "import os, sys; assert os.path.isdir('/proc/self'); sys.stdout.write('ok')"
    argv = argv[:-2] + ["-c", check]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bwrap failed to run: {e}"
    if done.returncode != 0 or done.stdout != b"ok":
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return False, f"bwrap cannot create the sandbox here: {err[-1] if err else done.returncode}"
    return True, "ok"

