"""Terminal tasks in Terminal-Bench 2's folder layout, as multi-turn shell domains.

Folder format (one task per folder; unknown files and keys are ignored):

    <task>/instruction.md        required: the task text shown to the model
    <task>/tests/test.sh         required: run after the episode; exit 0 = pass
    <task>/task.toml             optional: [metadata] difficulty ("easy" |
                                 "medium" | "hard", default "medium"), category,
                                 tags; [agent] max_turns (default 8),
                                 timeout_sec (the episode's command time in
                                 all: when spent, the tests run),
                                 command_timeout_sec (one command, default 10,
                                 at most the agent's timeout_sec);
                                 [verifier] timeout_sec (default 60, at most 3600)
    <task>/solution/solve.sh     optional: reference solution (the demonstration)
    <task>/environment/app/      optional: the initial workspace (text files)
    <task>/environment/Dockerfile  optional: NOT built. Packages it installs
                                 (apt-get/apt/apk install, pip install) must
                                 already be on this host (checked inside the sandbox:
                                 `command -v`, python3 imports), else the
                                 folder is refused at load time naming them.

Episode (the env's tool-turn mechanism, `spec.max_turns` = the turn budget):
each model turn is a shell script run with bash in the sandbox, with the
episode's workspace as the working directory; its exit status and output
(one line, bounded: see environments.env) come back as a non-scored
`ToolReply`. Each turn is a fresh shell: files persist between turns of an
episode (the sandbox's workspace snapshot is carried into the next job, with
directories, modes and symlinks), cwd and variables do not. A turn whose last
line is `DONE` ends the episode: the lines before it (if any) run first, then
the task's tests run on the final workspace and decide the reward. The last
turn of the budget is graded the same way (tests run after it), as in
Terminal-Bench, where tests run when the agent times out.

Path mapping: Terminal-Bench's /app is the workspace (the cwd of every turn).
At verification only, the task's tests/ folder is copied to `.tbench/tests/`
in the workspace (never visible during the episode; anything the model put
under `.tbench/` is removed first) and test.sh runs with bash, cwd = the
workspace, and APP_DIR (the workspace), TESTS_DIR and LOGS_DIR
(`.tbench/logs`) exported. Reward: `$LOGS_DIR/verifier/reward.txt` if test.sh
wrote one (a number in [0, 1]; PASS iff it is 1), else PASS iff test.sh
exits 0. Tests written for Docker with absolute /app, /tests, /logs paths must
use those variables (or relative paths) instead.

A workspace the snapshot cannot carry in full (over 256 entries, a file over
64 KiB, 1 MiB in all, a non-UTF-8 file, a fifo or socket) ends the episode
with FAIL saying so, never silently losing data. Sandbox infrastructure
failures are SANDBOX_ERROR.

    from environments import terminal_tasks
    ids = terminal_tasks.register_tasks("/path/to/my/tasks")      # every subfolder
    spec_id = terminal_tasks.register_task_folder("/path/to/my/tasks/hello")  # one
    # -> "rlpt/tbench-hello-v0"; gymnasium.make(spec_id)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shlex
import shutil
import subprocess
import time
import tomllib
from typing import Any

import numpy as np

from environments import registry, sandbox, splits
from environments.registry import DIFFICULTIES, Domain, DomainSpec
from environments.verdicts import Grade, Task, ToolReply, Verdict, failed, passed, verifier_error

log = logging.getLogger(__name__)

FAMILY = "tbench"
DATA_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "terminal_tasks")
DONE = "DONE"
DEFAULT_MAX_TURNS = 8
DEFAULT_COMMAND_TIMEOUT_S = 10.0
DEFAULT_VERIFIER_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0  # any one limit a task.toml asks for (Terminal-Bench tasks ask 180-1,800 s)
MAX_ANSWER_CHARS = 4096
OUTPUT_CHARS = 240  # what a command turn reports (the env cuts replies at 256)
TESTS_DIR = ".tbench/tests"
LOGS_DIR = ".tbench/logs"
LIMITS = sandbox.Limits(address_space_bytes=1 << 30, file_size_bytes=1 << 20, open_files=256, processes=64, memory_bytes=512 << 20)

PROTOCOL = (
    "You are in a shell. Each of your turns is a bash script, run in the task's working directory; "
    "you see its exit status and output. Files persist between turns; cwd and variables do not. "
    f"When the task is complete, reply with a turn whose last line is {DONE} (lines before it run first); "
    "then hidden tests check the working directory."
)

# apt package -> the commands it provides (None: nothing checkable, e.g. data or libraries).
_APT_TOOLS: dict[str, tuple[str, ...] | None] = {
    "ca-certificates": None,
    "locales": None,
    "tzdata": None,
    "python3-pip": None,
    "python3-venv": None,
    "python-is-python3": ("python",),
    "procps": ("ps",),
    "coreutils": ("ls",),
    "findutils": ("find",),
    "iproute2": ("ip",),
    "sqlite3": ("sqlite3",),
    "vim": ("vim",),
    "nodejs": ("node",),
    "golang": ("go",),
    "golang-go": ("go",),
    "default-jdk": ("java",),
    "openjdk-17-jdk": ("java",),
    "ripgrep": ("rg",),
    "fd-find": ("fdfind",),
    "bsdmainutils": ("column",),
    "net-tools": ("netstat",),
    "xxd": ("xxd",),
    # Packages named apart from the commands they provide.
    "binutils": ("ld", "as", "objdump"),
    "ninja-build": ("ninja",),
    "build-essential": ("gcc", "make"),
    "g++": ("g++",),
    "openssh-client": ("ssh",),
    "dnsutils": ("dig",),
    "iputils-ping": ("ping",),
    "netcat-openbsd": ("nc",),
    "poppler-utils": ("pdftotext",),
    "imagemagick": ("convert",),
    "default-jre": ("java",),
}
# pip distribution -> import name, where they differ.
_PIP_MODULES = {
    "pyyaml": "yaml", "scikit-learn": "sklearn", "pillow": "PIL", "beautifulsoup4": "bs4",
    "opencv-python": "cv2", "python-dateutil": "dateutil", "attrs": "attr", "pytest-xdist": "xdist",
}


class TaskFolderError(ValueError):
    """A task folder that cannot be loaded (malformed, or needs what this host lacks)."""


@dataclasses.dataclass(frozen=True)
class TaskFolder:
    name: str
    path: str
    instruction: str
    difficulty: str
    tags: tuple[str, ...]
    max_turns: int
    command_timeout_s: float
    verifier_timeout_s: float
    files: dict[str, str]  # initial workspace
    tests: dict[str, str]  # tests/ folder, relative paths
    solution: str | None
    agent_timeout_s: float | None = None  # the episode's command time in all ([agent] timeout_sec)


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise TaskFolderError(f"task folder is missing {what}: {path}") from None
    except (UnicodeDecodeError, OSError) as e:
        raise TaskFolderError(f"cannot read {path} as UTF-8 text: {e}") from None


def _read_tree(root: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for dirpath, dirnames, names in os.walk(root):
        # Python's bytecode caches (left by running a task's tests in place) are not task files.
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(names):
            full = os.path.join(dirpath, name)
            if os.path.islink(full) or not os.path.isfile(full):
                raise TaskFolderError(f"only regular text files are supported in {root}: {full}")
            out[os.path.relpath(full, root).replace(os.sep, "/")] = _read_text(full, "a file")
    return out


def _number(table: dict, key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise TaskFolderError(f"{where}: {key} must be a positive number, got {value!r}")
    return float(value)


def _dockerfile_needs(text: str) -> tuple[list[str], list[str]]:
    """(apt/apk packages, pip packages) a Dockerfile's RUN lines install."""
    joined = re.sub(r"\\\s*\n", " ", text)
    apt, pip = [], []
    for line in joined.splitlines():
        line = line.strip()
        if not line.upper().startswith("RUN "):
            continue
        for part in re.split(r"&&|\|\||;|\|", line[4:]):
            try:
                words = shlex.split(part)
            except ValueError:
                words = part.split()
            while words and ("=" in words[0] and not words[0].startswith("-") or words[0] in ("sudo", "env")):
                words = words[1:]  # VAR=value prefixes, sudo
            if len(words) < 2:
                continue
            head = os.path.basename(words[0])
            if head in ("apt-get", "apt", "yum", "dnf", "apk") and words[1] in ("install", "add"):
                apt += [w for w in words[2:] if not w.startswith(("-", "$")) and "::" not in w]
            elif head.startswith("pip") or (head.startswith("python") and words[1:3] == ["-m", "pip"]) or head == "uv":
                rest = words[words.index("install") + 1:] if "install" in words else []
                skip = False
                for w in rest:
                    if skip:
                        skip = False
                    elif w in ("-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url", "-f", "--find-links"):
                        skip = True
                    elif not w.startswith("-") and "/" not in w and not w.endswith((".whl", ".tar.gz")) and w != ".":
                        pip.append(w)
    return apt, pip


