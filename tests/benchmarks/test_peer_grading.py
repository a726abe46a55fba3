"""benchmarks/peers/grading.py: a peer framework's completions graded by rlpt's
own interpreter, as rlpt's env pool grades them."""

import os
import sys

import gymnasium
import pytest

import environments  # noqa: F401  (registers the domains)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "peers"))

from grading import GradingClient  # noqa: E402

MUL = "rlpt/math-mul-easy-v0"
BOUNDED = "rlpt/rg-basic-arithmetic-easy-p400-v0"  # registered by the server from its id alone


def test_the_server_gives_the_environments_prompts_and_verdicts():
  tasks = [(MUL, 11, "train"), (MUL, 12, "eval"), (BOUNDED, 5, "train")]
  kwargs = {MUL: {"prompt_style": "instruct"}, BOUNDED: {"prompt_style": "instruct"}}
  client = GradingClient(sys.executable, kwargs)
  try:
    prompts = client.prompts(tasks)
    want, demos = [], []
    for domain, seed, split in tasks:  # the same environments here, in this process
      from environments.bounded import register_id
      register_id(domain)
      env = gymnasium.make(domain, disable_env_checker=True, **kwargs[domain])
      obs, info = env.reset(seed=seed, options={"split": split})
      want.append(obs)
      demos.append(info["demonstration"])
    assert prompts == want and "Answer:" in prompts[0]
    results = client.grade(tasks + tasks, demos + ["Answer: not a number"] * 3)
    assert [r["success"] for r in results] == [True] * 3 + [False] * 3
    assert [r["reward"] for r in results[:3]] == [1.0] * 3
    assert not any(r["infra_error"] for r in results) and client.retries == 0
    with pytest.raises(RuntimeError, match=r"grading server, op 'grade': .*'rlpt/no-such-domain-v0'"):
      client.grade([("rlpt/no-such-domain-v0", 1, "train")], ["x"])
  finally:
    client.close()


def test_a_missing_interpreter_is_one_clear_error():
  with pytest.raises(FileNotFoundError, match="/nowhere/python does not exist"):
    GradingClient("/nowhere/python", {})
