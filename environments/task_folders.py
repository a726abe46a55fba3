"""Task folders in the Terminal-Bench 2 / Harbor layout, read and checked
(environments.terminal_tasks runs them).

Folder format (one task per folder; unknown files and keys are ignored):

    <task>/instruction.md        required: the task text shown to the model
    <task>/tests/test.sh         required: run after the episode (see Verification)
    <task>/environment/Dockerfile  the task's environment, built with podman
                                 (`python -m environments build <folder>`); a
                                 folder without one gets `FROM python:3.13-slim`,
                                 `WORKDIR /app` and its environment/app/ copied there
    <task>/solution/solve.sh     optional: the reference solution (demonstration)
    <task>/task.toml             optional: [metadata] difficulty ("easy" |
                                 "medium" | "hard", default "medium"), category,
                                 tags; [agent] max_turns (default 8),
                                 timeout_sec (the episode's command time in all:
                                 when spent, the tests run), command_timeout_sec
                                 (one command; default 10 s, or what is left of
                                 timeout_sec when the task gives one);
                                 [verifier] timeout_sec (default 60, at most 3600),
                                 env (variables for test.sh); [environment] cpus,
                                 memory_mb or memory ("2G"): the container's limits,
                                 network ("none" | "registries" | "host", or
                                 Harbor's allow_internet = false: "none");
                                 [verifier] network: the tests' (see
                                 environments.containers.egress)
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from typing import Any

from environments.containers import compose, egress
from environments.containers import engine as engine_mod
from environments.registry import DIFFICULTIES

DEFAULT_MAX_TURNS = 8
DEFAULT_COMMAND_TIMEOUT_S = 10.0
DEFAULT_VERIFIER_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0  # any one limit a task.toml asks for (Terminal-Bench tasks ask 180-1,800 s)


class TaskFolderError(ValueError):
    """A task folder that cannot be loaded, built or trusted here."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a task: what the model is asked, how long it may work, how it is judged.
    A single-step task is one step named "" (the folder's own instruction.md, tests/ and
    solution/); a multi-step task (Harbor's [[steps]]) has one per steps/<name>/."""
    name: str
    instruction: str
    tests: tuple[str, ...]  # folders copied to /tests in this order (a later file replaces an earlier one)
    solution_dir: str | None  # copied to /solution for the reference run
    solution: str | None  # its solve.sh
    max_turns: int
    command_timeout_s: float
    verifier_timeout_s: float
    agent_timeout_s: float | None = None  # the step's command time in all ([agent] timeout_sec)
    verifier_env: tuple[tuple[str, str], ...] = ()
    workdir_files: str | None = None  # steps/<name>/workdir/: copied into the WORKDIR before the step (setup.sh then runs)
    healthcheck: engine_mod.Healthcheck | None = None  # [steps.healthcheck]
    min_reward: float | None = None  # below it, the later steps are not run
    contributes: bool = True  # counted in the "mean" reward


@dataclasses.dataclass(frozen=True)
class TaskFolder:
    name: str
    path: str
    difficulty: str
    tags: tuple[str, ...]
    steps: tuple[Step, ...]
    reward_strategy: str = "mean"  # multi-step: "mean" of the steps (unreached count 0) or the "final" step's
    resources: engine_mod.Resources = engine_mod.Resources()
    build_timeout_s: float = 1800.0
    workdir: str | None = None  # [environment] workdir, else the image's WORKDIR
    environment_env: tuple[tuple[str, str], ...] = ()  # [environment.env]: the container's variables
    solution_env: tuple[tuple[str, str], ...] = ()  # [solution.env]: the reference run's
    agent_user: str | None = None  # [agent] user: who runs the model's commands (else the image's USER)
    verifier_user: str | None = None  # [verifier] user
    healthcheck: engine_mod.Healthcheck | None = None  # [environment.healthcheck]
    solution_packages: bool = False  # the image also holds what solution/solve.sh installs (a loader option)
    services: tuple[compose.Service, ...] = ()  # sidecars from environment/docker-compose.yaml, in start order
    network: str | None = None  # [environment] network (or allow_internet = false: "none"); None: the run's choice
    verifier_network: str | None = None  # [verifier] network; None: the run's choice

    @property
    def has_reference(self) -> bool:
        """Every step has a reference solution."""
        return all(step.solution is not None for step in self.steps)

    @property
    def max_turns(self) -> int:
        return sum(step.max_turns for step in self.steps)


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise TaskFolderError(f"task folder is missing {what}: {path}") from None
    except (UnicodeDecodeError, OSError) as e:
        raise TaskFolderError(f"cannot read {path} as UTF-8 text: {e}") from None


def _number(table: dict, key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise TaskFolderError(f"{where}: {key} must be a positive number, got {value!r}")
    return float(value)


def _memory_mb(environment: dict, where: str) -> int:
    if "memory_mb" in environment:
        return int(_number(environment, "memory_mb", 2048, where))
    raw = environment.get("memory")
    if raw is None:
        return engine_mod.Resources().memory_mb
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)i?[bB]?\s*", str(raw))
    if not m:
        raise TaskFolderError(f"{where}: [environment] memory must be like '2G' or '512M', got {raw!r}")
    scale = {"": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024}[m.group(2).lower()]
    return max(64, int(float(m.group(1)) * scale))


def _healthcheck(health: Any, where: str) -> engine_mod.Healthcheck | None:
    if not isinstance(health, dict) or not health.get("command"):
        return None
    return engine_mod.Healthcheck(str(health["command"]), _number(health, "interval_sec", 2, where),
                                  int(health.get("retries", 3)), _number(health, "start_period_sec", 5, where))


def _env_of(t: dict) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), str(v)) for k, v in (t.get("env") if isinstance(t.get("env"), dict) else {}).items())


