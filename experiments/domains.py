"""Named domain lists shared by experiment configs."""

# The default mix: arithmetic, string manipulation and code graded by unit tests.
DEFAULT = (
    "rlpt/math-add-easy-v0",
    "rlpt/math-mul-easy-v0",
    "rlpt/strings-reverse-easy-v0",
    "rlpt/strings-sort-easy-v0",
    "rlpt/strings-count-easy-v0",
    "rlpt/code-linear-easy-v0",
)
