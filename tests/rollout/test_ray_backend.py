"""RayEnvPool on a real local Ray cluster (loopback): same episodes as the local pool,
multi-turn state kept on the actor, and a killed actor's episodes rebuilt by replay."""

import time

import pytest

ray = pytest.importorskip("ray")

from rlpt.config import EnvConfig
from rlpt.data import Task  # noqa: E402
from rlpt.rollout import EnvPool  # noqa: E402
from rlpt.rollout.ray_backend import RayEnvPool  # noqa: E402

DOMAINS = ["rlpt/strings-reverse-easy-v0", "rlpt/code-linear-easy-v0"]


@pytest.fixture(scope="module")
def pool():
  p = RayEnvPool(DOMAINS, EnvConfig(workers=2, ray_actors=2, retries=1), max_attempts=2)
  yield p
  p.close()
  assert not ray.is_initialized()


def _tasks(n):
  return [Task(DOMAINS[i % 2], i, "train") for i in range(n)]


def test_same_prompts_and_grades_as_the_local_pool(pool):
  local = EnvPool(DOMAINS, EnvConfig(workers=2), max_attempts=2)
  try:
    tasks = _tasks(8)
    remote_eps, local_eps = pool.start(tasks), local.start(tasks)
    assert [e.prompt for e in remote_eps] == [e.prompt for e in local_eps]
    assert {e.actor for e in remote_eps} == {0, 1}  # spread over both actors
    answers = ["zz"] * 8
    r, l = pool.step(remote_eps, answers), local.step(local_eps, answers)
    assert [(s.observation, s.done, s.graded.verdict) for s in r] == [
        (s.observation, s.done, s.graded.verdict) for s in l]
    # Turn 2 on the same actor-held environments: the demonstrations pass.
    demos = [e.info["demonstration"] for e in remote_eps]
    r2 = pool.step(remote_eps, demos)
    assert all(s.done and s.graded.success and s.graded.reward == 1.0 for s in r2)
    assert all(e.turns == 2 for e in remote_eps)
  finally:
    local.close()


def _wait_dead(actor, timeout=60.0):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    try:
      ray.get(actor.ping.remote(), timeout=5)
    except ray.exceptions.RayActorError:
      return
    except ray.exceptions.GetTimeoutError:
      continue
    time.sleep(0.05)
  raise AssertionError(f"actor still answers {timeout} s after ray.kill")


def test_killed_actor_mid_episode_is_rebuilt_by_replay(pool):
  eps = pool.start(_tasks(6))
  pool.step(eps, ["zz"] * 6)  # first attempts fail; the episodes go on
  victim = eps[0].actor
  on_victim = sum(e.actor == victim for e in eps)
  ray.kill(pool.actors[victim])
  _wait_dead(pool.actors[victim])  # ray.kill returns before the actor is gone
  steps = pool.step(eps, [e.info["demonstration"] for e in eps])
  assert all(s.done and s.graded.success for s in steps)
  # Environment seconds come back from the actors (rebuilt episodes included).
  assert all(e.env_s > 0 for e in eps) and all(s.env_s > 0 for s in steps)
  stats = pool.stats()
  assert stats["env/actor_restarts"] == 1
  assert stats["env/rebuilt_episodes"] == on_victim
  # The replacement actor serves new episodes.
  more = pool.start(_tasks(4))
  assert all(s.done for s in pool.step(more, [e.info["demonstration"] for e in more]))


def test_actors_register_the_runs_dataset_files(pool, tmp_path, monkeypatch):
  # The actors are other processes: each registers the file itself, from the
  # absolute path the driver resolved (the description here is relative).
  (tmp_path / "sums.jsonl").write_text(
      "".join(f'{{"q": "{i} + {i}?", "a": "{2 * i}"}}\n' for i in range(30)), encoding="utf-8")
  monkeypatch.chdir(tmp_path)
  domain = "rlpt/dataset-raysums-v0"
  from rlpt.rollout.domains import register_domain_files
  files = register_domain_files([f"{domain}=sums.jsonl:numeric?prompt=q&answer=a"])
  assert files == (f"{domain}={tmp_path / 'sums.jsonl'}:numeric?prompt=q&answer=a",)
  remote = RayEnvPool([domain], EnvConfig(workers=1, ray_actors=1), files=files)
  try:
    eps = remote.start([Task(domain, s, "train") for s in range(4)])
    steps = remote.step(eps, [e.info["demonstration"] for e in eps])
    assert all(s.done and s.graded.success for s in steps)
  finally:
    remote.close()