def _table(t: dict, key: str) -> dict:
    return t.get(key) if isinstance(t.get(key), dict) else {}


def _step(path: str, where: str, name: str, agent: dict, verifier: dict, tests: tuple[str, ...],
          solution_dir: str | None, instruction_path: str, **extra: Any) -> Step:
    """One step from its [agent]/[verifier] settings (a step's own over the task's)."""
    if verifier.get("environment_mode", "shared") != "shared":
        raise TaskFolderError(f"{where}: [verifier] environment_mode = {verifier['environment_mode']!r} "
                              "(a separate verifier container) is not supported; 'shared' is")
    instruction = _read_text(instruction_path, os.path.relpath(instruction_path, path)).strip()
    if not instruction:
        raise TaskFolderError(f"instruction.md is empty: {instruction_path}")
    if not any(os.path.isfile(os.path.join(t, "test.sh")) for t in tests):
        raise TaskFolderError(f"task folder is missing tests/test.sh: {os.path.join(tests[-1] if tests else path, 'test.sh')}"
                              if not name else f"step {name!r} has no tests/test.sh (its own or the task's): {path}")
    max_turns = agent.get("max_turns", DEFAULT_MAX_TURNS)
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise TaskFolderError(f"{where}: [agent] max_turns must be an int >= 1, got {max_turns!r}")
    agent_timeout = (min(_number(agent, "timeout_sec", MAX_TIMEOUT_S, where), MAX_TIMEOUT_S)
                     if "timeout_sec" in agent else None)
    command_default = agent_timeout if agent_timeout is not None else DEFAULT_COMMAND_TIMEOUT_S
    command_timeout = min(_number(agent, "command_timeout_sec", command_default, where), agent_timeout or MAX_TIMEOUT_S)
    verifier_timeout = min(_number(verifier, "timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S, where), MAX_TIMEOUT_S)
    solve = os.path.join(solution_dir, "solve.sh") if solution_dir else None
    solution = _read_text(solve, os.path.relpath(solve, path)).strip() if solve and os.path.isfile(solve) else None
    return Step(name, instruction, tests, solution_dir if solution is not None else None, solution, max_turns,
                command_timeout, verifier_timeout, agent_timeout, _env_of(verifier), **extra)


def _steps(path: str, toml_path: str, meta: dict, agent: dict, verifier: dict) -> tuple[Step, ...]:
    """Harbor's [[steps]]: each steps/<name>/ holds instruction.md and optionally tests/
    (over the task's tests/), solution/ and workdir/; its [steps.agent] and
    [steps.verifier] settings fall back to the task's."""
    entries = meta.get("steps")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise TaskFolderError(f"{toml_path}: a task with a steps/ folder declares its steps as [[steps]] tables "
                              f"(each with a name), got {entries!r}")
    task_tests = os.path.join(path, "tests")
    root_solution = os.path.join(path, "solution")
    steps, seen = [], set()
    for i, entry in enumerate(entries):
        name = entry.get("name")
        where = f"{toml_path} [[steps]] #{i + 1}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or name in seen:
            raise TaskFolderError(f"{where}: name must be a folder name under steps/, unique, got {name!r}")
        seen.add(name)
        folder = os.path.join(path, "steps", name)
        if not os.path.isdir(folder):
            raise TaskFolderError(f"{where}: no folder steps/{name}/ for step {name!r}")
        min_reward = entry.get("min_reward")
        if min_reward is not None and (isinstance(min_reward, bool) or not isinstance(min_reward, (int, float))
                                       or not 0 <= min_reward <= 1):
            raise TaskFolderError(f"{where}: min_reward must be a number in [0, 1] (per-key thresholds are not "
                                  f"supported: rewards here are one number), got {min_reward!r}")
        tests = tuple(t for t in (task_tests, os.path.join(folder, "tests")) if os.path.isdir(t))
        solution_dir = next((d for d in (os.path.join(folder, "solution"), root_solution)
                             if os.path.isfile(os.path.join(d, "solve.sh"))), None)
        workdir_files = os.path.join(folder, "workdir")
        steps.append(_step(path, where, name, {**agent, **_table(entry, "agent")},
                           {**verifier, **_table(entry, "verifier")}, tests, solution_dir,
                           os.path.join(folder, "instruction.md"),
                           workdir_files=workdir_files if os.path.isdir(workdir_files) else None,
                           healthcheck=_healthcheck(entry.get("healthcheck"), where),
                           min_reward=None if min_reward is None else float(min_reward),
                           contributes=bool(entry.get("contributes_to_mean", True))))
    return tuple(steps)


def load_task_folder(path: str, solution_packages: bool = False) -> TaskFolder:
    """Parses one task folder; raises TaskFolderError naming the problem and path.
    With `solution_packages`, the task's image will also hold what its reference
    solution installs with apt, pip or uv (episodes have no network to fetch them;
    the task then starts with those packages)."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise TaskFolderError(f"not a task folder (no such directory): {path}")
    name = re.sub(r"[_.]", "-", os.path.basename(path.rstrip(os.sep)).lower())
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
        raise TaskFolderError(f"task folder name {name!r} must be letters, digits and dashes: {path}")
    meta: dict[str, Any] = {}
    toml_path = os.path.join(path, "task.toml")
    if os.path.isfile(toml_path):
        try:
            with open(toml_path, "rb") as f:
                meta = tomllib.load(f)
        except (tomllib.TOMLDecodeError, OSError) as e:
            raise TaskFolderError(f"cannot parse {toml_path}: {e}") from None
    metadata, agent, verifier, environment = (_table(meta, k) for k in ("metadata", "agent", "verifier", "environment"))
    services, compose_env = (), ()
    if (compose_path := compose.find(path)) is not None:
        try:
            loaded = compose.load(compose_path)
        except compose.ComposeError as e:
            raise TaskFolderError(str(e)) from None
        services, compose_env = loaded.services, loaded.main_env
    difficulty = str(metadata.get("difficulty", "medium")).lower()
    if difficulty not in DIFFICULTIES:
        raise TaskFolderError(f"{toml_path}: difficulty {difficulty!r} is not one of {DIFFICULTIES}")
    raw_tags = metadata.get("tags", [])
    tags = tuple(str(t) for t in raw_tags) if isinstance(raw_tags, list) else ()
    if isinstance(metadata.get("category"), str):
        tags += (metadata["category"],)
    if os.path.isdir(os.path.join(path, "steps")) or "steps" in meta:
        steps = _steps(path, toml_path, meta, agent, verifier)
    else:
        steps = (_step(path, toml_path, "", agent, verifier, (os.path.join(path, "tests"),),
                       os.path.join(path, "solution"), os.path.join(path, "instruction.md")),)
    strategy = meta.get("multi_step_reward_strategy", "mean")
    if strategy not in ("mean", "final"):
        raise TaskFolderError(f"{toml_path}: multi_step_reward_strategy must be 'mean' or 'final', got {strategy!r}")
    workdir = environment.get("workdir")
    if workdir is not None and not (isinstance(workdir, str) and workdir.startswith("/")):
        raise TaskFolderError(f"{toml_path}: [environment] workdir must be an absolute path, got {workdir!r}")
    cpus = min(_number(environment, "cpus", 1, toml_path), float(os.cpu_count() or 1))
    resources = engine_mod.Resources(cpus=cpus, memory_mb=_memory_mb(environment, toml_path))
    build_timeout = min(_number(environment, "build_timeout_sec", 1800, toml_path), MAX_TIMEOUT_S)
    return TaskFolder(name, path, difficulty, tags, steps, strategy, resources, build_timeout, workdir,
                      compose_env + _env_of(environment), _env_of(_table(meta, "solution")), _user(agent, toml_path),
                      _user(verifier, toml_path), _healthcheck(environment.get("healthcheck"), toml_path),
                      solution_packages, services, _network(environment, f"{toml_path} [environment]", True),
                      _network(verifier, f"{toml_path} [verifier]", False))


def _network(t: dict, where: str, harbor_flag: bool) -> str | None:
    """A table's `network` policy (environments.containers.egress.POLICIES); in
    [environment], Harbor's `allow_internet = false` means "none" (true leaves the
    choice to the run: an agent with the internet is not something a run must give)."""
    policy = t.get("network")
    if harbor_flag and "allow_internet" in t:
        if not isinstance(t["allow_internet"], bool):
            raise TaskFolderError(f"{where}: allow_internet must be true or false, got {t['allow_internet']!r}")
        if t["allow_internet"] is False:
            if policy not in (None, "none"):
                raise TaskFolderError(f"{where}: allow_internet = false contradicts network = {policy!r}")
            return "none"
    if policy is None:
        return None
    try:
        return egress.check_policy(policy, where)
    except ValueError as e:
        raise TaskFolderError(str(e)) from None


def _user(t: dict, where: str) -> str | None:
    user = t.get("user")
    if user is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_.-]+)?", str(user)):
        raise TaskFolderError(f"{where}: user must be a user name or uid, got {user!r}")
    return str(user)
