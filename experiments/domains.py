"""Named domain lists shared by experiment configs."""

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
# problems graded by the math verifier) and five easy reasoning-gym generators
# bounded to questions that fit the tiny base's 128-token context.
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


def mixed() -> tuple[str, ...]:
  """The mixed job's domain ids, registering the bounded reasoning-gym domains."""
  from environments.families import reasoning_gym
  bounded = tuple(reasoning_gym.register_bounded(d, MIXED_PROMPT_CHARS).id for d in MIXED_REASONING_GYM)
  return MIXED_BUILTIN + MIXED_DATASETS + bounded
