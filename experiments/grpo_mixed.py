"""GRPO over built-in, dataset-file and reasoning-gym domains at once.

    python -m launch.train --config=experiments/grpo_mixed.py --workdir=runs/grpo_mixed
    python -m launch.train --config=experiments/grpo_mixed.py:smoke --workdir=/tmp/mixed

Fourteen domains from four sources (experiments/domains.py): four built-in
generators (multiplication, string reversal, Python code run in the sandbox,
a shell task graded on its workspace), the arithmetic word problems of
environments/data/arith-easy.jsonl under the math verifier, five easy
reasoning-gym generators scored by reasoning-gym's own `score_answer`, bounded
to questions of at most 126 characters, and the brief rungs of the mission's
own domains, graded with their fields' tools: two build123d parts and a
two-block tower (sandboxed OCC kernel, manifold3d, MuJoCo) and a cell of a
one-table income statement read back from its PDF by pdfplumber. The base
(experiments/pretrain_base.py:mixed) is pre-trained on the demonstrations of
all fourteen, from the same imperfect teacher as the main job's. Otherwise the
main job's settings, with room for a 240-character prompt and a 103-character
script.
"""

import ml_collections

from experiments import domains
from experiments import grpo_default

RUNNER = "train"


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  if arg not in ("", "smoke"):
    raise ValueError(f"Unknown grpo_mixed argument '{arg}'; expected '' or 'smoke'.")
  c = grpo_default.get_config(arg)
  c.domains.ids = list(domains.mixed())
  c.rollout.max_prompt_len = domains.MIXED_REAL_PROMPT_CHARS + 2  # BOS; the longest prompt is a PDF's text
  c.rollout.max_new_tokens = domains.MIXED_ANSWER_CHARS  # a CAD script's, + EOS
  c.base.arg = "smoke" if arg == "smoke" else "mixed"
  return c
