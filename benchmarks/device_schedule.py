"""benchmarks/device.py's schedule: its cases in order of value, within a budget
of wall time.

A case (one decode batch and KV dtype, one attention length, ...) is the unit
of scheduling. Before a case starts, its cost is estimated, first found of:

1. ``last run``: the seconds this same case took when it last completed with
   this compilation cache (``case_seconds.json`` in the cache's folder, keyed
   by device kind, shape set, dtype, repetitions and case). With the cache warm that run compiled
   at least as much as this one will, so the figure is an upper bound.
2. ``<case> scaled``: the last completed case of the same part in this run,
   its executions (the warm-up and timed calls, compiling excluded) scaled by
   the ratio of the two cases' ``work`` (the bytes or FLOPs their shapes
   move) and the rest (compiling, set-up) kept as it was.
3. ``prior``: the case's own prior (seconds, from the shapes; see
   ``device.PRIOR_S``).

A case whose estimate exceeds the time left is skipped and written as one line
``{"case", "part", "skipped": "budget", "estimate_s", "left_s", ...}``; the
run goes on with the next (a cheaper case may still fit).

The estimate can be wrong, so the deadline is also enforced hard: the cases run
in a worker thread and the main thread waits for it with a timeout. A Python
signal handler (SIGALRM) would not do: CPython runs it only between bytecodes
of the main thread, never while that thread is blocked inside an XLA compile or
a ``block_until_ready``, which is where a long case spends its time. XLA
releases the GIL for both, so a waiting main thread wakes on time; at the
deadline it takes the output lock for good (no figure can be half written
after it), writes a ``"stopped": "budget"`` line naming the running case, a
``skipped`` line for every case not reached, and returns so the caller can
write its summary and leave with ``os._exit`` (a worker blocked in XLA cannot
be joined, and normal interpreter exit would wait on it and run JAX's atexit
hooks against a busy device).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
import traceback
from typing import Callable


class Lines:
  """JSON lines, printed and appended to a file, one writer at a time."""

  def __init__(self, path: str):
    self.path = path
    self.lock = threading.Lock()
    open(path, "w").close()

  def write(self, row: dict) -> None:
    line = json.dumps(row)
    with self.lock:
      print(line, flush=True)
      with open(self.path, "a") as f:
        f.write(line + "\n")

  def seal(self, rows: list[dict]) -> None:
    """Writes ``rows`` and keeps the lock: a later ``write`` (the worker's,
    after the deadline) waits until the process exits."""
    # A writer holds the lock for microseconds; waiting longer means it is
    # wedged, and the last lines matter more than strict ordering.
    self.lock.acquire(timeout=10)
    for row in rows:
      line = json.dumps(row)
      print(line, flush=True)
      with open(self.path, "a") as f:
        f.write(line + "\n")


@dataclasses.dataclass
class Case:
  name: str
  part: str
  run: Callable[[], float | None]  # returns its execution seconds (scaled by work), or None
  work: float = 1.0
  prior_s: float = 60.0
  needs: tuple[str, ...] = ()  # cases that must have completed first


@dataclasses.dataclass
class Outcome:
  case: str
  part: str
  status: str  # done, skipped, stopped, error, or not reached
  estimate_s: float | None = None
  estimate_from: str | None = None
  seconds: float | None = None
  exec_s: float | None = None
  reason: str | None = None


class Runner:
  """Runs cases in the given order before ``deadline`` (``time.time()``; None:
  no budget), writing skip, error and stop lines to ``lines``."""

  def __init__(self, lines: Lines, deadline: float | None, memory_path: str | None = None,
               memory_key: str = "", log=None):
    self.lines, self.deadline = lines, deadline
    self.memory_path, self.memory_key = memory_path, memory_key
    self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    self.outcomes: list[Outcome] = []
    self.current: tuple[Case, float] | None = None  # (case, its start)
    self.pending: list[Case] = []
    self._done: list[tuple[Outcome, Case]] = []
    self.stopped = False
    self.memory = self._read_memory()

  def left_s(self) -> float:
    return float("inf") if self.deadline is None else self.deadline - time.time()

  def _read_memory(self) -> dict:
    try:
      with open(self.memory_path) as f:
        return json.load(f)
    except (OSError, TypeError, ValueError):
      return {}

  def _remember(self, case: Case, seconds: float) -> None:
    if not self.memory_path:
      return
    self.memory[f"{self.memory_key} {case.name}"] = seconds
    try:  # written whole and renamed: an os._exit mid-write leaves the old file
      tmp = f"{self.memory_path}.{os.getpid()}.tmp"
      with open(tmp, "w") as f:
        json.dump(self.memory, f, indent=1, sort_keys=True)
      os.replace(tmp, self.memory_path)
    except OSError as e:
      self.log(f"could not record case times in {self.memory_path}: {e}")

  def estimate(self, case: Case) -> tuple[float, str]:
    last = self.memory.get(f"{self.memory_key} {case.name}")
    if last is not None:
      return float(last), "last run"
    for o, c in reversed(self._done):
      if c.part == case.part and c.work > 0:
        exec_s = o.exec_s if o.exec_s is not None else o.seconds
        return (o.seconds - exec_s + exec_s * case.work / c.work, f"{c.name} scaled")
    return float(case.prior_s), "prior"

  def run(self, cases: list[Case]) -> None:
    """The worker's body: every case in order, each skipped if it will not fit."""
    self.pending = list(cases)
    done_names = set()
    while self.pending and not self.stopped:
      case = self.pending[0]
      missing = [n for n in case.needs if n not in done_names]
      if missing:
        self._finish(case, Outcome(case.name, case.part, "skipped", reason=f"needs {missing[0]}"))
        self.lines.write({"case": case.name, "part": case.part, "skipped": f"needs {missing[0]}"})
        continue
      est, source = self.estimate(case)
      left = self.left_s()
      if est > left:
        self._finish(case, Outcome(case.name, case.part, "skipped", est, source, reason="budget"))
        self.lines.write({"case": case.name, "part": case.part, "skipped": "budget",
                          "estimate_s": round(est, 1), "estimate_from": source,
                          "left_s": round(left, 1)})
        continue
      t = time.time()
      self.current = (case, t)
      try:
        exec_s = case.run()
      except Exception as e:  # one broken case costs its own figures, not the rest
        self.current = None
        secs = time.time() - t
        self.log(f"{case.name}: failed after {secs:.1f} s\n{traceback.format_exc()}")
        self._finish(case, Outcome(case.name, case.part, "error", est, source, secs,
                                   reason=f"{type(e).__name__}: {e}"[:500]))
        self.lines.write({"case": case.name, "part": case.part,
                          "error": f"{type(e).__name__}: {e}"[:500]})
        continue
      self.current = None
      secs = time.time() - t
      outcome = Outcome(case.name, case.part, "done", est, source, secs, exec_s)
      self._finish(case, outcome)
      self._done.append((outcome, case))
      done_names.add(case.name)
      self._remember(case, secs)
      left = self.left_s()
      self.log(f"{case.name}: {secs:.1f} s (estimate {est:.1f} s, {source})"
               + (f"; {left:.0f} s left" if left != float("inf") else ""))

  def _finish(self, case: Case, outcome: Outcome) -> None:
    self.outcomes.append(outcome)
    self.pending.remove(case)

  def run_until_deadline(self, cases: list[Case]) -> bool:
    """Runs ``run(cases)`` in a worker thread; True if it finished, False if
    the deadline came first (the stop and the cases left are then written)."""
    failure = []

    def body():
      try:
        self.run(cases)
      except BaseException:  # the runner's own bug: report it, do not hang the wait
        failure.append(traceback.format_exc())

    worker = threading.Thread(target=body, name="device-cases", daemon=True)
    worker.start()
    while worker.is_alive():
      left = self.left_s()
      if left <= 0:
        break
      worker.join(timeout=min(left, 60.0))
    if failure:
      raise RuntimeError(f"the case runner failed:\n{failure[0]}")
    if not worker.is_alive():
      return True
    self.stop()
    return False

  def stop(self) -> None:
    """At the deadline: the stop line, then a skip line for each case not reached."""
    self.stopped = True
    now = time.time()
    rows = []
    current = self.current
    pending = list(self.pending)
    if current is not None:
      case, start = current
      est, source = self.estimate(case)
      self.outcomes.append(Outcome(case.name, case.part, "stopped", est, source, now - start))
      rows.append({"stopped": "budget", "case": case.name, "part": case.part,
                   "case_s": round(now - start, 1), "estimate_s": round(est, 1),
                   "estimate_from": source})
      pending = [c for c in pending if c is not case]
    else:
      rows.append({"stopped": "budget", "case": None})
    for case in pending:
      est, source = self.estimate(case)
      self.outcomes.append(Outcome(case.name, case.part, "not reached", est, source,
                                   reason="budget"))
      rows.append({"case": case.name, "part": case.part, "skipped": "budget",
                   "estimate_s": round(est, 1), "estimate_from": source, "left_s": 0.0})
    self.lines.seal(rows)

  def summary(self) -> dict:
    by_status = lambda *s: [o.case for o in self.outcomes if o.status in s]
    parts_done = list(dict.fromkeys(o.part for o in self.outcomes if o.status == "done"))
    parts_short = list(dict.fromkeys(o.part for o in self.outcomes
                                     if o.status in ("skipped", "stopped", "not reached")))
    return {"stopped_by_budget": self.stopped,
            "parts_run": parts_done, "parts_skipped": parts_short,
            "cases_done": by_status("done"), "cases_skipped": by_status("skipped", "not reached"),
            "cases_stopped": by_status("stopped"), "cases_failed": by_status("error"),
            "cases": [dataclasses.asdict(o) for o in self.outcomes]}
