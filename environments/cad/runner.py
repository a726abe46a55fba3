"""Host side of the kernel worker: a sandbox pool whose workers import build123d once.

`build(script)` runs a build123d script in the sandbox (bubblewrap where the
host allows it, as every sandbox domain; docs/sandbox.md) on a worker that
imported the OCC kernel before its first job, and returns what happened as a
`BuildOutcome`: the mesh, the kernel's error line, or the job's process
failure (TIMEOUT, OOM, SANDBOX_ERROR). One pool per process, created on
first use (and again in a forked child), closed at exit.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import os
import threading

from environments import sandbox
from environments.job_failures import process_failure
from environments.programs.values import Malformed, untag
from environments.sandbox.pool import default_worker_config
from environments.verdicts import Grade, Verdict

# Tessellation of both the reference and the candidate, passed to build123d's
# `tessellate(tolerance, angular_tolerance)`, which meshes with OCCT's relative
# deflection (isRelative=True): LINEAR_MM is a fraction of each edge's size,
# not millimetres, and is looser than ANGULAR_RAD at every size. The angular
# deflection decides: a full circle gets 63 chords whatever its diameter
# (chord error 6.2e-4 x the diameter, 0.05 mm at 80 mm). The same design
# meshes to the same triangles. (The name is kept for the callers' keyword.)
LINEAR_MM = 0.05
ANGULAR_RAD = 0.2
MAX_TRIANGLES = 100_000
# A bracket builds in 20-40 ms; a script gets 10 s of CPU (fillets on a busy
# kernel can take seconds) and the default wall-clock ceiling.
TIMEOUT_S = 10.0
# OCC starts threads of its own (one on 2 cores; its thread pool grows with the
# cores) and a job that cannot start them hangs until its wall-clock limit;
# threads count as processes, so the limit leaves room for them and still
# bounds a fork bomb.
PROCESSES = max(16, 2 * (os.cpu_count() or 1) + 4)
# The worker holds the imported kernel (~400 MB resident, ~1 GB mapped), which
# its memory cgroup counts too: a job may bring the whole worker to 2 GiB.
LIMITS = sandbox.Limits(address_space_bytes=6 << 30, memory_bytes=2 << 30, file_size_bytes=1 << 20, open_files=64, processes=PROCESSES)
_START_TIMEOUT_S = 90.0
# Each kernel worker holds ~400 MB; graders beyond the cores only queue.
POOL_SIZE = 4
_HARNESS = "from cad_kernel import build, build_parts\n"
_KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclasses.dataclass(frozen=True)
class BuildOutcome:
    """One script's build. Exactly one of `mesh` (built) and `grade` (not) is set.

    mesh: {"vertices": float32 bytes, "triangles": uint32 bytes, "solids",
      "valid", "volume"} as the kernel reported them (untrusted); for an
      assembly {"parts": [one such report per part]}.
    grade: MALFORMED with the kernel's error line, or the process failure.
    cpu_s: CPU seconds the job used.
    log: the last line the script printed (its own log, bounded), "" if none.
    """

    mesh: dict | None
    grade: Grade | None
    cpu_s: float
    log: str = ""


REQUIRED = ("build123d", "manifold3d", "trimesh", "rtree")


def available() -> tuple[bool, str]:
    """(usable, reason): whether the kernel (build123d) and the host's mesh
    libraries are installed."""
    missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
    if missing:
        return False, f"{', '.join(missing)} not installed (pip install 'rlpt-environments[cad]', or requirements.txt)"
    return True, "ok"


def _site_dir() -> str:
    """The directory holding build123d and its dependencies (the venv's site-packages)."""
    spec = importlib.util.find_spec("build123d")
    if spec is None or spec.origin is None:
        raise RuntimeError(available()[1])
    return os.path.dirname(os.path.dirname(spec.origin))


_lock = threading.Lock()
_pool: sandbox.SandboxPool | None = None
_pool_pid: int | None = None


def new_pool(size: int = 2, launcher: sandbox.Launcher | None = None, preload: tuple[str, ...] = ("cad_kernel",)) -> sandbox.SandboxPool:
    """A pool of `size` kernel workers, each importing `preload` before its first job."""
    config = default_worker_config()
    config.update(
        paths=[_KERNEL_DIR, _site_dir()],
        preload=list(preload),
        # One thread per numerical library: the worker forks jobs, and a
        # thread pool started before fork is missing in the child.
        env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )
    return sandbox.SandboxPool(size=size, launcher=launcher or sandbox.default_launcher(), worker_config=config, start_timeout_s=_START_TIMEOUT_S)


def kernel_pool() -> sandbox.SandboxPool:
    """The process's kernel pool (lazily created; as many workers as cores, at most POOL_SIZE)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = new_pool(min(POOL_SIZE, os.cpu_count() or 1))
            _pool_pid = os.getpid()
        return _pool


@atexit.register
def _close() -> None:
    if _pool is not None and _pool_pid == os.getpid():
        _pool.close()


def build(script: str, pool: sandbox.SandboxPool | None = None, timeout_s: float = TIMEOUT_S, wall_s: float | None = None,
          linear_mm: float = LINEAR_MM, assembly: bool = False) -> BuildOutcome:
    """Builds `script` (which must define `result`) in the kernel sandbox, within
    `timeout_s` CPU seconds and `wall_s` wall-clock seconds (None: the sandbox's
    default ceiling), tessellated with linear deflection `linear_mm` (relative to
    each edge's size; see LINEAR_MM). With `assembly`, `result` is a
    list of parts and the mesh report holds one report per part under "parts"."""
    call = (script, linear_mm, ANGULAR_RAD, MAX_TRIANGLES)
    entry = "build_parts" if assembly else "build"
    job = sandbox.PythonJob(source=_HARNESS, entry=entry, calls=(call,), timeout_s=timeout_s, wall_s=wall_s, limits=LIMITS)
    result = (pool or kernel_pool()).run(job)
    return outcome(result, timeout_s)


def _count(outputs) -> str:
    return str(len(outputs)) if isinstance(outputs, list) else "no list of"


def outcome(result: sandbox.JobResult, timeout_s: float = TIMEOUT_S) -> BuildOutcome:
    """The `BuildOutcome` of a finished kernel job."""
    failure = process_failure(result, timeout_s)
    if failure is not None:
        return BuildOutcome(None, failure, result.cpu_s)
    payload = result.result or {}
    outputs = payload.get("results")
    if payload.get("phase") != "done" or not isinstance(outputs, list) or len(outputs) != 1:
        # The harness runs in the script's own process, imported before it:
        # only the script can break it (patch the worker's encoder, add a call,
        # write a frame of its own). That is the script's failure, never a
        # masked infrastructure error.
        return BuildOutcome(None, Grade(Verdict.ERROR, 0.0, f"the script broke the kernel harness (it answered phase "
                                                            f"{payload.get('phase')!r:.40} with {_count(outputs)} results, expected 'done' with 1)"), result.cpu_s)
    out = outputs[0]
    if "error" in out:  # the script broke the harness itself (e.g. exit, a patched module)
        if out.get("error_type") == "MemoryError":
            return BuildOutcome(None, Grade(Verdict.OOM, 0.0, "memory limit exceeded"), result.cpu_s)
        return BuildOutcome(None, Grade(Verdict.MALFORMED, 0.0, f"the script did not build: {out['error']}"), result.cpu_s)
    try:
        value = untag(out.get("ok"))
    except (Malformed, TypeError, ValueError, RecursionError) as e:
        return BuildOutcome(None, Grade(Verdict.MALFORMED, 0.0, f"the kernel returned a malformed value ({e})"), result.cpu_s)
    if type(value) is not dict or type(value.get("built")) is not bool:
        return BuildOutcome(None, Grade(Verdict.MALFORMED, 0.0, "the kernel returned no build report"), result.cpu_s)
    if not value["built"]:
        verdict = Verdict.OOM if value.get("error_type") == "MemoryError" else Verdict.MALFORMED
        return BuildOutcome(None, Grade(verdict, 0.0, f"the script did not build: {value.get('error', '')!s:.220}"), result.cpu_s)
    lines = result.output.strip().splitlines()
    return BuildOutcome(value, None, result.cpu_s, lines[-1][:120] if lines else "")
