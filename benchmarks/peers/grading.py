"""The environments' verdicts for a peer framework's completions, from rlpt's
own Python environment.

A peer (TRL) runs in a virtual environment of its own, without rlpt's
environments and their tools (build123d and the OCC kernel for CAD, the
sandbox's preload). It starts this module under rlpt's interpreter as a
server and talks to it over pipes, so both systems' rewards come from the
same environment code, the same packages and the same sandbox:

    client = GradingClient(rlpt_python, {domain: make_kwargs, ...})
    prompts = client.prompts(tasks)           # env.reset(seed, split)'s observation
    results = client.grade(tasks, answers)    # [{"reward", "success", "infra_error"}]

The server grades as rlpt's EnvPool does: one environment per domain and
worker thread (``workers`` threads, rlpt's ``env.workers`` default), reset to
the task, one ``step(answer)``; an environment that raises or reports an
infrastructure failure is retried ``retries`` times on a fresh instance, then
the completion is unscored (reward None). The client module is standard
library only, so the peer's environment can import it.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

WORKERS = 4  # rlpt's env.workers (and sandbox_workers = workers) default
RETRIES = 2  # rlpt's env.retries default


class Grader:
  """Environment instances per thread and domain; grades (task, answer) pairs
  concurrently, as rlpt's EnvPool does (reset to the task, one step).
  ``make_kwargs``: domain -> the keyword arguments of its ``gymnasium.make``
  (rlpt's pool passes ``prompt_style`` when the run's is not "bare")."""

  def __init__(self, make_kwargs: dict[str, dict], workers: int = WORKERS,
               retries: int = RETRIES):
    import gymnasium

    import environments  # noqa: F401  (registers the rlpt/ domains)
    from environments.bounded import register_id
    for d in make_kwargs:  # a run's bounded cuts (…-p400-v0) are registered by its config
      register_id(d)
    self.domains = set(make_kwargs)
    self._make = lambda d: gymnasium.make(d, disable_env_checker=True, **make_kwargs[d])
    self._local = threading.local()
    self.pool = concurrent.futures.ThreadPoolExecutor(workers)
    self.retries, self.max_retries = 0, retries

  def _env(self, domain: str, fresh: bool = False):
    envs = self._local.__dict__.setdefault("envs", {})
    if fresh or domain not in envs:
      if domain in envs:
        envs[domain].close()
      envs[domain] = self._make(domain)
    return envs[domain]

  def _prompt(self, task) -> str:
    obs, _ = self._env(task[0]).reset(seed=int(task[1]), options={"split": task[2]})
    return obs

  def _grade(self, task, answer: str) -> dict:
    domain, seed, split = task
    for attempt in range(1 + self.max_retries):
      try:
        env = self._env(domain, fresh=attempt > 0)
        env.reset(seed=int(seed), options={"split": split})
        _, reward, _, _, info = env.step(answer)
        infra = bool(info.get("infra_error", False))
      except Exception as e:  # noqa: BLE001  As rlpt: an environment error is an infra failure.
        reward, info, infra = 0.0, {"feedback": repr(e)}, True
      if not infra:
        return {"reward": float(reward), "success": bool(info.get("success", reward >= 1.0)),
                "infra_error": False}
      self.retries += 1
      time.sleep(0.05 * 2 ** attempt)
    return {"reward": None, "success": False, "infra_error": True}

  def _check(self, tasks) -> None:
    unknown = sorted({t[0] for t in tasks} - self.domains)
    if unknown:
      raise ValueError(f"tasks of domains {unknown}, which the server was not started with "
                       f"({sorted(self.domains)})")

  def prompts(self, tasks) -> list[str]:
    self._check(tasks)
    return list(self.pool.map(self._prompt, tasks))

  def grade(self, tasks, answers) -> list[dict]:
    self._check(tasks)
    return list(self.pool.map(self._grade, tasks, answers))


def serve(make_kwargs: dict[str, dict]) -> None:
  """Answers one JSON request per stdin line with one JSON line on stdout:
  {"op": "prompts", "tasks"} -> {"prompts"}; {"op": "grade", "tasks",
  "answers"} -> {"results", "retries"}; an error -> {"error"}."""
  out = os.fdopen(os.dup(1), "w")
  os.dup2(2, 1)  # whatever the environments print goes to stderr, not into the replies
  grader = Grader(make_kwargs)
  out.write(json.dumps({"ready": True}) + "\n")
  out.flush()
  for line in sys.stdin:
    try:
      req = json.loads(line)
      tasks = [tuple(t) for t in req["tasks"]]
      if req["op"] == "prompts":
        reply = {"prompts": grader.prompts(tasks)}
      elif req["op"] == "grade":
        reply = {"results": grader.grade(tasks, req["answers"]), "retries": grader.retries}
      else:
        reply = {"error": f"unknown op {req['op']!r}: expected 'prompts' or 'grade'"}
    except Exception as e:  # noqa: BLE001  the client raises it with the request's context
      reply = {"error": repr(e)}
    out.write(json.dumps(reply) + "\n")
    out.flush()


class GradingClient:
  """This module's server under ``python`` (rlpt's interpreter), in the
  repository root; ``make_kwargs``: domain -> its ``gymnasium.make`` options."""

  def __init__(self, python: str, make_kwargs: dict[str, dict]):
    if not os.path.exists(python):
      raise FileNotFoundError(f"rlpt's interpreter {python} does not exist (`make setup` "
                              "creates .venv).")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    self._proc = subprocess.Popen(
        [python, os.path.abspath(__file__), json.dumps(make_kwargs)], cwd=root,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    self._lock = threading.Lock()
    self.retries = 0
    first = self._read()
    if not first.get("ready"):
      raise RuntimeError(f"the grading server did not start: {first}")

  def _read(self) -> dict:
    line = self._proc.stdout.readline()
    if not line:
      raise RuntimeError(f"the grading server exited (code {self._proc.poll()}); its errors are "
                         "above, on stderr.")
    return json.loads(line)

  def _ask(self, req: dict) -> dict:
    with self._lock:
      self._proc.stdin.write(json.dumps(req) + "\n")
      self._proc.stdin.flush()
      reply = self._read()
    if "error" in reply:
      raise RuntimeError(f"grading server, op {req['op']!r}: {reply['error']}")
    return reply

  def prompts(self, tasks) -> list[str]:
    return self._ask({"op": "prompts", "tasks": [list(t) for t in tasks]})["prompts"]

  def grade(self, tasks, answers) -> list[dict]:
    reply = self._ask({"op": "grade", "tasks": [list(t) for t in tasks], "answers": list(answers)})
    self.retries = reply["retries"]
    return reply["results"]

  def close(self) -> None:
    if self._proc.poll() is None:
      self._proc.stdin.close()
      try:
        self._proc.wait(timeout=60)
      except subprocess.TimeoutExpired:
        self._proc.kill()


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  serve(json.loads(sys.argv[1]))