def _missing_requirements(dockerfile: str) -> list[str]:
    """What the Dockerfile installs that the sandbox's runtime lacks (checked inside
    the sandbox, where tasks run: the host's PATH may differ, e.g. /etc/alternatives)."""
    apt, pip = _dockerfile_needs(dockerfile)
    tools: dict[str, str] = {}  # command -> why it is needed
    for pkg in apt:
        pkg = re.split(r"[=<>]", pkg)[0]
        if pkg.startswith("python3-") and pkg not in _APT_TOOLS:
            pip.append(pkg[len("python3-"):])
            continue
        if pkg.startswith("lib") or pkg.endswith(("-dev", "-doc")):
            continue  # libraries: nothing to check by command name
        for tool in _APT_TOOLS.get(pkg, (pkg,)) or ():
            tools.setdefault(tool, f"{tool} (apt package {pkg})")
    modules: dict[str, str] = {}
    for dist in pip:
        base = re.split(r"[=<>!~\[; ]", dist)[0].lower()
        if base:
            mod = _PIP_MODULES.get(base, base.replace("-", "_"))
            modules.setdefault(mod, f"python module {mod} (pip package {base})")
    if not tools and not modules:
        return []
    if modules:
        tools.setdefault("python3", "python3 (for pip packages)")
    safe = [t for t in tools if re.fullmatch(r"[A-Za-z0-9._+-]+", t)]
    mods = [m for m in modules if re.fullmatch(r"[A-Za-z0-9_.]+", m)]
    missing = [tools[t] for t in tools if t not in safe] + [modules[m] for m in modules if m not in mods]
    script = "".join(f"command -v {t} >/dev/null 2>&1 || echo tool:{t}\n" for t in safe)
    if mods:
        probe = "import importlib.util, sys\nfor m in sys.argv[1:]:\n    importlib.util.find_spec(m) is None and print('module:' + m)"
        script += f"python3 -c {shlex.quote(probe)} {' '.join(mods)} 2>/dev/null\n"
    result = sandbox.run(sandbox.ShellJob(script=script, timeout_s=20.0, limits=LIMITS))
    if result.status is sandbox.Status.OK:
        found = set(result.output.split())
        missing += [tools[t] for t in safe if f"tool:{t}" in found]
        missing += [modules[m] for m in mods if f"module:{m}" in found or "tool:python3" in found]
        return sorted(set(missing))
    log.warning("terminal_tasks: sandbox unavailable for the requirement check (%s); checking the host", result.detail)
    missing += [tools[t] for t in safe if shutil.which(t) is None]
    if mods:
        python = shutil.which("python3")
        out = subprocess.run([python or "python3", "-c", "import importlib.util,sys\nfor m in sys.argv[1:]: print(m, importlib.util.find_spec(m) is not None)", *mods],
                             capture_output=True, text=True, timeout=30).stdout if python else ""
        ok = {line.split()[0] for line in out.splitlines() if line.endswith("True")}
        missing += [modules[m] for m in mods if m not in ok]
    return sorted(set(missing))


