"""Grading latency, throughput and reference / wrong verdicts of the real-tool domains.

    python benchmarks/domains_real.py --parts=cad [--tasks 8] [--threads 2] [--cadprompt /tmp/cadprompt/CADPrompt]

CAD part (`cad_rows`): for each generated `rlpt/cad-*` domain (parts and
assemblies), `--tasks` tasks (seeds 0..n-1); each task's reference script and
a wrong one (its first cylinder 0.5 mm wider in radius; for the plank
overhang, plank 3 alone past plank 2 by the goal, so it tips) are graded through the
whole ladder (kernel
worker in the sandbox, host mesh checks, IoU, surface distance), from
`--threads` threads at once on the process's kernel pool. With `--cadprompt`,
the public CADPrompt rows that load (environments/cad/cadprompt.py): no
build123d program is published, so the reference answer is a script that
rebuilds the published mesh face by face in the kernel
(`cadprompt.mesh_script`), and the wrong one the same for the mesh scaled by
1.05 about its centroid; both go through the whole ladder.
Each row: domain, p50 / p99 ms per grade, grades/s with `--threads` graders,
reference PASS rate, wrong FAIL rate (FAIL, not MALFORMED or an error).
benchmarks/domains_real.py runs this part beside the finance one.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import sys
import time
from typing import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import environments  # noqa: E402, F401
from environments import registry  # noqa: E402
from environments.verdicts import Verdict  # noqa: E402


def _row(domain: str, jobs: list[tuple[str, Callable[[], object]]], threads: int) -> dict:
    """Runs every (kind, grade thunk) from `threads` threads; kind is "reference" or "wrong"."""

    def timed(job: tuple[str, Callable[[], object]]) -> tuple[str, object, float]:
        start = time.perf_counter()
        grade = job[1]()
        return job[0], grade, time.perf_counter() - start

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        done = list(pool.map(timed, jobs))
    wall = time.perf_counter() - start
    ms = np.array([d for _, _, d in done]) * 1e3
    refs = [g for kind, g, _ in done if kind == "reference"]
    wrongs = [g for kind, g, _ in done if kind == "wrong"]
    return {
        "domain": domain,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "grades_per_s": len(done) / wall,
        "reference_pass": sum(g.verdict is Verdict.PASS for g in refs) / max(1, len(refs)),
        "wrong_fail": sum(g.verdict is Verdict.FAIL for g in wrongs) / max(1, len(wrongs)),
        "n": len(done),
    }


def _wrong(problem) -> str:
    """The wrong answer: the reference with its first cylinder 0.5 mm wider in
    radius (a part of boxes alone: its first box 1 mm longer); for the overhang stack, plank 2 flush on plank 1 and plank 3 out
    past it by the whole goal (it tips: its centre is past plank 2's end)."""
    script = getattr(problem.hidden, "script", problem.hidden)
    goal = getattr(problem.hidden, "overhang_mm", None)
    if goal is None:
        if "Cylinder(" not in script:
            return script.replace("Box(", "Box(1 + ", 1)
        return script.replace("Cylinder(", "Cylinder(0.5 + ", 1)
    xs = iter(("0", f"{goal:g}"))
    return re.sub(r"Pos\([^,]+,", lambda _: f"Pos({next(xs)},", script)


def cad_rows(tasks: int = 8, threads: int = 2, cadprompt_root: str | None = None, match: str = "") -> list[dict]:
    """One row per generated CAD domain whose id contains `match` (and CADPrompt
    when its folder is given)."""
    from environments.cad import cadprompt, geometry, runner
    from environments.families import cad

    runner.build("from build123d import *\nresult = Box(1, 1, 1)")  # start the workers outside the timings
    rows = []
    for spec in registry.list_domains(family="cad", tag="build123d"):
        if "public" in spec.tags or match not in spec.id:
            continue
        domain = registry.domain(spec.id)
        problems = [domain.sample(np.random.default_rng(seed)) for seed in range(tasks)]
        jobs = []
        for p in problems:
            wrong = _wrong(p)
            jobs += [("reference", lambda d=domain, p=p: d.grade(p, p.demonstration)), ("wrong", lambda d=domain, p=p, w=wrong: d.grade(p, w))]
        rows.append(_row(spec.id, jobs, threads))
    if cadprompt_root:
        parts, refused = cadprompt.load(cadprompt_root)
        jobs = []
        for part in parts:
            ref = cadprompt.reference(part.mesh_path)
            centre = ref.vertices.mean(0)
            scaled = geometry.solid(centre + (ref.vertices - centre) * 1.05, ref.faces)
            tol = cadprompt.tolerance(ref)
            jobs += [("reference", lambda r=ref, t=tol: cad.grade_against(cadprompt.mesh_script(r), r, t)),
                     ("wrong", lambda s=scaled, r=ref, t=tol: cad.grade_against(cadprompt.mesh_script(s), r, t))]
        row = _row("rlpt/cad-cadprompt-hard-v0 (kernel round trip)", jobs, threads)
        row["loaded"], row["refused"] = len(parts), [f"{r.id}: {r.reason}" for r in refused]
        rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    print("| domain | p50 ms | p99 ms | grades/s | reference PASS | wrong FAIL | grades |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['domain']} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['grades_per_s']:.1f} | "
              f"{r['reference_pass']:.1%} | {r['wrong_fail']:.1%} | {r['n']} |")
    for r in rows:
        if "refused" in r:
            print(f"{r['domain']}: {r['loaded']} rows loaded, {len(r['refused'])} refused: {r['refused']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cadprompt", default=None, help="the extracted CADPrompt/ folder")
    parser.add_argument("--domains", default="", help="only generated domains whose id contains this")
    args = parser.parse_args()
    print(f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, {args.threads} graders")
    print_table(cad_rows(args.tasks, args.threads, args.cadprompt, args.domains))


if __name__ == "__main__":
    main()
