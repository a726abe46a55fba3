"""Probes every reasoning-gym generator as rlpt builds it (environments/families/reasoning_gym.py).

For each generator, in its own process, twice (PYTHONHASHSEED=1 and 2), and
for each difficulty level rlpt would register: builds the domain's dataset,
draws `--tasks` tasks with `sample` (fixed rng), grades each task's
demonstration and a few garbage answers with `grade`, draws one train and
one eval task through the split logic, and rebuilds the dataset to check that
the same draws give the same questions. Times are CPU seconds of the probing
process (`os.times()` user + system), not wall time, so other work on the
machine does not inflate them.

    .venv/bin/python benchmarks/reasoning_gym_probe.py                 # every generator, a markdown table
    .venv/bin/python benchmarks/reasoning_gym_probe.py countdown jugs  # some
    .venv/bin/python benchmarks/reasoning_gym_probe.py --json out.jsonl

A generator passes when, at every level: the build and every task finished
within the child's limit; the demonstration PASSes on every task; no garbage
answer PASSes and none is an infrastructure error; the eval and train splits
both yield a task; the questions are the same after a rebuild and under both
hash seeds; and the mean CPU time per task (sample + grading the
demonstration) is at most `--max-task-s`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import time

GARBAGE = ("@@@ ???", "qqqq", "0", "{", "A" * 40)


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def _same_number(a: str, b: str) -> bool:
    try:
        return a == b or float(a) == float(b)
    except ValueError:
        return False


def probe_one(name: str, tasks: int, all_levels: bool = False) -> dict:
    """Runs in the child: every level of generator `name`."""
    import numpy as np

    from environments import registry, splits
    from environments.families import reasoning_gym as rgf

    out: dict = {"name": name, "levels": {}}
    for difficulty, level in rgf.levels(name).items():
        if difficulty in rgf.LEVELS_LEFT_OUT.get(name, {}) and not all_levels:
            continue  # e.g. bf's hard level, whose generation does not finish
        row: dict = {"level": level}
        out["levels"][difficulty] = row
        spec_id = f"rlpt/{rgf.FAMILY}-{rgf._domain_name(name)}-{difficulty}-v{rgf.VERSION}"

        def domain():
            spec = registry.DomainSpec(id=spec_id, family=rgf.FAMILY, difficulty=difficulty,
                                       tags=("reasoning-gym", "procedural", name),
                                       max_prompt_chars=rgf.MAX_PROMPT_CHARS,
                                       max_answer_chars=rgf.MAX_ANSWER_CHARS)
            return rgf.ReasoningGymDomain(spec, name, level)

        try:
            t = cpu()
            d = domain()
            d.dataset()
            row["build_s"] = cpu() - t
            rng = np.random.default_rng(0)
            sample_s = grade_s = 0.0
            prompts, bad_demo, bad_garbage, infra, raised = [], 0, 0, 0, 0
            non_ascii = 0
            for _ in range(tasks):
                t = cpu()
                task = d.sample(rng)
                sample_s += cpu() - t
                prompts.append(task.prompt)
                non_ascii += not task.prompt.isascii()
                t = cpu()
                g = d.grade(task, task.demonstration)
                grade_s += cpu() - t
                bad_demo += not g.success
                for wrong in GARBAGE:
                    if _same_number(wrong, task.demonstration):
                        continue  # "0" is the right answer to some tasks (a root at 0)
                    g = d.grade(task, wrong)
                    bad_garbage += g.success
                    infra += g.infra_error
                    raised += g.verdict.value == "MALFORMED" and "scorer raised" in g.feedback
            row.update(sample_ms=1e3 * sample_s / tasks, grade_ms=1e3 * grade_s / tasks,
                       task_s=(sample_s + grade_s) / tasks, demo_fails=bad_demo,
                       garbage_passes=bad_garbage, garbage_infra=infra, garbage_raised=raised,
                       non_ascii=non_ascii, tasks=tasks,
                       max_prompt=max(len(p) for p in prompts),
                       digest=hashlib.sha256("\0".join(prompts).encode()).hexdigest()[:16])
            again = domain()
            rng = np.random.default_rng(0)
            row["rebuild_same"] = [again.sample(rng).prompt for _ in range(min(3, tasks))] == prompts[:3]
            t = cpu()
            for split in splits.SPLITS:
                splits.draw(d, np.random.default_rng(1), split)
            row["splits_s"] = cpu() - t
        except BaseException as e:  # noqa: BLE001  reported, per level
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    out["cpu_s"] = cpu()
    return out


def run_child(name: str, tasks: int, hashseed: int, limit_s: float, all_levels: bool = False) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=str(hashseed), PYTHONWARNINGS="ignore")
    cmd = [sys.executable, __file__, "--child", name, "--tasks", str(tasks)] + ["--all-levels"] * all_levels
    t = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit_s,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"no result within {limit_s:.0f} s wall time"}
    lines = [x for x in p.stdout.splitlines() if x.startswith('{"name"')]
    if p.returncode != 0 or not lines:
        return {"name": name, "error": f"child exited {p.returncode}: {p.stderr.strip()[-300:]}"}
    out = json.loads(lines[-1])
    out["wall_s"] = time.time() - t
    return out


def verdict(a: dict, b: dict, max_task_s: float) -> list[str]:
    """Problems found for one generator (empty: it passes)."""
    if "error" in a or "error" in b:
        return [a.get("error") or b.get("error")]
    problems = []
    for diff, r in a["levels"].items():
        r2 = b["levels"].get(diff, {})
        if "error" in r:
            problems.append(f"{diff}: {r['error']}")
            continue
        if r["demo_fails"]:
            problems.append(f"{diff}: the demonstration fails on {r['demo_fails']}/{r['tasks']} tasks")
        if r["garbage_passes"]:
            problems.append(f"{diff}: {r['garbage_passes']} garbage answers pass")
        if r["garbage_infra"]:
            problems.append(f"{diff}: {r['garbage_infra']} garbage answers are infrastructure errors")
        if not r["rebuild_same"]:
            problems.append(f"{diff}: a rebuilt dataset gives other questions for the same draws")
        if r.get("digest") != r2.get("digest"):
            problems.append(f"{diff}: questions differ between PYTHONHASHSEED=1 and 2")
        if r["task_s"] > max_task_s:
            problems.append(f"{diff}: {r['task_s']:.2f} CPU s per task")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--tasks", type=int, default=8, help="tasks drawn per level")
    ap.add_argument("--limit-s", type=float, default=600.0, help="wall-time limit of one child")
    ap.add_argument("--max-task-s", type=float, default=2.0, help="CPU seconds per task allowed")
    ap.add_argument("--jobs", type=int, default=2, help="children run at once (times are per-process CPU)")
    ap.add_argument("--json", help="append each generator's result to this JSON-lines file")
    ap.add_argument("--all-levels", action="store_true", help="also the levels in LEVELS_LEFT_OUT")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        # On a line of its own: some generators print to stdout (bf: ".").
        print("\n" + json.dumps(probe_one(args.child, args.tasks, args.all_levels)))
        return
    from reasoning_gym import factory

    from environments.families import reasoning_gym as rgf
    names = args.names or sorted(factory.DATASETS)
    print("| generator | levels | max CPU s / task | build CPU s | non-ASCII | result |")
    print("|---|---|---|---|---|---|")
    def both(name):
        return tuple(run_child(name, args.tasks, h, args.limit_s, args.all_levels) for h in (1, 2))

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = pool.map(both, names)
    for name, (a, b) in zip(names, results):
        problems = verdict(a, b, args.max_task_s)
        levels = a.get("levels", {})
        task_s = max((r.get("task_s", 0.0) for r in levels.values()), default=0.0)
        build_s = max((r.get("build_s", 0.0) for r in levels.values()), default=0.0)
        non_ascii = sum(r.get("non_ascii", 0) for r in levels.values())
        shown = "; ".join(problems) or ("ok" if name not in rgf.LEFT_OUT else "ok (but listed in LEFT_OUT)")
        print(f"| {name} | {','.join(levels) or '-'} | {task_s:.3f} | {build_s:.2f} | "
              f"{non_ascii}/{sum(r.get('tasks', 0) for r in levels.values())} | {shown} |", flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"name": name, "a": a, "b": b, "problems": problems}) + "\n")


if __name__ == "__main__":
    main()
