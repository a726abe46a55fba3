"""Per-operation time of compiled XLA programs, from a ``jax.profiler`` trace.

Shared by benchmarks/profile_workload.py (the tiny model's parts, one program
each) and benchmarks/rl_step.py ``--profile`` (every program of a real RL
step). `trace` runs a function under the profiler and returns the trace's
events; `op_times` sums each XLA operation's time, per compiled module; with
the module's optimised HLO, `report` prints the time by kind of operation
(matmuls alone or with fused element-wise work, element-wise loops,
reductions, copies/transposes), the operations that took longest, and the
ceiling analysis: the matmuls' FLOPs read from the HLO and their rate, the
time outside them, and the share of a matmul rate reached now and if all
else took no time.
"""

from __future__ import annotations

import collections
import functools
import glob
import gzip
import json
import os
import re
import tempfile

import numpy as np

# Profiler bookkeeping, not XLA operations.
_RUNTIME = ("$", "ThunkExecutor", "SlinkyThreadPool", "ThreadpoolListener", "end: ")


def trace(fn, trace_dir: str | None = None) -> tuple[list[dict], str]:
  """Runs ``fn()`` under ``jax.profiler`` (a Perfetto trace in ``trace_dir``,
  a temporary one by default); its events and the trace file."""
  import jax
  trace_dir = trace_dir or tempfile.mkdtemp(prefix="rlpt_profile_")
  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    fn()
  files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True))
  if not files:
    raise SystemExit(f"the profiler wrote no Perfetto trace under {trace_dir}.")
  with gzip.open(files[-1]) as f:
    return json.load(f)["traceEvents"], files[-1]


def op_times(events: list[dict]) -> dict[str, tuple[collections.Counter, collections.Counter]]:
  """Per compiled module (``hlo_module``; "" where the event names none): the
  microseconds and the count of each operation's runs."""
  out: dict = collections.defaultdict(lambda: (collections.Counter(), collections.Counter()))
  for e in events:
    name = e.get("name", "")
    if e.get("ph") != "X" or name.startswith(_RUNTIME):
      continue
    total, count = out[(e.get("args") or {}).get("hlo_module", "")]
    total[name] += e.get("dur", 0)
    count[name] += 1
  return dict(out)


_DEF = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\w+)\[([\d,]*)\]")
_DOT = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = \w+\[([\d,]*)\]\S* dot\(%([\w.\-]+), "
                  r"%[\w.\-]+\).*?lhs_contracting_dims=\{([\d,]*)\}")


def dot_flops(hlo: str) -> dict[str, float]:
  """FLOPs of every dot in the compiled HLO by instruction name, and of every
  fusion by the name of the instruction that calls it (sum of its dots):
  2 * output elements * contracted size."""
  dims = lambda text: [int(d) for d in text.split(",") if d]  # noqa: E731
  shapes = {m.group(1): dims(m.group(3)) for m in map(_DEF.match, hlo.splitlines()) if m}
  flops, computation = {}, None
  per_computation = collections.Counter()
  for line in hlo.splitlines():
    head = re.match(r"^(?:ENTRY )?%([\w.\-]+) ", line)
    if head and line.rstrip().endswith("{"):
      computation = head.group(1)
    m = _DOT.match(line)
    if m:
      out, lhs, contracting = dims(m.group(2)), shapes.get(m.group(3), []), dims(m.group(4))
      f = 2.0 * float(np.prod(out)) * float(np.prod([lhs[i] for i in contracting if i < len(lhs)]))
      flops[m.group(1)] = f
      per_computation[computation] += f
  for line in hlo.splitlines():
    m = re.match(r"^\s*(?:ROOT )?%([\w.\-]+) = .* fusion\(.*calls=%([\w.\-]+)", line)
    if m and per_computation[m.group(2)]:
      flops[m.group(1)] = per_computation[m.group(2)]
  return flops


def describe(hlo: str, name: str) -> tuple[str, set[str]]:
  """An instruction's output shape and the operations it runs (a fusion's:
  those of the computation it calls)."""
  return _index(hlo).get(name, ("", set()))


