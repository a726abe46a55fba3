"""Builds, validates and runs terminal task folders as published; prints what held.

    python benchmarks/task_folders.py ROOT [ROOT ...] [--network registries] [--limit_per_root N] [--build_timeout 600] [--json out.json] [--remove_images]
    python benchmarks/task_folders.py --overhead TASK_FOLDER [--episodes 10]
    python benchmarks/task_folders.py --report rows.json     (the report again, from --json's rows)

Each ROOT is a task folder or a folder of task folders (Harbor / Terminal-Bench 2
layout; a user stages them from public repositories: nothing is downloaded
here). For every task, in order:

  load      parse instruction.md, task.toml, tests/test.sh (refused: the reason)
  build     its environment/Dockerfile with podman on local base images, plus the
            verifier tools layer (refused: the build's one-line reason)
  reference solution/ run as Harbor's oracle (`bash /solution/solve.sh`), then the tests
  no-op     a do-nothing answer (`DONE`), then the tests

Episodes run on `--network` (none | registries | host; a task.toml may choose
its own), the tests on `--verifier_network` (default: registries where test.sh
installs its runner, else none). The report also gives the validated share of
the tasks that need no host beyond the package registries (at build, in their
reference solution, or in their services), and every host the proxy refused.

and prints: built / refused grouped by reason / reference PASS / do-nothing FAIL
by the tests' own verdict / infrastructure failures (VERIFIER_ERROR,
SANDBOX_ERROR: never scored as FAIL), with build and episode times. A do-nothing
FAIL counts as the tests' verdict only when the test output shows the test
runner judging (a pytest summary, or test.sh's own exit after its checks); the
others are listed so a reader can see each.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from environments import terminal_tasks  # noqa: E402
from environments.containers import egress  # noqa: E402
from environments.containers import engine as engine_mod  # noqa: E402
from environments.containers import images  # noqa: E402
from environments.verdicts import Verdict  # noqa: E402


def task_folders(roots: list[str], limit_per_root: int | None = None) -> list[str]:
    out = []
    for root in roots:
        root = os.path.abspath(root)
        if any(os.path.exists(os.path.join(root, n)) for n in ("instruction.md", "tests", "steps", "task.toml")):
            out.append(root)
            continue
        subs = sorted(os.path.join(root, d) for d in os.listdir(root)
                      if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))
        out += subs[:limit_per_root] if limit_per_root else subs
    return out


def _category(reason: str) -> str:
    """A short group name for a refusal reason."""
    rules = (
        (r"^" + re.escape(images.INFRASTRUCTURE), "infrastructure failure at build (this machine's, not the task's)"),
        (r"no local stand-in for base image", "base image without a local stand-in"),
        (r"missing tests/test\.sh|has no tests/test\.sh", "no tests/test.sh"),
        (r"missing instruction\.md", "no instruction.md"),
        (r"several containers", "several containers (docker-compose services)"),
        (r"separate verifier", "a separate verifier container"),
        (r"ran past|took over", "build ran past its time limit"),
        (r"Could not resolve|unable to access|Failed to download|Failed to connect|Connection refused|Name or service not known|"
         r"SSL|certificate|\b40[34]\b|wget|curl", "build downloads from a host other than the package registries"),
        (r"Unable to locate package|has no installation candidate|E: Package|E: Version", "apt package or version not in the stand-in (Debian)"),
        (r"pip|No matching distribution|metadata-generation|wheel", "pip install failed in the build"),
        (r"COPY|ADD|checking context", "Dockerfile COPY source missing"),
    )
    for pattern, name in rules:
        if re.search(pattern, reason, re.I):
            return name
    return "other"


def _runs_pytest(path: str) -> bool:
    """Whether the task's test.sh runs pytest (else the script's own checks are the judge)."""
    return "pytest" in (images.test_script(path) or "")


def run_task(path: str, engine: engine_mod.Engine, build_timeout: float, reference_timeout: float,
             solution_packages: bool = False, network: str = "none", verifier_network: str | None = None) -> dict:
    row: dict = {"task": os.path.relpath(path, os.path.dirname(os.path.dirname(path))), "path": path}
    try:
        folder = terminal_tasks.load_task_folder(path, solution_packages)
    except terminal_tasks.TaskFolderError as e:
        return {**row, "stage": "load", "reason": str(e)}
    row["has_reference"] = folder.has_reference
    folder = dataclasses.replace(folder, build_timeout_s=min(folder.build_timeout_s, build_timeout))
    built = terminal_tasks.build_task(folder, engine)
    row.update(build_s=round(built.seconds, 1), cached=built.cached, build_warnings=list(getattr(built, "warnings", ())),
               image=built.tag)
    if built.error is not None:
        return {**row, "stage": "build", "reason": built.error, "log": built.log_path}
    try:
        domain = terminal_tasks.TerminalTaskDomain(folder, engine=engine, network=network, verifier_network=verifier_network)
    except terminal_tasks.TaskFolderError as e:
        return {**row, "stage": "load", "reason": str(e)}
    row.update(network=domain.network, verifier_network=domain.verifier_network)
    import numpy as np

    rng = np.random.default_rng(0)
    if folder.has_reference:
        start = time.monotonic()
        task = domain.sample(rng)
        why = domain._start(task.hidden)
        if why is not None:
            row.update(reference="SANDBOX_ERROR", reference_why=why)
        else:
            try:
                grade, output, timed_out = domain.run_references(task.hidden, reference_timeout)
                if timed_out:
                    row["reference_timed_out"] = reference_timeout
                needs = terminal_tasks.needs_network(output)
                row.update(reference=grade.verdict.value, reference_why=grade.feedback[:300],
                           reference_output=output[-400:], reference_refused=task.hidden.refused,
                           reference_asked=sorted({f"{a.host}:{a.port}" for a in (task.hidden.gate.asked if task.hidden.gate else ())}),
                           reference_needs_network=bool(grade.verdict is not Verdict.PASS and (needs or _needed(task.hidden.refused))))
            except engine_mod.EngineError as e:
                task.hidden.close(engine)
                row.update(reference="SANDBOX_ERROR", reference_why=str(e)[:300])
        row["reference_s"] = round(time.monotonic() - start, 1)
    start = time.monotonic()
    task = domain.sample(rng)
    grade = terminal_tasks.do_nothing(domain, task)
    row.update(noop=grade.verdict.value, noop_why=grade.feedback[:300], noop_s=round(time.monotonic() - start, 1),
               noop_judged=terminal_tasks.tests_judged(task.hidden.test_output or "") or not _runs_pytest(path),
               noop_tail=(task.hidden.test_output or "")[-600:])
    row["stage"] = "ran"
    return row


_UV_INSTALLER = "astral.sh:"
_OTHER_HOSTS = re.compile(r"downloads from a host other than the package registries")
_SERVICE_NETWORK = re.compile(r"service '[^']+' did not become healthy[^;]*; it needs the network")


def _needed(refused) -> list[str]:
    """The refused hosts a solution needed: not uv's installer (the tools layer puts that uv in the image)."""
    return [h for h in refused or [] if not h.startswith(_UV_INSTALLER)]


