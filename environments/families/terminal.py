"""Shell tasks in an isolated workspace, graded on the final workspace state.

Prompt: the workspace listing, the task, and a "$ " cue; the answer is one
shell command line, run with /bin/sh in the sandbox (`ShellJob`). The grader
compares the returned workspace snapshot with the state the host computed:
required files must hold the required content (surrounding whitespace
ignored), removed files must be gone, and every other file must be unchanged
(so `rm -rf *` or clobbering inputs fails). The snapshot is bounded: a
workspace it cannot list in full, or a required file whose contents it does
not return in full, fails (see `_check`). Difficulty adds distractor files
and longer inputs.

The instruct style states the same task in words and asks for "one shell
command in a ```sh block"; either style's command is the reply's last fenced
block (else the whole reply; `environments.answers`).
"""

from __future__ import annotations


import numpy as np

from environments import answers, registry, sandbox
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem, Verdict, failed, malformed, passed

TIMEOUT_S = 2.0
MAX_ANSWER_CHARS = 128
INSTRUCT_EXTRA_CHARS = 160  # the instruct prompt's wording beyond the bare prompt's listing and task
INSTRUCT_ANSWER_CHARS = 2048
FENCE = answers.Fenced("sh", "one shell command")
_NAMES = ("alpha", "beta", "gamma", "delta", "omega", "notes", "data", "report", "log", "main")
_WORDS = ("apple", "pear", "fig", "kiwi", "plum", "lime", "date", "grape")
# (distractor files, lines per data file) per difficulty.
_SIZES = {"easy": (0, 3), "medium": (3, 8), "hard": (8, 20)}


def _lines(rng: np.random.Generator, n: int) -> str:
    return "".join(f"{_WORDS[int(i)]}\n" for i in rng.integers(0, len(_WORDS), size=n))


def _workspace(rng: np.random.Generator, distractors: int, n_lines: int, wanted: list[str]) -> dict[str, str]:
    files = {name: _lines(rng, n_lines) for name in wanted}
    for name in rng.choice(_NAMES, size=distractors, replace=False):
        files.setdefault(f"{name}.dat", _lines(rng, 2))
    return files


# Instruction templates, and how many named files each task needs in the workspace.
_INSTRUCTIONS = {
    "create": ("create {a}.txt containing the word {word}", 0),
    "rename": ("rename {a}.txt to {b}.txt", 1),
    "delete": ("delete every .log file", 2),
    "count": ("write the number of lines of {a}.txt into count.txt", 1),
    "upper": ("write {a}.txt in upper case into out.txt", 1),
    "sort": ("write the lines of {a}.txt sorted into sorted.txt", 1),
    "grep": ("write the lines of {a}.txt containing {word} into hits.txt", 1),
    "concat": ("concatenate {a}.txt then {b}.txt into all.txt", 2),
    "copy": ("copy {a}.txt into a new directory {b}/", 1),
    "mkdir": ("create the directory {a}/{b}/{word}", 0),
}


def _task(variant: str, rng: np.random.Generator, distractors: int, n_lines: int):
    """(files, instruction, demonstration, expected {path: content|None})."""
    a, b = (str(x) for x in rng.choice(_NAMES, size=2, replace=False))
    word = _WORDS[int(rng.integers(len(_WORDS)))]
    instruction = _INSTRUCTIONS[variant][0].format(a=a, b=b, word=word)
    if variant == "create":
        files = _workspace(rng, distractors, n_lines, [])
        return files, instruction, f"echo {word} > {a}.txt", {f"{a}.txt": word}
    if variant == "rename":
        files = _workspace(rng, distractors, n_lines, [f"{a}.txt"])
        return files, instruction, f"mv {a}.txt {b}.txt", {f"{a}.txt": None, f"{b}.txt": files[f"{a}.txt"]}
    if variant == "delete":
        files = _workspace(rng, distractors, n_lines, [f"{a}.log", f"{b}.log"])
        return files, instruction, "rm -f *.log", {f"{a}.log": None, f"{b}.log": None}
    if variant == "count":
        files = _workspace(rng, distractors, n_lines, [f"{a}.txt"])
        n = files[f"{a}.txt"].count("\n")
        return files, instruction, f"wc -l < {a}.txt > count.txt", {"count.txt": str(n)}
    if variant == "upper":
        files = _workspace(rng, distractors, n_lines, [f"{a}.txt"])
        return files, instruction, f"tr a-z A-Z < {a}.txt > out.txt", {"out.txt": files[f"{a}.txt"].upper()}
    if variant == "sort":
        files = _workspace(rng, distractors, n_lines, [f"{a}.txt"])
        body = "".join(sorted(files[f"{a}.txt"].splitlines(keepends=True)))
        return files, instruction, f"sort {a}.txt > sorted.txt", {"sorted.txt": body}
    if variant == "grep":
        files = _workspace(rng, distractors, n_lines, [f"{a}.txt"])
        hits = "".join(line for line in files[f"{a}.txt"].splitlines(keepends=True) if word in line)
        return files, instruction, f"grep {word} {a}.txt > hits.txt", {"hits.txt": hits}
    if variant == "concat":
        files = _workspace(rng, distractors, n_lines, [f"{a}.txt", f"{b}.txt"])
        both = files[f"{a}.txt"] + files[f"{b}.txt"]
        return files, instruction, f"cat {a}.txt {b}.txt > all.txt", {"all.txt": both}
    if variant == "copy":
        files = _workspace(rng, distractors, n_lines, [f"{a}.txt"])
        return files, instruction, f"mkdir {b} && cp {a}.txt {b}/", {f"{b}/{a}.txt": files[f"{a}.txt"]}
    if variant == "mkdir":
        files = _workspace(rng, distractors, n_lines, [])
        return files, instruction, f"mkdir -p {a}/{b}/{word}", {f"{a}/{b}/{word}": "<dir>"}
    raise ValueError(f"unknown terminal variant {variant!r}")