def load_task_folder(path: str) -> TaskFolder:
    """Parses one task folder; raises TaskFolderError naming the problem and path."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise TaskFolderError(f"not a task folder (no such directory): {path}")
    name = os.path.basename(path.rstrip(os.sep)).lower().replace("_", "-")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
        raise TaskFolderError(f"task folder name {name!r} must be letters, digits and dashes: {path}")
    instruction = _read_text(os.path.join(path, "instruction.md"), "instruction.md").strip()
    if not instruction:
        raise TaskFolderError(f"instruction.md is empty: {os.path.join(path, 'instruction.md')}")
    test_sh = os.path.join(path, "tests", "test.sh")
    if not os.path.isfile(test_sh):
        raise TaskFolderError(f"task folder is missing tests/test.sh: {test_sh}")
    tests = _read_tree(os.path.join(path, "tests"))
    meta: dict[str, Any] = {}
    toml_path = os.path.join(path, "task.toml")
    if os.path.isfile(toml_path):
        try:
            with open(toml_path, "rb") as f:
                meta = tomllib.load(f)
        except (tomllib.TOMLDecodeError, OSError) as e:
            raise TaskFolderError(f"cannot parse {toml_path}: {e}") from None
    metadata = meta.get("metadata") if isinstance(meta.get("metadata"), dict) else {}
    agent = meta.get("agent") if isinstance(meta.get("agent"), dict) else {}
    verifier = meta.get("verifier") if isinstance(meta.get("verifier"), dict) else {}
    difficulty = str(metadata.get("difficulty", "medium")).lower()
    if difficulty not in DIFFICULTIES:
        raise TaskFolderError(f"{toml_path}: difficulty {difficulty!r} is not one of {DIFFICULTIES}")
    raw_tags = metadata.get("tags", [])
    tags = tuple(str(t) for t in raw_tags) if isinstance(raw_tags, list) else ()
    if isinstance(metadata.get("category"), str):
        tags += (metadata["category"],)
    max_turns = agent.get("max_turns", DEFAULT_MAX_TURNS)
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise TaskFolderError(f"{toml_path}: [agent] max_turns must be an int >= 1, got {max_turns!r}")
    agent_timeout = (min(_number(agent, "timeout_sec", MAX_TIMEOUT_S, toml_path), MAX_TIMEOUT_S)
                     if "timeout_sec" in agent else None)
    command_timeout = min(_number(agent, "command_timeout_sec", DEFAULT_COMMAND_TIMEOUT_S, toml_path),
                          agent_timeout or MAX_TIMEOUT_S)
    verifier_timeout = min(_number(verifier, "timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S, toml_path), MAX_TIMEOUT_S)
    env_dir = os.path.join(path, "environment")
    dockerfile = os.path.join(env_dir, "Dockerfile")
    if os.path.isfile(dockerfile):
        missing = _missing_requirements(_read_text(dockerfile, "environment/Dockerfile"))
        if missing:
            raise TaskFolderError(f"task {name} needs what this host lacks: {', '.join(missing)} ({dockerfile} is not built; install them on the host)")
    app = os.path.join(env_dir, "app")
    files = _read_tree(app) if os.path.isdir(app) else {}
    solve = os.path.join(path, "solution", "solve.sh")
    solution = _read_text(solve, "solution/solve.sh").strip() if os.path.isfile(solve) else None
    return TaskFolder(name, path, instruction, difficulty, tags, max_turns, command_timeout, verifier_timeout, files, tests,
                      solution, agent_timeout)


# ---------------------------------------------------------------- workspace carry



@dataclasses.dataclass
class Workspace:
    """One episode's workspace between jobs: files (text), modes, dirs, links."""

    files: dict[str, str]
    modes: dict[str, int] = dataclasses.field(default_factory=dict)
    dirs: list[str] = dataclasses.field(default_factory=list)
    links: dict[str, str] = dataclasses.field(default_factory=dict)

    def restore_script(self) -> str:
        """Shell lines recreating what `ShellJob.files` cannot: empty dirs, modes, links."""
        lines = []
        if self.dirs:
            lines.append("mkdir -p -- " + " ".join(shlex.quote(d) for d in self.dirs))
        for path, mode in sorted(self.modes.items()):
            lines.append(f"chmod {mode:o} -- {shlex.quote(path)}")
        for path, target in sorted(self.links.items()):
            lines.append(f"ln -s -- {shlex.quote(target)} {shlex.quote(path)}")
        return "".join(line + "\n" for line in lines)


