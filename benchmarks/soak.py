r"""Soak: the all-domains job for a fixed wall time, its resources sampled.

    python benchmarks/soak.py [--seconds=600] [--every=30] [--workdir=runs/soak]

Runs ``launch.train --config=experiments/grpo_all_domains.py`` (every
registered domain, the sandbox pools in use) and every ``--every`` seconds
samples the trainer's process tree: open file descriptors, processes,
threads, resident memory, and the sandbox's work directories (the
``rlpt-sandbox-*`` roots and their ``job-*`` folders, in the temp directory
the run is given, WORKDIR/tmp, and in each sandbox worker's own /tmp). After ``--seconds`` the run is
stopped (SIGTERM, then SIGKILL) and what it left in WORKDIR/tmp is counted.
Prints first / last / max of each and the verdict counts: every
infrastructure failure must have been retried away (``infra_errors`` 0 on
every logged step), and the trainer's own figures from its metrics: resident
memory per 50 steps and its linear trend after step 50, the compiled programs
kept (the run's rlpt.device.ProgramPool) and dropped, the XLA compiles. Writes
WORKDIR/soak.json.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_figures import trainer_figures  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SECONDS = flags.DEFINE_integer("seconds", 600, "Wall time of the run.")
_EVERY = flags.DEFINE_integer("every", 30, "Seconds between samples.")
_WORKDIR = flags.DEFINE_string("workdir", os.path.join(ROOT, "runs", "soak"), "Run folder (emptied).")
_ARG = flags.DEFINE_string("arg", "", "grpo_all_domains argument (e.g. 'family=terminal').")
_STEPS = flags.DEFINE_integer("steps", 100_000, "--config.steps (the run is stopped by time).")
_MAX_PROGRAMS = flags.DEFINE_integer("max_programs", None, "launch.train --max_programs "
                                     "(compiled programs kept; default: launch.train's own).")


def _children() -> dict[int, list[int]]:
  out: dict[int, list[int]] = {}
  for stat in glob.glob("/proc/[0-9]*/stat"):
    try:
      with open(stat) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
      continue  # exited meanwhile
    out.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
  return out


def tree(pid: int) -> list[int]:
  kids, out, todo = _children(), [], [pid]
  while todo:
    p = todo.pop()
    out.append(p)
    todo.extend(kids.get(p, []))
  return out


def _status(pid: int) -> dict[str, str]:
  with open(f"/proc/{pid}/status") as f:
    return dict(line.split(":", 1) for line in f if ":" in line)


def sandbox_dirs(pids, tmp: str) -> tuple[int, int]:
  """(sandbox roots, job folders in them): under ``tmp`` and under each
  process's own /tmp (the sandbox's workers run in mount namespaces of their
  own, seen through /proc/<pid>/root), each folder counted once."""
  seen, jobs = set(), 0
  own = os.stat("/proc/self/ns/mnt").st_ino
  bases = [tmp]
  for p in pids:
    try:
      if os.stat(f"/proc/{p}/ns/mnt").st_ino != own:  # a worker's namespace: its own /tmp
        bases.append(f"/proc/{p}/root/tmp")
    except OSError:
      continue
  for base in bases:
    for root in glob.glob(os.path.join(base, "rlpt-sandbox-*")):
      try:
        st = os.stat(root)
      except OSError:
        continue
      if (st.st_dev, st.st_ino) in seen:
        continue
      seen.add((st.st_dev, st.st_ino))
      jobs += len(glob.glob(os.path.join(root, "job-*")))
  return len(seen), jobs


def sample(pid: int, tmp: str) -> dict[str, float]:
  """The process tree of ``pid``: fds, processes, threads, RSS (MiB); the
  sandbox's folders (``sandbox_dirs``)."""
  fds = threads = rss_kib = procs = 0
  pids = tree(pid)
  for p in pids:
    try:
      st = _status(p)
      fds += len(os.listdir(f"/proc/{p}/fd"))
    except OSError:
      continue
    procs += 1
    threads += int(st.get("Threads", "0").strip() or 0)
    rss_kib += int(st.get("VmRSS", "0 kB").split()[0])
  roots, jobs = sandbox_dirs(pids, tmp)
  return {"open_fds": fds, "processes": procs, "threads": threads, "rss_mib": rss_kib / 1024,
          "sandbox_roots": roots, "sandbox_job_dirs": jobs}


