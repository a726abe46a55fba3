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
