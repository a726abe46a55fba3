"""Named domain lists shared by experiment configs."""

# The default mix: arithmetic, string manipulation, and Python code graded by
# unit tests in the sandbox. Chosen so the tiny base succeeds sometimes on each.
DEFAULT = (
    "rlpt/math-mul-easy-v0",
    "rlpt/strings-reverse-easy-v0",
    "rlpt/strings-upper-easy-v0",
    "rlpt/strings-sort-easy-v0",
    "rlpt/strings-count-easy-v0",
    "rlpt/code-linear-easy-v0",
)
