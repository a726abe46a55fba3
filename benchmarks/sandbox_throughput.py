"""Sandboxed executions per second for trivial programs.

    python benchmarks/sandbox_throughput.py [--jobs 400] [--threads 2]

Compares, on the same trivial program (`def f(x): return x + 1`, 3 calls):
  * bwrap  -- environments.sandbox pool, workers inside bubblewrap (if usable)
  * plain  -- the same pool with plain forked workers (rlimits only)
  * subprocess.run -- a fresh `python -c ...` per job, the naive baseline
Each mode runs `--jobs` jobs from `--threads` threads (pool size = threads)
after a warm-up, and reports throughput plus p50/p99 per-job latency. For a
trivial program the latency is almost entirely sandbox overhead.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import time
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from environments.sandbox import PlainLauncher, PythonJob, SandboxPool, Status, bwrap  # noqa: E402

SOURCE = "def f(x):\n    return x + 1\n"
JOB = PythonJob(source=SOURCE, entry="f", calls=((1,), (2,), (3,)))


def _measure(run_one: Callable[[], None], jobs: int, threads: int) -> tuple[float, float, float]:
    """(jobs/s, p50 ms, p99 ms) of `jobs` calls to run_one spread over `threads`."""

    def timed(_: int) -> float:
        start = time.perf_counter()
        run_one()
        return time.perf_counter() - start

    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        list(ex.map(timed, range(threads * 4)))  # warm-up: start workers
        start = time.perf_counter()
        latencies = np.asarray(list(ex.map(timed, range(jobs))))
        elapsed = time.perf_counter() - start
    return jobs / elapsed, 1e3 * float(np.percentile(latencies, 50)), 1e3 * float(np.percentile(latencies, 99))


def _pool_runner(pool: SandboxPool) -> Callable[[], None]:
    def run_one() -> None:
        result = pool.run(JOB)
        if result.status is not Status.OK or [r["ok"] for r in result.result["results"]] != [2, 3, 4]:
            raise RuntimeError(f"sandbox job failed: {result}")

    return run_one


def _subprocess_one() -> None:
    code = SOURCE + "print([f(1), f(2), f(3)])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10, check=True)
    if out.stdout.strip() != "[2, 3, 4]":
        raise RuntimeError(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    print(f"cpus={os.cpu_count()} threads={args.threads} jobs={args.jobs} python={sys.version.split()[0]}")
    print(f"{'mode':<16}{'jobs/s':>10}{'p50 ms':>10}{'p99 ms':>10}")

    modes: list[tuple[str, Callable[[], None], SandboxPool | None]] = []
    ok, reason = bwrap.probe()
    if ok:
        pool = SandboxPool(size=args.threads, launcher=bwrap.BwrapLauncher())
        modes.append(("bwrap", _pool_runner(pool), pool))
    else:
        print(f"{'bwrap':<16}unavailable: {reason}")
    plain = SandboxPool(size=args.threads, launcher=PlainLauncher())
    modes.append(("plain", _pool_runner(plain), plain))
    modes.append(("subprocess.run", _subprocess_one, None))

    for name, run_one, pool in modes:
        jobs = args.jobs if pool is not None else max(args.jobs // 4, 20)  # the baseline is slow
        rate, p50, p99 = _measure(run_one, jobs, args.threads)
        print(f"{name:<16}{rate:>10.1f}{p50:>10.2f}{p99:>10.2f}")
        if pool is not None:
            pool.close()


if __name__ == "__main__":
    main()
