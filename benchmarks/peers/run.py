r"""rlpt, TRL and Tunix on the same workload, side by side.

    make bench-peers                 # installs the peers' environments, then runs this
    python benchmarks/peers/run.py [--runs=3] [--peers=trl,tunix]

Each run r (seed r) writes one model and one set of prompts
(``shared.prepare``: rlpt's random initialisation exported as a Hugging Face
checkpoint, and the prompts), measures rlpt on them (``benchmarks/workload.py``)
and then each peer in its own virtual environment (``trl_workload.py``,
``tunix_workload.py``), one process at a time so that nothing else competes
for the machine. Every peer reports its logits for four check prompts; they
must equal rlpt's (max |diff| < 1e-3), which shows all three ran the same
weights and architecture.

Printed: for each system, median [min-max] over runs of the sampler's tokens/s
and of the seconds per GRPO step (itself the median of 5 steps after 2
warm-ups in each run), and rlpt's speed-up over each peer (peer time / rlpt
time, of the medians).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from absl import app, flags  # noqa: E402

_RUNS = flags.DEFINE_integer("runs", 3, "Runs (seeds); each measures every system once.")
_PEERS = flags.DEFINE_list("peers", ["trl", "tunix"], "Peers to run: trl, tunix.")
_WORKDIR = flags.DEFINE_string("workdir", os.path.join(ROOT, ".cache", "peers"),
                               "Where the models, prompts and results go.")
_VENVS = flags.DEFINE_string("venvs", os.path.join(ROOT, ".peers"),
                             "Folder holding the peers' virtual environments (<peer>/bin/python).")
_TIMEOUT = flags.DEFINE_integer("timeout_s", 1800, "Limit for one peer run.")

CHECK_ATOL = 1e-3
SCRIPTS = {"trl": "trl_workload.py", "tunix": "tunix_workload.py"}
NAMES = {"rlpt": "rlpt", "trl": "TRL", "tunix": "Tunix"}


def run_peer(peer: str, files: dict, out: str) -> dict:
  python = os.path.join(_VENVS.value, peer, "bin", "python")
  if not os.path.exists(python):
    raise SystemExit(f"no virtual environment for {peer!r}: {python} does not exist (`make "
                     f"bench-peers` creates it from benchmarks/peers/requirements-{peer}.txt).")
  cmd = [python, os.path.join(HERE, SCRIPTS[peer]), "--model_dir", files["model"],
         "--prompts", files["prompts"], "--out", out]
  log = out.replace(".json", ".log")
  t = time.perf_counter()
  with open(log, "w") as f:
    # The environment as it was before rlpt's CPU device settings (workload.PEER_ENV):
    # each peer runs with its own defaults.
    import workload as W
    proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=_TIMEOUT.value,
                          cwd=ROOT, env=W.PEER_ENV)
  if proc.returncode != 0:
    with open(log) as f:
      tail = "".join(f.readlines()[-30:])
    raise SystemExit(f"{peer} failed (exit {proc.returncode}); its log {log} ends:\n{tail}")
  with open(out) as f:
    result = json.load(f)
  result["wall_s"] = time.perf_counter() - t
  return result


def stat(xs, fmt) -> str:
  return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def main(_):
  import workload as W
  from shared import compare_logits, prepare

  for peer in _PEERS.value:
    if peer not in SCRIPTS:
      raise SystemExit(f"unknown peer {peer!r}; expected some of {sorted(SCRIPTS)}.")
  roof = W.matmul_roofline()
  print(f"fp32 matmul roofline on this machine: {roof:.0f} GFLOP/s", flush=True)
  systems = ["rlpt"] + list(_PEERS.value)
  results = {s: [] for s in systems}
  for r in range(_RUNS.value):
    run_dir = os.path.join(_WORKDIR.value, f"run{r}")
    files = prepare(run_dir, seed=r)
    expected = np.load(files["check_logits"])
    m = W.measure(seed=r)
    results["rlpt"].append(m)
    print(f"run {r}: rlpt  sampler {m['sample_tok_s']:,.0f} tok/s, GRPO step {m['step_s']:.3f} s",
          flush=True)
    for peer in _PEERS.value:
      res = run_peer(peer, files, os.path.join(run_dir, f"{peer}.json"))
      diff = compare_logits(expected, res["check_logits"])
      if not diff < CHECK_ATOL:
        raise SystemExit(f"{peer}'s check logits differ from rlpt's by {diff:.3g} (allowed "
                         f"{CHECK_ATOL}): it did not run the same model; see {run_dir}.")
      res["check_diff"] = diff
      results[peer].append(res)
      print(f"run {r}: {NAMES[peer]:5s} sampler {res['sample_tok_s']:,.0f} tok/s, GRPO step "
            f"{res['step_s']:.3f} s (check logits within {diff:.1e})", flush=True)

  med = {s: (statistics.median(x["sample_tok_s"] for x in results[s]),
             statistics.median(x["step_s"] for x in results[s])) for s in systems}
  print(f"\n{_RUNS.value} runs; median [min-max] over runs; speed-up = rlpt's speed / the peer's")
  print("| system | sampler, tok/s (32 x 128) | GRPO step, s (64 x 64) | rlpt speed-up, sampler "
        "| rlpt speed-up, GRPO step |")
  print("|---|---:|---:|---:|---:|")
  for s in systems:
    tok = stat([x["sample_tok_s"] for x in results[s]], "{:,.0f}")
    step = stat([x["step_s"] for x in results[s]], "{:.3f}")
    if s == "rlpt":
      up = ("-", "-")
    else:
      up = (f"{med['rlpt'][0] / med[s][0]:.2f}x", f"{med[s][1] / med['rlpt'][1]:.2f}x")
    print(f"| {NAMES[s]} | {tok} | {step} | {up[0]} | {up[1]} |")
  versions = {p: results[p][0].get("versions", {}) for p in _PEERS.value}
  print("\npeer versions: " + "; ".join(
      f"{NAMES[p]}: " + ", ".join(f"{k} {v}" for k, v in versions[p].items()) for p in versions))
  rl = results["rlpt"]
  print("rlpt GRPO step breakdown (median over runs): generation "
        f"{statistics.median(x['gen_s'] for x in rl):.3f} s, reference "
        f"{statistics.median(x['ref_s'] for x in rl):.3f} s, update "
        f"{statistics.median(x['update_s'] for x in rl):.3f} s")
  with open(os.path.join(_WORKDIR.value, "summary.json"), "w") as f:
    json.dump({s: [{k: v for k, v in x.items() if k != "check_logits"} for x in results[s]]
               for s in systems}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
