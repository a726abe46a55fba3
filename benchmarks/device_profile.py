"""benchmarks/device.py's profiles: one call traced with ``jax.profiler`` and its
top operations by time, in text.

``profile(fn, folder, name)`` runs ``fn()`` (already compiled) once under
``jax.profiler.trace(folder/name, create_perfetto_trace=True)``, reads the
Perfetto trace it writes (Chrome trace JSON, gzipped) and writes
``folder/name_top_ops.txt``: the top operations by total time, each with its
count, milliseconds and share of the traced operation time.

Which events count as operations, first found of:

* XLA op events on a device (``/device:GPU:0``, ``/device:TPU:0``): those on
  an ``XLA Ops`` line where the trace has one, else the stream's kernels,
  each named by its ``hlo_op`` (one HLO op may launch several kernels).
* XLA op events on the host's threads (XLA:CPU runs each thunk on a host
  thread; its event carries ``hlo_op``).
* Every host event but the Python ones (a trace with no XLA op events).

Times are self times: an event's duration less that of the events nested in
it on the same thread, so a ``while`` op's body is counted under the body's
ops, not twice. The sum is over threads and streams (ops that overlap are each
counted).

Profiling never stops the run: a failed capture or parse writes its reason
into the text file and returns.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import time

import jax


def find_trace(log_dir: str) -> str:
  """The newest Perfetto trace under ``log_dir`` (else the profiler's own trace JSON)."""
  for pattern in ("perfetto_trace.json.gz", "*.trace.json.gz"):
    files = glob.glob(os.path.join(log_dir, "**", pattern), recursive=True)
    if files:
      return max(files, key=os.path.getmtime)
  raise FileNotFoundError(f"the profiler wrote no trace JSON under {log_dir}")


def self_times(events: list[dict]) -> list[float]:
  """Each complete event's duration less its children's (nested on its thread)."""
  own = [float(e.get("dur", 0.0)) for e in events]
  by_thread = collections.defaultdict(list)
  for i, e in enumerate(events):
    by_thread[(e.get("pid"), e.get("tid"))].append(i)
  for idx in by_thread.values():
    idx.sort(key=lambda i: (float(events[i].get("ts", 0.0)), -own[i]))
    stack: list[tuple[float, int]] = []  # (end, event) of the enclosing events
    for i in idx:
      ts = float(events[i].get("ts", 0.0))
      while stack and stack[-1][0] <= ts:
        stack.pop()
      if stack:
        own[stack[-1][1]] -= float(events[i].get("dur", 0.0))
      stack.append((ts + float(events[i].get("dur", 0.0)), i))
  return [max(t, 0.0) for t in own]


def op_events(trace: dict) -> tuple[list[dict], list[str], str]:
  """(the events that count as operations, the name of each, what they are)."""
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  process, thread = {}, {}
  for e in events:
    if e.get("ph") == "M" and e.get("name") == "process_name":
      process[e.get("pid")] = e.get("args", {}).get("name", "")
    elif e.get("ph") == "M" and e.get("name") == "thread_name":
      thread[(e.get("pid"), e.get("tid"))] = e.get("args", {}).get("name", "")
  complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
  on_device = lambda e: str(process.get(e.get("pid"), "")).startswith("/device:")
  line = lambda e: thread.get((e.get("pid"), e.get("tid")), "")
  xla_ops_line = [e for e in complete if on_device(e) and line(e) == "XLA Ops"]
  if xla_ops_line:
    return (xla_ops_line, [e.get("args", {}).get("hlo_op") or e["name"] for e in xla_ops_line],
            "XLA ops on the device's 'XLA Ops' line")
  has_op = [e for e in complete if "hlo_op" in e.get("args", {})]
  device = [e for e in has_op if on_device(e)]
  if device:
    return device, [e["args"]["hlo_op"] for e in device], "device kernels, grouped by their XLA op"
  if has_op:
    return has_op, [e["args"]["hlo_op"] for e in has_op], "XLA ops on the host's threads (XLA:CPU)"
  host = [e for e in complete if not str(e.get("name", "")).startswith("$")]
  return host, [e["name"] for e in host], "every non-Python host event (no XLA op events traced)"


def top_ops(trace: dict, top: int = 20) -> tuple[list[tuple[str, int, float]], float, str]:
  """([(op, count, total self µs)] by time, the total over all ops, what the events are)."""
  events, names, source = op_events(trace)
  total, count = collections.Counter(), collections.Counter()
  for name, us in zip(names, self_times(events)):
    total[name] += us
    count[name] += 1
  rows = [(name, count[name], us) for name, us in total.most_common(top)]
  return rows, float(sum(total.values())), source


def format_top(rows, total_us: float, source: str) -> list[str]:
  out = [f"events: {source}; {total_us / 1e3:.3f} ms of op time in all (self times, summed "
         "over threads and streams)",
         f"top {len(rows)} ops by total time:",
         f"{'rank':>4}  {'total ms':>10}  {'share':>6}  {'count':>6}  op"]
  for i, (name, n, us) in enumerate(rows, 1):
    share = us / total_us if total_us else float("nan")
    out.append(f"{i:>4}  {us / 1e3:>10.3f}  {share:>6.1%}  {n:>6}  {name}")
  return out


def profile(fn, folder: str, name: str, what: str, top: int = 20) -> dict:
  """Traces one ``fn()`` and writes ``folder/name_top_ops.txt``; returns
  {"txt", "trace", "ok", "reason"} (never raises for a profiler failure)."""
  os.makedirs(folder, exist_ok=True)
  log_dir = os.path.join(folder, name)
  txt = os.path.join(folder, f"{name}_top_ops.txt")
  head = [f"profile: {what}", f"trace folder: {log_dir}"]
  result = {"txt": txt, "trace": None, "ok": False, "reason": None}

  def write(lines):
    with open(txt, "w") as f:
      f.write("\n".join(head + lines) + "\n")

  try:
    t = time.perf_counter()
    with jax.profiler.trace(log_dir, create_perfetto_trace=True):
      jax.block_until_ready(fn())
    head.append(f"traced call: {time.perf_counter() - t:.3f} s wall (profiler overhead included)")
  except Exception as e:
    try:  # a session left open would refuse the next profile
      jax.profiler.stop_trace()
    except Exception:
      pass
    result["reason"] = f"capture failed: {type(e).__name__}: {e}"
    write([result["reason"]])
    return result
  try:
    path = find_trace(log_dir)
    result["trace"] = path
    head.append(f"trace: {path}")
    with gzip.open(path) as f:
      trace = json.load(f)
    rows, total_us, source = top_ops(trace, top)
    if not rows:
      raise ValueError("the trace holds no complete events")
  except Exception as e:
    result["reason"] = f"parse failed: {type(e).__name__}: {e}"
    write([result["reason"]])
    return result
  write(format_top(rows, total_us, source))
  result["ok"] = True
  return result