def _carry(result: sandbox.JobResult) -> Workspace | str:
    """The workspace a job left, or why it cannot be carried in full."""
    if result.files is None or result.files_truncated:
        return "the workspace has too many entries (or is nested too deeply) to carry to the next turn"
    ws = Workspace(files={})
    for path, entry in result.files.items():
        kind = entry["type"]
        if kind == "dir":
            ws.dirs.append(path)
        elif kind == "link":
            ws.links[path] = entry["target"]
        elif kind == "file":
            if entry.get("truncated") or entry.get("sha256") is None:
                return f"{path} ({entry['size']} bytes) is too large to carry (at most 64 KiB a file, 1 MiB in all)"
            if sandbox.text_sha256(entry["data"]) != entry["sha256"]:
                return f"{path} is not UTF-8 text; only text files can be carried between turns"
            ws.files[path] = entry["data"]
            if entry["mode"] != 0o644:
                ws.modes[path] = entry["mode"]
        else:
            return f"{path} is not a regular file, directory or symlink"
    return ws


def _shown(result: sandbox.JobResult) -> str:
    """Exit status and output of a command, one line, at most OUTPUT_CHARS."""
    out = result.output.rstrip("\n").replace("\n", "\\n")
    head = f"[exit {result.exit_code}] " if result.signal is None else f"[signal {result.signal}] "
    if result.output_bytes > len(result.output.encode("utf-8", "replace")):
        head += f"({result.output_bytes} bytes, start shown) "
    room = OUTPUT_CHARS - len(head)
    if len(out) > room:
        out = out[: room - 40] + " ... " + out[-35:]
    return head + out


