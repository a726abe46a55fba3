"""Sandboxed executions per second for trivial programs; verdicts of a CPU-heavy job under load.

    python benchmarks/sandbox_throughput.py [--jobs 400] [--threads 2]
    python benchmarks/sandbox_throughput.py --contention 1,4,8 [--heavy_n 14000]

Compares, on the same trivial program (`def f(x): return x + 1`, 3 calls):
  * bwrap  -- environments.sandbox pool, workers inside bubblewrap (if usable)
  * plain  -- the same pool with plain forked workers (rlimits only)
  * subprocess.run -- a fresh `python -c ...` per job, the naive baseline
Each mode runs `--jobs` jobs from `--threads` threads (pool size = threads)
after a warm-up, and reports throughput plus p50/p99 per-job latency. For a
trivial program the latency is almost entirely sandbox overhead.

With --contention K1,K2,...: for each K, K graders (a pool of K workers, bubblewrap
when usable) each run the same CPU-heavy, correct solution at once (a naive
sum-of-divisors search below --heavy_n, about 4 s of CPU for 14000 on our
machines, under the 5 s limit of code tests), and the table gives their
verdicts and CPU and wall seconds. With more graders than cores a job's wall
time grows with K while its CPU time does not.
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


# A correct, CPU-heavy solution (our own fixture): the sum of the abundant
# numbers below n, each found by trial division over every smaller number.
HEAVY_SOURCE = """
def abundant_sum(limit):
    total = 0
    for n in range(2, limit):
        s = 0
        for d in range(1, n):
            if n % d == 0:
                s += d
        if s > n:
            total += n
    return total
"""


def _abundant_sum(limit: int) -> int:
    namespace: dict = {}
    exec(HEAVY_SOURCE, namespace)
    return namespace["abundant_sum"](limit)


def contention(graders: list[int], heavy_n: int, timeout_s: float) -> None:
    """Verdicts, CPU and wall seconds of K concurrent CPU-heavy graders, for each K."""
    expected = _abundant_sum(min(heavy_n, 200))  # checks the fixture, not the timing
    job = PythonJob(source=HEAVY_SOURCE, entry="abundant_sum", calls=((heavy_n,),), timeout_s=timeout_s)
    probe = PythonJob(source=HEAVY_SOURCE, entry="abundant_sum", calls=((200,),), timeout_s=timeout_s)
    ok, _ = bwrap.probe()
    launcher = bwrap.BwrapLauncher() if ok else PlainLauncher()
    print(f"cpus={os.cpu_count()} launcher={launcher.name} job=abundant_sum({heavy_n}) limit={timeout_s:g}s")
    print(f"{'graders':>8}  {'verdicts':<28}{'cpu s (min-max)':>18}{'wall s (min-max)':>20}  detail of a TIMEOUT")
    for k in graders:
        pool = SandboxPool(size=k, launcher=launcher)
        try:
            with concurrent.futures.ThreadPoolExecutor(k) as ex:
                warm = list(ex.map(lambda _: pool.run(probe), range(k)))  # start every worker first
                if any(r.status is not Status.OK or r.result["results"] != [{"ok": expected}] for r in warm):
                    raise RuntimeError(f"the fixture failed: {warm}")
                results = list(ex.map(lambda _: pool.run(job), range(k)))
        finally:
            pool.close()
        counts: dict[str, int] = {}
        for r in results:
            verdict = "PASS" if r.status is Status.OK and "ok" in r.result["results"][0] else r.status.name
            counts[verdict] = counts.get(verdict, 0) + 1
        cpu = [r.cpu_s for r in results]
        wall = [r.wall_s for r in results]
        detail = next((r.detail for r in results if r.status is Status.TIMEOUT), "")
        shown = " ".join(f"{v}={n}" for v, n in sorted(counts.items()))
        print(f"{k:>8}  {shown:<28}{min(cpu):>8.2f} - {max(cpu):<7.2f}{min(wall):>10.2f} - {max(wall):<7.2f}  {detail}")


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
    parser.add_argument("--contention", default="", help="comma-separated grader counts, e.g. 1,4,8: run the CPU-heavy figure instead")
    parser.add_argument("--heavy_n", type=int, default=14000, help="size of the CPU-heavy job (about 4 s of CPU at 14000)")
    parser.add_argument("--timeout_s", type=float, default=5.0, help="the CPU-heavy job's time limit")
    args = parser.parse_args()
    if args.contention:
        graders = [int(k) for k in args.contention.split(",")]
        if not graders or min(graders) < 1:
            raise SystemExit(f"--contention must list grader counts >= 1, got {args.contention!r}")
        contention(graders, args.heavy_n, args.timeout_s)
        return
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