def _needs_other_hosts(row: dict) -> bool:
    """Whether the task reached for a host beyond the package registries: in its build, its
    reference solution (the proxy refused it, or it printed a network failure) or a service's start."""
    if row["stage"] == "build":
        return bool(_OTHER_HOSTS.search(_category(row["reason"])))
    if row.get("reference") == "PASS":
        return False  # whatever it was refused (uv's installer from astral.sh, say), it did not need it
    return bool(_needed(row.get("reference_refused")) or row.get("reference_needs_network")
                or _SERVICE_NETWORK.search(row.get("reference_why") or ""))


def report(rows: list[dict]) -> None:
    n = len(rows)
    refused = [r for r in rows if r["stage"] in ("load", "build")]
    ran = [r for r in rows if r["stage"] == "ran"]
    with_ref = [r for r in rows if r.get("has_reference")]
    validated = [r for r in ran if r.get("reference") == "PASS" and r.get("noop") == "FAIL"]
    infra = {"VERIFIER_ERROR", "SANDBOX_ERROR"}
    print(f"\ntask folders: {n}; built {sum(r['stage'] == 'ran' for r in rows)}; refused {len(refused)}")
    groups = collections.Counter(_category(r["reason"]) for r in refused)
    for name, count in groups.most_common():
        print(f"  refused  {count:3d}  {name}")
    for r in refused:
        print(f"    {r['task']}: [{r['stage']}] {r['reason'][:200]}")
    ref_ran = [r for r in ran if r.get("has_reference")]
    print(f"reference solutions: {len(with_ref)} tasks have one; ran {len(ref_ran)}; "
          f"PASS {sum(r.get('reference') == 'PASS' for r in ref_ran)}; "
          + ", ".join(f"{v} {c}" for v, c in collections.Counter(r.get('reference') for r in ref_ran if r.get('reference') != 'PASS').items()))
    networks = sorted({r.get("network", "none") for r in ran})
    print(f"  of those not PASS, the reference solution itself needed a network its policy ({'/'.join(networks)}) refuses: "
          f"{sum(bool(r.get('reference_needs_network')) for r in ref_ran)}")
    for r in ref_ran:
        if r.get("reference") != "PASS":
            refused_hosts = ", ".join(r.get("reference_refused") or [])
            net = (f" [its solve.sh reached for {refused_hosts}]" if refused_hosts
                   else " [its solve.sh needed the network]" if r.get("reference_needs_network") else "")
            if r.get("reference_timed_out"):
                net += f" [its solve.sh ran past the {r['reference_timed_out']:g}s cap]"
            print(f"    {r['task']}: reference {r.get('reference')}{net}: {r.get('reference_why', '')[:200]}")
    for r in ran:
        r["noop_judged"] = r.get("noop_judged") or not _runs_pytest(r["path"])
    noop = collections.Counter(r.get("noop") for r in ran)
    judged = sum(r.get("noop") == "FAIL" and r.get("noop_judged") for r in ran)
    print(f"do-nothing answers: {len(ran)} run; " + ", ".join(f"{v} {c}" for v, c in noop.most_common())
          + f"; FAIL with the test runner's own verdict in its output: {judged}")
    for r in ran:
        if r.get("noop") == "FAIL" and not r.get("noop_judged"):
            print(f"    {r['task']}: do-nothing FAIL without a test-runner summary: {r['noop_tail'][-200:]!r}")
        elif r.get("noop") != "FAIL":
            print(f"    {r['task']}: do-nothing {r.get('noop')}: {r.get('noop_why', '')[:200]}")
    print(f"infrastructure failures (never scored FAIL): reference {sum(r.get('reference') in infra for r in ran)}, "
          f"do-nothing {sum(r.get('noop') in infra for r in ran)}")
    pct = 100.0 * len(validated) / max(1, len(with_ref))
    print(f"VALIDATED (reference PASS and do-nothing FAIL by the tests): {len(validated)}/{len(with_ref)} "
          f"of the tasks with a reference solution ({pct:.1f}%)")
    elsewhere = [r for r in with_ref if _needs_other_hosts(r)]
    local = [r for r in with_ref if not _needs_other_hosts(r)]
    ok = [r for r in local if r in validated]
    print(f"  of the {len(local)} that need no host beyond the package registries (build, reference, services): "
          f"{len(ok)} validated ({100.0 * len(ok) / max(1, len(local)):.1f}%); {len(elsewhere)} need other hosts")
    hosts = collections.Counter(h.rsplit(":", 1)[0] for r in ran if r.get("reference") != "PASS"
                                for h in r.get("reference_refused") or [])
    if hosts:
        print("  hosts the proxy refused to reference solutions that did not PASS (tasks): " + ", ".join(f"{h} {c}" for h, c in hosts.most_common()))
    warned = [r for r in rows if r.get("build_warnings")]
    if warned:
        print(f"built with the stand-in's adjustments (marked, not refused): {len(warned)}")
        for r in warned:
            print(f"    {r['task']}: " + "; ".join(r["build_warnings"])[:300])
    fresh = [r["build_s"] for r in rows if "build_s" in r and not r.get("cached")]
    cached = [r["build_s"] for r in rows if "build_s" in r and r.get("cached")]

    def spread(xs: list[float]) -> str:
        return f"median {statistics.median(xs):.1f} s (min {min(xs):.1f}, max {max(xs):.1f}, n={len(xs)})" if xs else "none"

    print(f"build: cold {spread(fresh)}; cached {spread(cached)}")
    print(f"reference episode (start, solve.sh, tests): {spread([r['reference_s'] for r in ran if 'reference_s' in r])}")
    print(f"do-nothing episode (start, tests): {spread([r['noop_s'] for r in ran if 'noop_s' in r])}")