@dataclasses.dataclass
class _Episode:
    workspace: Workspace
    turns: int = 0
    broken: str | None = None
    command_s: float = 0.0  # wall time its commands took, against the agent's timeout_sec


class TerminalTaskDomain(Domain):
    answer_format = f"a bash script (a turn whose last line is {DONE} ends the episode)"

    def __init__(self, task: TaskFolder, split: str = "train", version: int = 0) -> None:
        self.folder = task
        self.splits = (splits.check_split(split),)
        self._prompt = f"{PROTOCOL}\n\nTask:\n{task.instruction}\n\n$ "
        demo = ((task.solution + "\n") if task.solution else "") + DONE
        self._demo = demo
        self.spec = DomainSpec(
            id=f"rlpt/{FAMILY}-{task.name}-v{version}",
            family=FAMILY,
            difficulty=task.difficulty,
            tags=("terminal", "shell", "sandbox", "tool-use", "multi-turn", "tbench", *task.tags),
            max_prompt_chars=len(self._prompt),
            max_answer_chars=max(MAX_ANSWER_CHARS, len(demo)),
            description=f"Terminal-Bench-style task '{task.name}' ({task.path}), graded by its tests/test.sh",
            max_turns=task.max_turns,
        )

    def sample(self, rng: np.random.Generator) -> Task:
        ws = Workspace(files=dict(self.folder.files))
        return Task(
            key=f"tbench:{self.folder.name}:{self.folder.instruction}",
            prompt=self._prompt,
            demonstration=self._demo,
            hidden=_Episode(ws),  # fresh per episode: the workspace carried between turns
            retry_cue="$ ",
            demonstration_turns=(self._demo,),
        )

    def sample_in_split(self, rng: np.random.Generator, split: str) -> Task:
        if splits.check_split(split) not in self.splits:
            raise ValueError(f"{self.spec.id} offers only the {self.splits[0]!r} split, not {split!r}")
        return self.sample(rng)

    def _run(self, ws: Workspace, script: str, timeout_s: float) -> sandbox.JobResult:
        # Terminal-Bench's command and test timeouts are wall-clock limits.
        return sandbox.run(sandbox.ShellJob(script=script, files=ws.files, timeout_s=timeout_s, wall_s=timeout_s, limits=LIMITS, output_limit=4096))

    def _command_limit(self, episode: _Episode) -> float:
        budget = self.folder.agent_timeout_s
        left = float("inf") if budget is None else budget - episode.command_s
        return max(0.0, min(self.folder.command_timeout_s, left))

    def _command(self, episode: _Episode, command: str) -> sandbox.JobResult:
        ws = episode.workspace
        script = ws.restore_script() + "bash -c " + shlex.quote(command) + " rlpt-turn\n"
        start = time.monotonic()
        result = self._run(ws, script, self._command_limit(episode))
        episode.command_s += time.monotonic() - start
        return result

    def grade(self, task: Task, answer: str) -> Grade | ToolReply:
        episode: _Episode = task.hidden
        if episode.broken is not None:
            return failed(episode.broken)
        episode.turns += 1
        lines = answer.split("\n")
        done = lines[-1].strip() == DONE
        command = "\n".join(lines[:-1]).strip() if done else answer
        if "\x00" in command:
            reply = ToolReply(Verdict.MALFORMED, "a shell script cannot contain a NUL byte")
            return reply if not self._last_turn(episode) else self._verify(episode)
        if command and self._command_limit(episode) > 0:
            result = self._command(episode, command)
            if result.status is sandbox.Status.SANDBOX_ERROR:
                return Grade(Verdict.SANDBOX_ERROR, 0.0, f"sandbox failure: {result.detail}")
            if result.files is not None:
                carried = _carry(result)
                if isinstance(carried, str):
                    episode.broken = f"episode ended: {carried}"
                    return failed(episode.broken)
                episode.workspace = carried
            if not done and not self._last_turn(episode) and self._command_limit(episode) > 0:
                # (when the agent's timeout_sec is spent, the tests run now, as in Terminal-Bench)
                if result.status is sandbox.Status.TIMEOUT:
                    return ToolReply(Verdict.ERROR, f"timed out after {self.folder.command_timeout_s:g}s; " + _shown(result), "bash")
                if result.status is sandbox.Status.MEMORY:
                    return ToolReply(Verdict.ERROR, f"{result.detail}; " + _shown(result), "bash")
                return ToolReply(Verdict.TOOL, _shown(result), "bash")
        return self._verify(episode)

    def _last_turn(self, episode: _Episode) -> bool:
        return episode.turns >= self.spec.max_turns

    def _verify(self, episode: _Episode) -> Grade:
        ws = episode.workspace
        files = {p: c for p, c in ws.files.items() if not (p == ".tbench" or p.startswith(".tbench/"))}
        files.update({f"{TESTS_DIR}/{p}": c for p, c in self.folder.tests.items()})
        clean = Workspace(
            files=files,
            modes={p: m for p, m in ws.modes.items() if not p.startswith(".tbench/")},
            dirs=[d for d in ws.dirs if d != ".tbench" and not d.startswith(".tbench/")],
            links={p: t for p, t in ws.links.items() if p != ".tbench" and not p.startswith(".tbench/")},
        )
        script = (
            clean.restore_script()
            + f'export APP_DIR="$PWD" TESTS_DIR="$PWD/{TESTS_DIR}" LOGS_DIR="$PWD/{LOGS_DIR}"\n'
            + 'mkdir -p "$LOGS_DIR/verifier"\n'
            + 'bash "$TESTS_DIR/test.sh"\n'
        )
        result = self._run(clean, script, self.folder.verifier_timeout_s)
        if result.status is sandbox.Status.SANDBOX_ERROR:
            return Grade(Verdict.SANDBOX_ERROR, 0.0, f"sandbox failure while testing: {result.detail}")
        if result.status is sandbox.Status.TIMEOUT:
            return Grade(Verdict.TIMEOUT, 0.0, f"the tests ran past {self.folder.verifier_timeout_s:g}s")
        if result.status is sandbox.Status.MEMORY:
            return Grade(Verdict.OOM, 0.0, f"the tests ran out of memory: {result.detail}")
        tail = result.output.strip().splitlines()[-1:]
        said = f" (tests said: {tail[0][:160]})" if tail else ""
        reward_file = (result.files or {}).get(f"{LOGS_DIR}/verifier/reward.txt")
        if reward_file is not None and reward_file.get("type") == "file":
            try:
                reward = float(reward_file["data"].strip())
            except ValueError:
                return Grade(Verdict.ERROR, 0.0, f"the tests wrote an unreadable reward file: {reward_file['data'][:40]!r}")
            if not 0.0 <= reward <= 1.0:
                return Grade(Verdict.ERROR, 0.0, f"the tests wrote a reward outside [0, 1]: {reward}")
            return passed("the tests passed") if reward == 1.0 else failed(f"the tests gave reward {reward:g}{said}", reward)
        if result.exit_code == 0 and result.signal is None:
            return passed("the tests passed")
        broken = harness_failure(result.output)
        if broken is not None:
            # The tests never judged the work: infrastructure, masked, never the model's FAIL.
            return verifier_error(f"the tests could not run here: {broken}")
        return failed(f"the tests failed (exit {result.exit_code}){said}")