def main(_):
  workdir = _WORKDIR.value
  subprocess.run(["rm", "-rf", workdir], check=True)
  os.makedirs(workdir)
  config = os.path.join(ROOT, "experiments", "grpo_all_domains.py")
  if _ARG.value:
    config += f":{_ARG.value}"
  cmd = [sys.executable, "-m", "launch.train", f"--config={config}", f"--workdir={workdir}",
         f"--config.steps={_STEPS.value}", "--config.progress=False",
         "--config.checkpoint.every=25", "--config.eval.every=100"]
  if _MAX_PROGRAMS.value is not None:
    cmd.append(f"--max_programs={_MAX_PROGRAMS.value}")
  print(" ".join(cmd[1:]), flush=True)
  # The run's own temp folder: the sandbox's work folders are counted there only.
  tmp = os.path.join(workdir, "tmp")
  os.makedirs(tmp)
  log = open(os.path.join(workdir, "train.log"), "w")
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                          env={**os.environ, "TMPDIR": tmp})
  samples, t0 = [], time.monotonic()
  try:
    while time.monotonic() - t0 < _SECONDS.value and proc.poll() is None:
      s = {"t": round(time.monotonic() - t0, 1), **sample(proc.pid, tmp)}
      samples.append(s)
      print(json.dumps(s), flush=True)
      time.sleep(max(0.0, _EVERY.value - (time.monotonic() - t0 - s["t"])))
  finally:
    if proc.poll() is None:
      proc.send_signal(signal.SIGTERM)
      try:
        proc.wait(timeout=60)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
  left_roots, left_jobs = sandbox_dirs([], tmp)  # after the run: what it left behind
  if proc.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL):
    with open(os.path.join(workdir, "train.log")) as f:
      raise SystemExit(f"the run failed (exit {proc.returncode}):\n{''.join(f.readlines()[-30:])}")
  rows = []
  path = os.path.join(workdir, "metrics.jsonl")
  if os.path.exists(path):
    with open(path) as f:
      rows = [json.loads(line) for line in f if line.endswith("\n")]
  train = [r for r in rows if r["kind"] == "train"]
  keys = [k for k in samples[0] if k != "t"] if samples else []
  summary = {k: {"first": samples[0][k], "last": samples[-1][k],
                 "max": max(s[k] for s in samples)} for k in keys}
  result = {
      "seconds": _SECONDS.value, "samples": samples, "summary": summary,
      "steps": len(train),
      "infra_errors": sum(r.get("infra_errors", 0.0) for r in train),
      "retries": sum(r.get("env/retries", 0.0) for r in train),
      "timeouts": sum(r.get("env/timeouts", 0.0) for r in train),
      "domains": sum(k.startswith("share/") for k in train[0]) if train else 0,
      "left_behind": {"sandbox_roots": left_roots, "sandbox_job_dirs": left_jobs},
      "trainer": trainer_figures(train)}
  with open(os.path.join(workdir, "soak.json"), "w") as f:
    json.dump(result, f, indent=1)
  print(f"\n{result['steps']} steps over {result['domains']} domains in {_SECONDS.value} s; "
        f"infrastructure failures left after retries: {result['infra_errors']:.0f} "
        f"(retried {result['retries']:.0f}, hung {result['timeouts']:.0f})")
  print(f"left behind after SIGTERM: {result['left_behind']}")
  print("| | first | last | max |\n|---|---:|---:|---:|")
  for k, v in summary.items():
    print(f"| {k} | {v['first']:.0f} | {v['last']:.0f} | {v['max']:.0f} |")
  print("trainer:", json.dumps(result["trainer"]))


if __name__ == "__main__":
  app.run(main)
