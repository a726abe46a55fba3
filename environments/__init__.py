"""rlpt environments: procedurally generated, verifiable text domains for RL post-training.

Importing this package registers every domain with `gymnasium.register`:

    import gymnasium, environments
    env = gymnasium.make("rlpt/math-add-easy-v0")
    prompt, info = env.reset(seed=0, options={"split": "train"})
    _, reward, terminated, truncated, info = env.step(info["demonstration"])  # reward 1.0

Every built-in domain also shows its tasks as an instruct model expects them,
in words with the answer format stated (`gymnasium.make(id,
prompt_style="instruct")`); every grader reads the final answer from where
such models put it (`environments.answers`).

Pure Python + numpy + gymnasium; never imports JAX. See `environments.env`
for the episode protocol, `environments.registry` for discovery/filtering, and
`environments.sandbox` for how model-written code is executed, and
`environments.datasets` for domains made from your own dataset files.
"""

from environments import registry
from environments.env import TaskEnv
from environments.spaces import AnyText
from environments.verdicts import Grade, Problem, Verdict

from environments import families  # noqa: E402,F401  (registers every domain)
from environments import datasets  # noqa: E402,F401  (dataset-file domains; registers the built-in ones)
from environments import terminal_tasks  # noqa: E402,F401  (Terminal-Bench-layout task folders; registers the shipped ones)

__all__ = ["AnyText", "Grade", "Problem", "TaskEnv", "Verdict", "registry"]