_INSTR = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (\S+) ([\w\-]+)\((.*)$")


@functools.lru_cache(maxsize=4)
def _index(hlo: str) -> dict[str, tuple[str, set[str]]]:
  """Every instruction of ``hlo``: (output shape, operations run), read in one
  pass (a real step's HLO has tens of thousands of instructions)."""
  bodies, instrs, computation = collections.defaultdict(set), {}, None
  for line in hlo.splitlines():
    head = re.match(r"^(?:ENTRY )?%([\w.\-]+) ", line)
    if head and line.rstrip().endswith("{"):
      computation = head.group(1)
      continue
    m = _INSTR.match(line)
    if m:
      instrs[m.group(1)] = (m.group(2), m.group(3), m.group(4))
      if m.group(3) not in ("parameter", "constant"):
        bodies[computation].add(m.group(3))
  out = {}
  for name, (shape, op, rest) in instrs.items():
    calls = re.search(r"calls=%([\w.\-]+)", rest)
    out[name] = (shape, set(bodies[calls.group(1)]) if calls and calls.group(1) in bodies else {op})
  return out


def kind_of(ops: set[str]) -> str:
  if "dot" in ops or "convolution" in ops:
    return "matmul" if ops <= {"dot", "convolution", "parameter", "bitcast"} else "matmul+fused"
  if "reduce" in ops or "reduce-window" in ops:
    return "reduction"
  if ops & {"transpose", "copy", "concatenate"} and not ops & {"add", "multiply", "exponential"}:
    return "copy/transpose"
  return "element-wise"


def report(total: collections.Counter, count: collections.Counter, hlo: str, roof_gflops: float,
           steps: int = 1, top: int = 25, overlap: bool = False) -> dict:
  """Prints the time by kind, the ``top`` operations and the ceiling analysis
  of one module's operations (``total``/``count`` from `op_times`, ``hlo``
  its optimised text), per call, or per decode step where ``steps`` > 1.
  ``roof_gflops``: the matmul rate to compare with. Returns the figures."""
  per = "per decode step" if steps > 1 else "per call"
  scale = 1e3 * steps
  by_kind, rows = collections.Counter(), []
  for name, us in total.items():
    shape, ops = describe(hlo, name)
    by_kind[kind_of(ops) if ops else "runtime"] += us
    rows.append((us, name, shape, ops))
  note = "; summed over concurrently running ops" if overlap else ""
  print(f"time by kind ({per}, ms{note}):")
  for kind, us in by_kind.most_common():
    print(f"  {kind:15s} {us / scale:9.3f}")
  print(f"top {top} operations ({per}, ms):")
  for us, name, shape, ops in sorted(rows, reverse=True)[:top]:
    fused = ",".join(sorted(ops - {"bitcast"}))[:48]
    print(f"  {us / scale:9.3f}  {name[:28]:28s} {shape[:34]:34s} {fused}")
  flops = dot_flops(hlo)
  mm_us = sum(us for us, name, _, _ in rows if flops.get(name))
  mm_flops = sum(flops[name] * count[name] for _, name, _, _ in rows if flops.get(name))
  all_us = sum(total.values())
  out = {"ms": all_us / scale, "matmul_ms": mm_us / scale, "matmul_gflop": mm_flops / scale / 1e6,
         "by_kind_ms": {k: v / scale for k, v in by_kind.items()}}
  if mm_us and all_us:
    out["matmul_gflops"] = mm_flops / mm_us / 1e3
    out["of_roof"] = mm_flops / all_us / 1e3 / roof_gflops
    out["of_roof_matmuls_only"] = mm_flops / mm_us / 1e3 / roof_gflops
    print(f"ceiling ({per}): matmuls {out['matmul_gflop']:.3f} GFLOP in {out['matmul_ms']:.3f} ms "
          f"= {out['matmul_gflops']:.1f} GFLOP/s; outside matmuls {(all_us - mm_us) / scale:.3f} ms "
          f"({(all_us - mm_us) / all_us:.0%} of op time)")
    print(f"  matmul rate {roof_gflops:.1f} GFLOP/s: reached {out['of_roof']:.1%} of it over all ops; "
          f"{out['of_roof_matmuls_only']:.1%} if everything outside the matmuls took no time")
  return out