# Output of a test run that broke before judging anything: the test script's own
# commands missing or pointed at absolute paths this runner does not provide, the
# network the tests try to reach, the test runner absent or unable to find its tests.
# A line from bash about test.sh itself names the script, so a missing command the
# model's own program runs (reported against its own file) is not matched.
_HARNESS_FAILURES = (
    (re.compile(r"tests/test\.sh: line \d+: ([^:\n]+): command not found"), "test.sh needs {0!r}, which is not installed"),
    (re.compile(r"tests/test\.sh: line \d+: (?:cd|source|\.): (/[^:\n]*): No such file or directory"),
     "test.sh uses the absolute path {0!r}, which this runner does not provide"),
    (re.compile(r"tests/test\.sh: (/[^:\n]*): No such file or directory"), "test.sh runs {0!r}, which does not exist here"),
    (re.compile(r"(Could not resolve host|Temporary failure in name resolution|Network is unreachable|"
                r"No matching distribution found for [^\s]+)"), "the tests need the network ({0})"),
    (re.compile(r"No module named '?(pytest|uv)'?"), "the test runner {0!r} is not installed"),
    (re.compile(r"ERROR: file or directory not found: (/[^\s]+)"), "pytest found no tests at {0!r}"),
)


def harness_failure(output: str) -> str | None:
    """Why a failed test run never judged the work (see _HARNESS_FAILURES), or None."""
    for pattern, why in _HARNESS_FAILURES:
        match = pattern.search(output)
        if match:
            return why.format(match.group(1).strip())
    return None


