"""Named domain lists shared by experiment configs."""

import functools

# The default mix, four families: arithmetic, string manipulation, Python code
# graded by unit tests in the sandbox, and shell commands run in the sandbox
# and graded on the workspace they leave. Chosen so the tiny base succeeds
# sometimes on each.
DEFAULT = (
    "rlpt/math-mul-easy-v0",
    "rlpt/strings-reverse-easy-v0",
    "rlpt/strings-upper-easy-v0",
    "rlpt/strings-sort-easy-v0",
    "rlpt/strings-count-easy-v0",
    "rlpt/code-linear-easy-v0",
    "rlpt/terminal-rename-easy-v0",
    "rlpt/terminal-create-easy-v0",
)


# The mixed job (experiments/grpo_mixed.py): four of the default families'
# built-in domains, a dataset file shipped in environments/data (arithmetic word
# problems graded by the math verifier), five easy reasoning-gym generators
# bounded to questions of at most 126 characters, and the brief rungs of CAD,
# physics and financial reports (MIXED_REAL).
MIXED_BUILTIN = (
    "rlpt/math-mul-easy-v0",
    "rlpt/strings-reverse-easy-v0",
    "rlpt/code-linear-easy-v0",
    "rlpt/terminal-rename-easy-v0",
)
MIXED_DATASETS = ("rlpt/dataset-arith-easy-v0",)
MIXED_REASONING_GYM = (
    "rlpt/rg-basic-arithmetic-easy-v0",
    "rlpt/rg-chain-sum-easy-v0",
    "rlpt/rg-products-easy-v0",
    "rlpt/rg-spell-backward-easy-v0",
    "rlpt/rg-count-bits-easy-v0",
)
MIXED_PROMPT_CHARS = 126  # the arithmetic file's longest prompt is 123
# The brief rungs of the mission's own domains, graded with their fields' tools:
# build123d parts built by the sandboxed OCC kernel and compared by volume IoU
# and surface distance (a block, a disc), a two-block tower that must not
# interpenetrate (manifold3d) and must stand (MuJoCo), and a one-table income
# statement laid out as a PDF (reportlab) and read back by pdfplumber.
MIXED_REAL = (
    "rlpt/cad-block-easy-v0",
    "rlpt/cad-disc-easy-v0",
    "rlpt/cad-assembly-tower-easy-v0",
    "rlpt/finance-statement-cell-easy-v0",
)
# Room for their longest prompt (a statement's text and question: at most 230)
# and answer (a tower's script, 101, and EOS); tests/experiments/test_mixed.py
# checks both bounds.
MIXED_REAL_PROMPT_CHARS = 240
MIXED_ANSWER_CHARS = 104


def mixed() -> tuple[str, ...]:
  """The mixed job's domain ids, registering the bounded reasoning-gym domains."""
  from environments.bounded import register_bounded
  bounded = tuple(register_bounded(d, MIXED_PROMPT_CHARS).id for d in MIXED_REASONING_GYM)
  return MIXED_BUILTIN + MIXED_DATASETS + bounded + MIXED_REAL



# Imported chat models (experiments/warmup_hf.py, grpo_smollm2.py), told each
# task in words (env.prompt_style "instruct"). The warm-up's demonstrations:
# the default and mixed jobs' domains, reasoning-gym's arithmetic and GSM-style
# generators, generated code graded by hidden tests, the mission's brief
# rungs and a shell task. Reasoning-gym's questions are cut to
# REAL_PROMPT_CHARS (a GSM problem can run to a page), so every prompt with its
# demonstration fits WARMUP_MAX_LEN tokens of SmolLM2's template and every RL
# prompt REAL_MAX_PROMPT_LEN.
REAL_REASONING_GYM = (
    "rlpt/rg-basic-arithmetic-easy-v0", "rlpt/rg-chain-sum-easy-v0", "rlpt/rg-products-easy-v0",
    "rlpt/rg-spell-backward-easy-v0", "rlpt/rg-count-bits-easy-v0",
    "rlpt/rg-basic-arithmetic-medium-v0", "rlpt/rg-decimal-arithmetic-easy-v0",
    "rlpt/rg-gsm-symbolic-medium-v0",
)
REAL_PROMPT_CHARS = 400
WARMUP_MAX_LEN = 320
REAL_MAX_PROMPT_LEN = 256
# The real-model GRPO job's domains (experiments/grpo_smollm2.py): of the
# warm-up's, those where the warmed-up SmolLM2's sampled success lies in
# 5-90% (docs/real_models.md, 16 held-out tasks x 4 samples): public-format
# arithmetic (reasoning-gym's and our own), binary counting, a string task,
# the mission's CAD block (a build123d script built by the sandboxed kernel)
# and a shell task graded on its workspace. Its GSM-style problems, generated
# code and PDF statement have none (0-5%) after the warm-up.
REAL_RL = (
    "rlpt/rg-basic-arithmetic-easy-v0",
    "rlpt/rg-chain-sum-easy-v0",
    "rlpt/math-mul-easy-v0",
    "rlpt/rg-count-bits-easy-v0",
    "rlpt/strings-upper-easy-v0",
    "rlpt/cad-block-easy-v0",
    "rlpt/terminal-create-easy-v0",
)