def max_prompt_chars(variant: str, distractors: int) -> int:
    """Exact upper bound on the prompt length of a variant at a difficulty.

    Every file name is a name from `_NAMES` plus a 4-character extension, so
    the listing is at most (files x (longest name + 5)) characters; the
    instruction is bounded by its template with the longest name and word.
    """
    template, n_wanted = _INSTRUCTIONS[variant]
    name, word = max(_NAMES, key=len), max(_WORDS, key=len)
    instruction = template.format(a=name, b=name, word=word)
    listing = (n_wanted + distractors) * (len(name) + 5)
    return len("files: \ntask: \n$ ") + listing + len(instruction)


VARIANTS = tuple(_INSTRUCTIONS)



def _check(snapshot: dict, files: dict[str, str], expected: dict[str, str | None], complete: bool = True) -> str | None:
    """None if the workspace is right, else the first problem found.

    The snapshot is bounded (sandbox.JobResult.files): an incomplete listing
    could hide a file that should be gone, and a file whose returned contents
    were truncated cannot be compared, so both fail (only an answer that fills
    the workspace far beyond any task's needs gets there). Files that must be
    unchanged are compared by the hash of their full contents.
    """
    if not complete:
        return "the workspace is too large to check (too many files or too deeply nested)"
    for path, want in expected.items():
        got = snapshot.get(path)
        if want is None:
            if got is not None:
                return f"{path} should not exist"
        elif want == "<dir>":
            if not got or got["type"] != "dir":
                return f"directory {path} is missing"
        elif not got or got["type"] != "file":
            return f"file {path} is missing"
        elif got.get("truncated"):
            return f"{path} is too large to check ({got['size']} bytes)"
        elif got["data"].strip() != want.strip():
            return f"{path} has the wrong content"
    for path, content in files.items():
        if path in expected:
            continue
        got = snapshot.get(path)
        if not got or got["type"] != "file" or got.get("sha256") != sandbox.text_sha256(content):
            return f"{path} was changed or removed but should be left alone"
    return None


class ShellTaskDomain(Domain):
    answer_format = "one shell command line, such as: sort a.txt > b.txt"

    def __init__(self, spec: DomainSpec, variant: str, size: tuple[int, int]) -> None:
        self.spec = spec
        self._variant = variant
        self._size = size

    def sample(self, rng: np.random.Generator) -> Problem:
        files, instruction, demo, expected = _task(self._variant, rng, *self._size)
        listing = " ".join(sorted(files))
        prompt = f"files: {listing}\ntask: {instruction}\n$ "
        instruct = Instruct(prompt=f"The current directory holds the files: {listing}\n"
                                   f"Task: {instruction}\n{FENCE.instruction()}",
                            demonstration=FENCE.demonstrate(demo))
        return Problem(key=f"terminal:{prompt}", prompt=prompt, demonstration=demo, hidden=(files, expected),
                       retry_cue="$ ", instruct=instruct)

    def grade(self, task: Problem, answer: str) -> Grade:
        files, expected = task.hidden
        found = answers.final_block(answer)
        many = answers.several(found)
        if many:
            return malformed(answers.several_feedback(many, "fenced blocks"))
        answer = found.text
        if not answer.strip():
            return malformed(f"the fenced block is empty; expected {self.answer_format}")
        if "\x00" in answer:
            # No exec argument can hold a NUL byte: the model's output is unrunnable, not the sandbox broken.
            return malformed(f"a shell command cannot contain a NUL byte (at offset {answer.index(chr(0))})")
        result = sandbox.run(sandbox.ShellJob(script=answer, files=files, timeout_s=TIMEOUT_S, wall_s=TIMEOUT_S))  # a wall-clock limit, as for terminal tasks
        if result.status is sandbox.Status.SANDBOX_ERROR:
            return Grade(Verdict.SANDBOX_ERROR, 0.0, f"sandbox failure: {result.detail}")
        if result.status is sandbox.Status.TIMEOUT:
            return Grade(Verdict.TIMEOUT, 0.0, f"time limit of {TIMEOUT_S:g}s exceeded")
        if result.status is sandbox.Status.MEMORY:
            return Grade(Verdict.OOM, 0.0, result.detail)
        problem = _check(result.files or {}, files, expected, complete=not result.files_truncated)
        if problem is None:
            return passed()
        tail = result.output.strip().splitlines()[-1:] if result.exit_code else []
        return failed(problem + (f" (shell said: {tail[0][:120]})" if tail else ""))


def _register() -> None:
    for variant in VARIANTS:
        for difficulty, size in _SIZES.items():
            spec = DomainSpec(
                id=f"rlpt/terminal-{variant}-{difficulty}-v0",
                family="terminal",
                difficulty=difficulty,
                tags=("terminal", "shell", "sandbox", variant),
                max_prompt_chars=max_prompt_chars(variant, size[0]),
                max_answer_chars=MAX_ANSWER_CHARS,
                description=f"shell task '{variant}' graded on the final workspace",
                max_instruct_prompt_chars=max_prompt_chars(variant, size[0]) + INSTRUCT_EXTRA_CHARS,
                max_instruct_answer_chars=INSTRUCT_ANSWER_CHARS,
            )
            registry.register(ShellTaskDomain(spec, variant, size))


_register()