def validate_task(domain: TerminalTaskDomain) -> str | None:
    """Why the task's tests cannot be trusted here, or None: its reference solution
    (if it has one) must PASS, and a do-nothing answer must be judged FAIL by the
    tests themselves (not PASS, and not a harness that never ran)."""
    rng = np.random.default_rng(0)
    if domain.folder.solution is not None:
        task = domain.sample(rng)
        grade = domain.grade(task, task.demonstration)
        if grade.verdict is not Verdict.PASS:
            return f"its reference solution is {grade.verdict.value}, not PASS: {grade.feedback[:200]}"
    grade = domain.grade(domain.sample(rng), DONE)
    if grade.verdict is Verdict.PASS:
        return "its tests pass a do-nothing answer"
    if grade.verdict is not Verdict.FAIL:
        return f"a do-nothing answer is {grade.verdict.value}, not a FAIL by the tests: {grade.feedback[:200]}"
    return None


def register_task_folder(path: str, split: str = "train", version: int = 0, validate: bool = True) -> str:
    """Loads and registers one task folder as `rlpt/tbench-<name>-v<version>`; returns the id.
    Raises TaskFolderError for a malformed folder, one needing tools this host lacks, or
    (with `validate`, see `validate_task`) one whose tests cannot be trusted here: a task
    that could only ever score 0 never reaches training as a silent zero-reward domain."""
    domain = TerminalTaskDomain(load_task_folder(path), split=split, version=version)
    if validate:
        why = validate_task(domain)
        if why is not None:
            raise TaskFolderError(f"task {domain.folder.name} fails validation: {why} ({path})")
    registry.register(domain)
    return domain.spec.id


def register_tasks(root: str, split: str = "train", version: int = 0, skip_unavailable: bool = False,
                   validate: bool = True) -> list[str]:
    """Registers every subfolder of `root` (sorted) as a task; returns the ids. With
    skip_unavailable, folders that cannot load or fail validation are logged with the
    reason and skipped instead of raising."""
    if not os.path.isdir(root):
        raise TaskFolderError(f"no such task root directory: {root}")
    ids = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path) or name.startswith("."):
            continue
        try:
            ids.append(register_task_folder(path, split=split, version=version, validate=validate))
        except TaskFolderError as e:
            if not skip_unavailable:
                raise
            log.warning("terminal_tasks: skipping %s: %s", path, e)
    return ids


# The shipped tasks are validated by tests/environments/test_terminal_tasks.py, not on every import.
BUILTIN_IDS = register_tasks(DATA_ROOT, validate=False) if os.path.isdir(DATA_ROOT) else []