def overhead(path: str, episodes: int) -> None:
    """Per-episode and per-turn cost of a container per episode (start, a turn by
    exec, removal) against bubblewrap over the image's mounted root filesystem."""
    import statistics
    import subprocess

    folder = terminal_tasks.load_task_folder(path)
    built = terminal_tasks.build_task(folder)
    assert built.error is None, built.error
    eng = engine_mod.Engine()

    def timed(fn):
        t = time.monotonic()
        out = fn()
        return time.monotonic() - t, out

    starts, turns, removes, bwrap = [], [], [], []
    for i in range(episodes):
        took, cid = timed(lambda: eng.start(built.tag, f"rlpt-overhead-{os.getpid()}-{i}", folder.resources, 600))
        starts.append(took)
        for _ in range(5):
            turns.append(timed(lambda: eng.exec(cid, "true\n", 10))[0])
        removes.append(timed(lambda: eng.remove(cid))[0])
    mount = subprocess.run(["podman", "image", "mount", built.tag], capture_output=True, text=True, check=True).stdout.strip()
    try:
        for _ in range(episodes * 2):
            bwrap.append(timed(lambda: subprocess.run(["bwrap", "--ro-bind", mount, "/", "--dev", "/dev", "--proc", "/proc",
                                                       "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent", "bash", "-c", "true"],
                                                      check=True))[0])
    finally:
        subprocess.run(["podman", "image", "unmount", built.tag], capture_output=True)

    def ms(xs):
        return f"median {statistics.median(xs) * 1e3:.0f} ms (min {min(xs) * 1e3:.0f}, max {max(xs) * 1e3:.0f}, n={len(xs)})"

    print(f"container start (podman run -d):      {ms(starts)}")
    print(f"one turn in it (podman exec, `true`): {ms(turns)}")
    print(f"container removal (podman rm -f):     {ms(removes)}")
    print(f"bubblewrap over the mounted image:    {ms(bwrap)}  (no writable layer, no persistent processes)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="*")
    parser.add_argument("--overhead", default=None, help="a task folder: time container start/exec/removal instead")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--limit_per_root", type=int, default=None, help="the first N task folders of each root, by name")
    parser.add_argument("--build_timeout", type=float, default=900.0, help="cap on each build (s)")
    parser.add_argument("--reference_timeout", type=float, default=900.0,
                        help="cap on each reference solution's run (s), below the task's own agent timeout")
    parser.add_argument("--solution_packages", action="store_true",
                        help="images also hold what each reference solution installs (apt, pip, uv)")
    parser.add_argument("--network", default="none", choices=egress.POLICIES,
                        help="the agent's (and the reference solution's) network; a task.toml may choose its own")
    parser.add_argument("--verifier_network", default=None, choices=egress.POLICIES,
                        help="the tests' network (default: registries where test.sh installs its runner, else none)")
    parser.add_argument("--json", default=None, help="write every row here")
    parser.add_argument("--remove_images", action="store_true",
                        help="untag each task's image after its row (a run over many tasks fits the disk)")
    parser.add_argument("--as_of", default=None,
                        help="YYYY-MM-DD: tasks whose task.toml names no dated image resolve PyPI/npm/uv "
                             f"packages as of that day (${images.AS_OF_ENV})")
    parser.add_argument("--report", default=None, help="print the report of rows saved by --json (build reasons re-read from logs)")
    args = parser.parse_args()
    why = engine_mod.available()
    if why:
        print(f"containers unavailable: {why}", file=sys.stderr)
        return 2
    if args.report:
        with open(args.report) as f:
            rows = json.load(f)
        for r in rows:
            if (r["stage"] == "build" and r.get("log") and os.path.isfile(r["log"]) and "no local stand-in" not in r["reason"]
                    and not r["reason"].startswith(images.INFRASTRUCTURE)):
                with open(r["log"], errors="replace") as f:
                    r["reason"] = images._reason(f.read())
        report(rows)
        return 0
    if args.overhead:
        overhead(args.overhead, args.episodes)
        return 0
    if args.as_of is not None:
        os.environ[images.AS_OF_ENV] = args.as_of
        images.default_as_of()  # a malformed day stops here, naming it
    engine = engine_mod.Engine()
    paths = task_folders(args.roots, args.limit_per_root)
    rows = []
    for i, path in enumerate(paths, 1):
        row = run_task(path, engine, args.build_timeout, args.reference_timeout, args.solution_packages,
                       args.network, args.verifier_network)
        rows.append(row)
        if args.remove_images and row.get("image"):
            engine.remove_image(row["image"])  # its layers go at the next `podman image prune`, run apart from builds
        status = row.get("reason", "")[:90] if row["stage"] != "ran" else f"reference {row.get('reference', '-')}, do-nothing {row.get('noop')}"
        print(f"[{i}/{len(paths)}] {row['task']}: {row['stage']} {row.get('build_s', '')}s  {status}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