def _real(ids: tuple[str, ...]) -> tuple[str, ...]:
  from environments.bounded import register_bounded
  return tuple(register_bounded(d, REAL_PROMPT_CHARS).id if d in REAL_REASONING_GYM else d for d in ids)


def real_warmup() -> tuple[str, ...]:
  """The warm-up's domain ids (reasoning-gym's bounded, registered here)."""
  return _real(DEFAULT + ("rlpt/math-add-easy-v0",) + MIXED_DATASETS + REAL_REASONING_GYM + (
      "rlpt/code-quadratic-medium-v0", "rlpt/terminal-grep-medium-v0") + MIXED_REAL)


def real_rl() -> tuple[str, ...]:
  """The real-model GRPO job's domain ids (REAL_RL, reasoning-gym's bounded)."""
  return _real(REAL_RL)

# The all-domains job (experiments/grpo_all_domains.py): every registered
# domain, each cut to the tasks whose prompt and demonstration fit the tiny
# base's context (environments.bounded). A domain with too few such tasks is
# left out, with the reason. At 256 / 63 characters 223 of the 510 registered
# domains qualify (tests/experiments/test_all_domains.py asserts at least 200).
ALL_PROMPT_CHARS = 256
ALL_DEMO_CHARS = 63  # + EOS: 64 new tokens
FILTER_KEYS = ("family", "difficulty", "tag")


def parse_filter(text: str) -> dict[str, str]:
  """"family=rg,difficulty=easy" -> {"family": "rg", "difficulty": "easy"}."""
  out = {}
  for item in filter(None, (x.strip() for x in text.split(","))):
    key, sep, value = item.partition("=")
    if not sep or key not in FILTER_KEYS or not value:
      raise ValueError(f"domain filter item {item!r} must be <key>=<value> with key one of "
                       f"{FILTER_KEYS}")
    if key in out:
      raise ValueError(f"domain filter names {key!r} twice")
    out[key] = value
  return out


def every_domain(spec_filter: str = "", prompt_chars: int = ALL_PROMPT_CHARS,
                 demo_chars: int = ALL_DEMO_CHARS
                 ) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
  """(the ids of every registered domain matching ``spec_filter`` (see
  ``parse_filter``), each bounded to ``prompt_chars`` / ``demo_chars``; the
  (id, reason) of those left out: too few tasks that fit, or no task of the
  train or the eval split). Bounded variants registered by other jobs are not
  counted again. Chosen once per process for each filter and bounds."""
  return _every_domain(spec_filter, prompt_chars, demo_chars)


@functools.cache
def _every_domain(spec_filter: str, prompt_chars: int, demo_chars: int):
  import numpy as np
  from environments import registry, splits
  from environments.bounded import is_bounded_id, register_bounded
  specs = [s for s in registry.list_domains(**parse_filter(spec_filter))
           if not is_bounded_id(s.id)]
  if not specs:
    raise ValueError(f"no registered domain matches {spec_filter!r}")
  ids, left_out = [], []
  for spec in specs:
    try:
      cut = register_bounded(spec.id, prompt_chars, demo_chars).id
      for split in splits.SPLITS:  # trained on, and evaluated on
        splits.draw(registry.domain(cut), np.random.default_rng(0), split)
      ids.append(cut)
    except Exception as e:  # noqa: BLE001  A generator that fails to draw is left out, named.
      left_out.append((spec.id, f"{type(e).__name__}: {e}"))
  return tuple(ids), tuple(left_out)
