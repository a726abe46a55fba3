"""Terminal tasks in Terminal-Bench 2 / Harbor folder layout, as multi-turn shell
domains, each run in the container its own Dockerfile describes.

Folder format: environments.task_folders.

Episode (the env's tool-turn mechanism, `spec.max_turns` = the turn budget): the
first turn starts a container from the task's image, with no network and the
task's limits; it lives for the episode, so files, installed packages and
background processes persist between turns (cwd and variables do not: each turn
is a fresh `bash` in the image's WORKDIR, usually /app). Each model turn is a
shell script; its exit status and output (one bounded line) come back as a
non-scored `ToolReply`. A turn whose last line is `DONE` ends the episode: the
lines before it run first, then the tests. The budget's last turn, and a turn
after the agent's timeout_sec is spent, are graded the same way. In a multi-step
task DONE ends the step: its tests run, and the next step's instruction comes
back as a non-scored reply (`ToolReply.task_text`), each step with its own turn
budget and times, all in the same container; the last step's end grades the task.

The instruct prompt style states the same protocol in words and asks for each
turn's script in one ```bash fenced block (DONE its last line); its
demonstration turns are written so. In either style a turn's script is the
reply's last fenced block, else the whole reply (`environments.answers`); a
turn with several different blocks is MALFORMED. A later step's instruction
(`ToolReply.task_text`) is the bare one in both styles: the domain does not
know which style its env shows.

Verification (paths as the tasks wrote them): tests/ is copied to /tests only
now (binary files as they are), /logs/verifier is created, and `bash
/tests/test.sh` runs in the WORKDIR with TEST_DIR=/tests (Terminal-Bench 1),
APP_DIR (the WORKDIR), TESTS_DIR, LOGS_DIR=/logs, the task's [verifier] env and
uv/pip set offline: what test.sh installs was baked into the image at build
time (`environments.containers.images`). Reward: /logs/verifier/reward.txt (or
reward.json's "reward") if test.sh wrote one (a number in [0, 1]; PASS iff 1),
else PASS iff test.sh exits 0. A test run that broke before judging anything
(a command not found, the network, no test runner: `harness_failure`) is
VERIFIER_ERROR, never the model's FAIL; a container that cannot start or an
image not yet built is SANDBOX_ERROR naming the command that builds it.

    from environments import terminal_tasks
    ids = terminal_tasks.register_tasks("/path/to/my/tasks")      # builds, validates, registers
    spec_id = terminal_tasks.register_task_folder("/path/to/my/tasks/hello")  # one
    # -> "rlpt/tbench-hello-v0"; gymnasium.make(spec_id)
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import re
import shlex
import threading
import time
import uuid
import weakref
from typing import Any

import numpy as np

from environments import answers, registry, splits
from environments.containers import egress, images
from environments.containers import engine as engine_mod
from environments.registry import Domain, DomainSpec
from environments.task_folders import (MAX_TIMEOUT_S, TaskFolder, TaskFolderError,  # noqa: F401  (re-exported)
                                     load_task_folder)
from environments.verdicts import Grade, Instruct, Problem, ToolReply, Verdict, failed, passed, verifier_error

log = logging.getLogger(__name__)

FAMILY = "tbench"
DATA_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "terminal_tasks")
DONE = "DONE"
MAX_ANSWER_CHARS = 4096
OUTPUT_CHARS = 240  # what a command turn reports (the env cuts replies at 256)
TESTS_PATH = "/tests"
LOGS_PATH = "/logs"
SOLUTION_PATH = "/solution"
# At verification the tests run with no network: uv and pip use what the image holds.
OFFLINE_ENV = {"UV_OFFLINE": "1", "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "UV_LINK_MODE": "copy",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "DEBIAN_FRONTEND": "noninteractive"}

PROTOCOL = (
    "You are in a shell. Each of your turns is a bash script, run in the task's working directory; "
    "you see its exit status and output. Files persist between turns; cwd and variables do not. "
    f"When the task is complete, reply with a turn whose last line is {DONE} (lines before it run first); "
    "then hidden tests check the working directory."
)
FENCE = answers.Fenced("bash", f"each turn's script (its last line {DONE} when the task is complete)")
INSTRUCT_PROTOCOL = (
    "You are in a shell. Each of your turns is a bash script, run in the task's working directory; "
    "you see its exit status and output. Files persist between turns; cwd and variables do not. "
    f"When the task is complete, end a turn's script with a line {DONE} (the lines before it run first); "
    f"then hidden tests check the working directory. {FENCE.instruction()}"
)
_ENGINE = engine_mod.Engine()


def build_task(folder: TaskFolder, engine: engine_mod.Engine | None = None) -> images.Built:
    """Builds the task's image (cached by content); see environments.containers.images."""
    return images.build(folder.path, folder.name, engine or _ENGINE, timeout_s=folder.build_timeout_s,
                        solution_packages=folder.solution_packages)


# ---------------------------------------------------------------- episodes


def _policies(task: TaskFolder, network: str, verifier_network: str | None) -> tuple[str, str]:
    """(the agent's, the tests') network policy: the task.toml's where it names one, else the
    run's; the tests' default is "registries" when test.sh installs its runner, else "none".
    A task may not give itself the host's network: only a run on "host" has it."""
    network = egress.check_policy(network, f"task {task.name}: the run's network")
    if verifier_network is not None:
        verifier_network = egress.check_policy(verifier_network, f"task {task.name}: the run's verifier_network")
    agent = task.network or network
    tests = task.verifier_network or verifier_network or ("registries" if images.needs_tools(task.path) else "none")
    for asked, what in ((task.network, "[environment] network"), (task.verifier_network, "[verifier] network")):
        if asked == "host" and network != "host":
            raise TaskFolderError(f"task {task.name}: {what} = 'host' needs a run on the host's network (network='host'), "
                                  f"this run's is {network!r}")
    if agent == "host":
        tests = "host"  # a container started on the host's network keeps it for its tests
    elif tests == "host":
        raise TaskFolderError(f"task {task.name}: tests on the host's network need the agent's on it too (network='host')")
    return agent, tests


def _agent_offline_env(network: str) -> dict[str, str]:
    """The container's variables: uv offline where the agent has no network at all, so it reads what the image holds
    instead of failing to fetch (the tests get OFFLINE_ENV whatever the policy: their tools are in the image)."""
    if network == "none":
        return dict(OFFLINE_ENV)
    keep = ("PIP_DISABLE_PIP_VERSION_CHECK", "PIP_NO_INPUT", "DEBIAN_FRONTEND", "UV_NO_PROGRESS", "UV_LINK_MODE")
    return {k: v for k, v in OFFLINE_ENV.items() if k in keep}


def _split_host(host_port: str) -> tuple[str, int]:
    host, _, port = host_port.rpartition(":")
    return host, int(port)


def _shown(result: engine_mod.Exec) -> str:
    """Exit status and output of a command, one line, at most OUTPUT_CHARS."""
    out = result.output.rstrip("\n").replace("\n", "\\n")
    head = f"[exit {result.exit_code}] "
    if result.output_bytes > len(result.output.encode("utf-8", "replace")):
        head += f"({result.output_bytes} bytes, start and end shown) "
    room = OUTPUT_CHARS - len(head)
    if len(out) > room:
        out = out[: room - 40] + " ... " + out[-35:]
    return head + out


_LIVE: dict[str, tuple[engine_mod.Engine, bool]] = {}  # containers and pods this process started, not yet removed
_GATES: dict[str, egress.Gate] = {}  # the egress proxy of each live container or pod that has one


def _remove_later(engine: engine_mod.Engine, name: str, pod: bool = False) -> None:
    _LIVE.pop(name, None)
    gate = _GATES.pop(name, None)
    if gate is not None:
        gate.close()
    remove = engine.remove_pod if pod else engine.remove
    try:
        threading.Thread(target=remove, args=(name,), daemon=True).start()
    except RuntimeError:  # the interpreter is shutting down: no new threads
        remove(name)


@atexit.register
def _remove_live() -> None:
    """Containers (and pods) of episodes still open when the process exits go with them."""
    for name, (engine, pod) in list(_LIVE.items()):
        (engine.remove_pod if pod else engine.remove)(name)
    for gate in list(_GATES.values()):
        gate.close()


@dataclasses.dataclass
class _Episode:
    step: int = 0  # index of the task's step under way
    turns: int = 0  # the model's turns in this step
    command_s: float = 0.0  # time this step's commands took, against its agent timeout_sec
    rewards: list = dataclasses.field(default_factory=list)  # the finished steps' rewards
    container: str | None = None
    pod: str | None = None  # the pod of a task with sidecar services (removed with them all)
    workdir: str = "/"
    test_output: str | None = None  # what the last test.sh printed (for reports)
    gate: egress.Gate | None = None  # its egress proxy (network policy "registries"); its log outlives the episode
    _finalizer: Any = None

    @property
    def refused(self) -> list[str]:
        """`host:port` of every request the episode's proxy refused, in order, each once."""
        return list(dict.fromkeys(f"{a.host}:{a.port}" for a in (self.gate.asked if self.gate else ()) if not a.allowed))

    def close(self, engine: engine_mod.Engine) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self.container is not None or self.pod is not None:
            _remove_later(engine, self.pod or self.container, pod=self.pod is not None)
            self.container = self.pod = None


class TerminalTaskDomain(Domain):
    answer_format = f"a bash script (a turn whose last line is {DONE} ends the step)"

    def __init__(self, task: TaskFolder, split: str = "train", version: int = 0,
                 engine: engine_mod.Engine | None = None, network: str = "none", verifier_network: str | None = None) -> None:
        self.folder = task
        self.engine = engine or _ENGINE
        self.splits = (splits.check_split(split),)
        self.network, self.verifier_network = _policies(task, network, verifier_network)
        steps = task.steps
        self._instruct_prompt = (f"{INSTRUCT_PROTOCOL}"
                                 + (f" The task has {len(steps)} steps, one after another in the same environment; "
                                    f"each is checked when you end it with {DONE}, then the next is shown."
                                    if len(steps) > 1 else "")
                                 + (f"\n\nTask:\n{steps[0].instruction}" if len(steps) == 1
                                    else f"\n\nStep 1 of {len(steps)}:\n{steps[0].instruction}"))
        if len(steps) == 1:
            self._prompts = (f"{PROTOCOL}\n\nTask:\n{steps[0].instruction}\n\n$ ",)
        else:
            self._prompts = tuple(
                (f"{PROTOCOL} The task has {len(steps)} steps, one after another in the same environment; each is "
                 f"checked when you end it with {DONE}, then the next is shown.\n\n" if i == 0 else "")
                + f"Step {i + 1} of {len(steps)}:\n{step.instruction}\n\n$ " for i, step in enumerate(steps))
        self._turns = tuple(((step.solution + "\n") if step.solution else "") + DONE for step in steps)
        self._instruct_turns = tuple(FENCE.demonstrate(turn) for turn in self._turns)
        self.image = images.tag_for(task.name, task.path, task.solution_packages)
        self._service_images = images.service_images(task.name, task.path) if task.services else {}
        self._config: dict | None = None  # the image's config, read on the first episode
        self.spec = DomainSpec(
            id=f"rlpt/{FAMILY}-{task.name}-v{version}",
            family=FAMILY,
            difficulty=task.difficulty,
            tags=("terminal", "shell", "container", "tool-use", "multi-turn", "tbench", *task.tags)
                 + (("multi-step",) if len(steps) > 1 else ()) + ((f"network-{self.network}",) if self.network != "none" else ()),
            max_prompt_chars=max(len(p) for p in self._prompts),
            max_answer_chars=max(MAX_ANSWER_CHARS, *(len(t) for t in self._turns)),
            max_instruct_prompt_chars=max(len(self._instruct_prompt), *(len(p) for p in self._prompts)),
            max_instruct_answer_chars=max(MAX_ANSWER_CHARS, *(len(t) for t in self._instruct_turns)),
            description=f"Terminal-Bench-style task '{task.name}' ({task.path}), in its own container, graded by its tests"
                        + (f" after each of its {len(steps)} steps" if len(steps) > 1 else ""),
            max_turns=task.max_turns,
        )

    def sample(self, rng: np.random.Generator) -> Problem:
        return Problem(
            key=f"tbench:{self.folder.name}:" + "\n".join(step.instruction for step in self.folder.steps),
            prompt=self._prompts[0],
            demonstration=self._turns[-1],
            hidden=_Episode(),  # fresh per episode: its container starts on the first turn
            retry_cue="$ ",
            demonstration_turns=self._turns,
            instruct=Instruct(self._instruct_prompt, self._instruct_turns[-1],
                              demonstration_turns=self._instruct_turns),
        )

    def sample_in_split(self, rng: np.random.Generator, split: str) -> Problem:
        if splits.check_split(split) not in self.splits:
            raise ValueError(f"{self.spec.id} offers only the {self.splits[0]!r} split, not {split!r}")
        return self.sample(rng)

    # ---------------------------------------------------------- container

    def _lifetime_s(self) -> float:
        agent = sum(s.agent_timeout_s or s.command_timeout_s * s.max_turns for s in self.folder.steps)
        verify = sum(s.verifier_timeout_s for s in self.folder.steps)
        return agent + verify + 3600.0  # then it removes itself, whatever happens here

    def _start(self, episode: _Episode) -> str | None:
        """Starts the episode's container; returns why it cannot, or None."""
        if episode.container is not None:
            return None
        if self._config is None:  # once per domain: the tag names the image's content
            if not self.engine.image_exists(self.image):
                return (f"the image of task {self.folder.name} is not built: run "
                        f"`python -m environments build {self.folder.path}` before training")
            try:
                self._config = self.engine.image_config(self.image)
            except engine_mod.EngineError as e:
                return str(e)
        config = self._config
        name = f"rlpt-{self.folder.name[:40]}-{uuid.uuid4().hex[:10]}"
        host_network = self.network == "host"
        try:
            if self.folder.services:
                episode.pod = self.engine.create_pod(name + "-pod", host_network=host_network)
                _LIVE[episode.pod] = (self.engine, True)
                # An episode dropped mid-way (a reset, a crashed rollout) still frees its containers.
                episode._finalizer = weakref.finalize(episode, _remove_later, self.engine, episode.pod, True)
                if self.network == "registries":  # before the services: they may install at start too
                    self._open_gate(episode, "registries", pid=self.engine.pod_pid(episode.pod))
                self._start_services(episode.pod, name)
            # Offline, uv and pip read what the image holds instead of failing to fetch.
            container = self.engine.start(self.image, name, self.folder.resources, self._lifetime_s(),
                                          env={**_agent_offline_env(self.network), **dict(self.folder.environment_env)},
                                          keep_entrypoint=bool(config.get("Entrypoint")), pod=episode.pod,
                                          host_network=host_network)
        except engine_mod.EngineError as e:
            episode.close(self.engine)
            return str(e)
        episode.container = container
        if episode.pod is None:
            _LIVE[container] = (self.engine, False)
            episode._finalizer = weakref.finalize(episode, _remove_later, self.engine, container)
        episode.workdir = self.folder.workdir or config.get("WorkingDir") or "/"
        try:
            if self.network == "registries" and episode.gate is None:
                self._open_gate(episode, "registries")
            # apt retries a download it cannot make with growing delays; with no network it fails at once instead.
            # Each sidecar service answers at its name, as on a compose network.
            hosts = "".join(f"127.0.0.1 {svc.name}\n" for svc in self.folder.services)
            prepare = self.engine.exec(container, (f"printf '%s' {shlex.quote(hosts)} >> /etc/hosts && " if hosts else "") +
                                       f"mkdir -p {LOGS_PATH}/agent {LOGS_PATH}/verifier {shlex.quote(episode.workdir)} && "
                                       f"chmod 777 {LOGS_PATH} {LOGS_PATH}/agent && "
                                       "{ ! test -d /etc/apt/apt.conf.d || echo 'Acquire::Retries \"0\";' > /etc/apt/apt.conf.d/99rlpt-offline; }\n"
                                       + (egress.proxy_config_script() if "registries" in (self.network, self.verifier_network) else ""),
                                       60, user="0")
            if prepare.exit_code != 0:
                raise engine_mod.EngineError(f"cannot prepare {LOGS_PATH}: {prepare.output.strip()[-200:]}")
            self._wait_healthy(container, self.folder.healthcheck)
            self._begin_step(episode)
        except engine_mod.EngineError as e:
            episode.close(self.engine)
            return str(e)
        return None

    def _start_services(self, pod: str, name: str) -> None:
        """The task's sidecar services, each started once those it depends on answer their healthchecks."""
        for svc in self.folder.services:
            # On the episode's network: with none, uv and pip use what the image holds (see images.uv_run_script).
            proxy = self._proxy_env() if self.network == "registries" else {}
            cid = self.engine.start_service(self._service_images[svc.name], f"{name}-{svc.name}"[:120], pod,
                                            env={**_agent_offline_env(self.network), **proxy, **dict(svc.env)},
                                            command=svc.command)
            try:
                self._wait_healthy(cid, svc.healthcheck)
            except engine_mod.EngineError:
                said = [ln.strip() for ln in self.engine.logs(cid).splitlines() if ln.strip()]
                needs = needs_network("\n".join(said))
                why = (f"it needs the network, which episodes do not have ({needs[:120]})" if needs
                       else f"its log ends: {said[-1][:160]}" if said else f"healthcheck: {svc.healthcheck.command[:120]}")
                raise engine_mod.EngineError(f"service {svc.name!r} did not become healthy in "
                                             f"{svc.healthcheck.wait_s:g}s; {why}") from None

    def _wait_healthy(self, container: str, check: engine_mod.Healthcheck | None) -> None:
        if check is None:
            return
        wait_s = min(check.wait_s, MAX_TIMEOUT_S)
        deadline = time.monotonic() + wait_s
        while self.engine.exec(container, check.command + "\n", max(1.0, check.interval_s), user="0").exit_code != 0:
            if time.monotonic() > deadline:
                raise engine_mod.EngineError(f"the task's healthcheck ({check.command}) did not pass in {wait_s:g}s")
            time.sleep(check.interval_s)

    def _begin_step(self, episode: _Episode) -> None:
        """The step's workdir/ files go into the WORKDIR and its setup.sh runs there (as the
        agent), then its healthcheck must pass: all before the model's first turn of it."""
        step = self.folder.steps[episode.step]
        if step.workdir_files is not None:
            self.engine.copy_in(episode.container, step.workdir_files, episode.workdir, merge=True)
            if os.path.isfile(os.path.join(step.workdir_files, "setup.sh")):
                ran = self._agent_exec(episode, "bash ./setup.sh\n", step.verifier_timeout_s)
                if ran.exit_code != 0:
                    raise engine_mod.EngineError(f"step {step.name!r}: its workdir/setup.sh failed "
                                                 f"(exit {ran.exit_code}): {ran.output.strip()[-200:]}")
        self._wait_healthy(episode.container, step.healthcheck)

    def _command_limit(self, episode: _Episode) -> float:
        step = self.folder.steps[episode.step]
        left = float("inf") if step.agent_timeout_s is None else step.agent_timeout_s - episode.command_s
        return max(0.0, min(step.command_timeout_s, left))

    def _exec(self, episode: _Episode, script: str, timeout_s: float, env: dict[str, str] | None = None,
              user: str | None = None) -> engine_mod.Exec:
        return self.engine.exec(episode.container, script, timeout_s, env=env, workdir=episode.workdir, user=user)

    def _agent_exec(self, episode: _Episode, script: str, timeout_s: float, env: dict[str, str] | None = None) -> engine_mod.Exec:
        """A command of the agent's side (a model turn, a reference solution, a step's setup.sh), under the run's policy."""
        if self.network == "registries":
            env = {**self._proxy_env(), **(env or {})}
            episode.gate.policy = "registries"
        return self._exec(episode, script, timeout_s, env=env, user=self.folder.agent_user)

    def _proxy_env(self) -> dict[str, str]:
        return egress.proxy_env(local=tuple(svc.name for svc in self.folder.services))

    def _open_gate(self, episode: _Episode, policy: str, pid: int | None = None) -> egress.Gate:
        """The episode's egress proxy (opened once, inside its container's or pod's network namespace)."""
        if episode.gate is None:
            owner = episode.pod or episode.container
            try:
                episode.gate = egress.Gate(pid or self.engine.pid(owner), policy, label=owner[:40])
            except (OSError, ValueError) as e:
                raise engine_mod.EngineError(str(e)) from None
            _GATES[owner] = episode.gate
        episode.gate.policy = policy
        return episode.gate

    def grade(self, task: Problem, answer: str) -> Grade | ToolReply:
        episode: _Episode = task.hidden
        episode.turns += 1
        step = self.folder.steps[episode.step]
        found = answers.final_block(answer)
        many = answers.several(found)
        answer = found.text
        lines = answer.split("\n")
        done = lines[-1].strip() == DONE
        command = "\n".join(lines[:-1]).strip() if done else answer
        why = self._start(episode)
        if why is not None:
            return Grade(Verdict.SANDBOX_ERROR, 0.0, f"container failure: {why}")
        if "\x00" in command or many:
            reply = ToolReply(Verdict.MALFORMED, answers.several_feedback(many, "fenced blocks") + " per turn" if many
                              else "a shell script cannot contain a NUL byte")
            return reply if not self._last_turn(episode) else self._end_step(episode)
        if command and self._command_limit(episode) > 0:
            limit = self._command_limit(episode)
            try:
                result = self._agent_exec(episode, command + "\n", limit)
            except engine_mod.EngineError as e:
                episode.close(self.engine)
                return Grade(Verdict.SANDBOX_ERROR, 0.0, f"container failure: {e}")
            refused = episode.gate.take_refused() if episode.gate is not None else []
            if refused:  # one line the model sees, before the command's own output
                result = dataclasses.replace(result, output=f"[network: {episode.gate.refusal(*_split_host(refused[0]), brief=True)}"
                                             + (f" (and {len(refused) - 1} more)" if len(refused) > 1 else "") + "]\n" + result.output)
            episode.command_s += result.seconds
            if result.timed_out and limit < step.command_timeout_s:
                episode.command_s = float(step.agent_timeout_s or 0.0)  # the agent's time is what ran out
            if not done and not self._last_turn(episode) and self._command_limit(episode) > 0:
                # (when the agent's timeout_sec is spent, the tests run now, as in Terminal-Bench)
                if result.timed_out:
                    return ToolReply(Verdict.ERROR, f"timed out after {limit:g}s; " + _shown(result), "bash")
                return ToolReply(Verdict.TOOL, _shown(result), "bash")
        return self._end_step(episode)

    def _last_turn(self, episode: _Episode) -> bool:
        return episode.turns >= self.folder.steps[episode.step].max_turns

    def _end_step(self, episode: _Episode) -> Grade | ToolReply:
        """The step's tests judge it; then the next step begins (a non-scored reply
        holding its instruction), or the episode ends with the task's grade."""
        step = self.folder.steps[episode.step]
        grade = self._verify(episode)
        if grade.infra_error or len(self.folder.steps) == 1:
            episode.close(self.engine)
            return grade
        episode.rewards.append(grade.reward)
        stop = step.min_reward is not None and grade.reward < step.min_reward
        if stop or episode.step + 1 == len(self.folder.steps):
            episode.close(self.engine)
            return self._overall(episode, stopped_at=step.name if stop and episode.step + 1 < len(self.folder.steps) else None)
        episode.step += 1
        episode.turns, episode.command_s = 0, 0.0
        try:
            self._begin_step(episode)
        except engine_mod.EngineError as e:
            episode.close(self.engine)
            return Grade(Verdict.SANDBOX_ERROR, 0.0, f"container failure before step {episode.step + 1}: {e}")
        return ToolReply(Verdict.TOOL, f"step {episode.step} of {len(self.folder.steps)} is over", "tests",
                         task_text=self._prompts[episode.step])

    def _overall(self, episode: _Episode, stopped_at: str | None) -> Grade:
        steps = self.folder.steps
        rewards = episode.rewards + [0.0] * (len(steps) - len(episode.rewards))  # steps not reached score 0
        if self.folder.reward_strategy == "final":
            reward = rewards[-1]
        else:
            counted = [r for r, s in zip(rewards, steps) if s.contributes] or rewards
            reward = sum(counted) / len(counted)
        per_step = ", ".join(f"{s.name} {r:g}" for s, r in zip(steps, episode.rewards))
        said = f"steps: {per_step}" + (f"; stopped after {stopped_at!r} (below its min_reward)" if stopped_at else "")
        return passed(said) if reward == 1.0 else failed(f"{self.folder.reward_strategy} reward {reward:g} ({said})", reward)

    def run_reference(self, episode: _Episode, timeout_s: float | None = None) -> engine_mod.Exec:
        """Runs the current step's solution/ as Harbor's oracle does: copied to /solution,
        `bash /solution/solve.sh`, for the step's agent timeout_sec (or `timeout_s`, if smaller)."""
        step = self.folder.steps[episode.step]
        self._exec(episode, f"rm -rf {SOLUTION_PATH}\n", 60, user="0")
        self.engine.copy_in(episode.container, step.solution_dir, SOLUTION_PATH)
        budget = min(step.agent_timeout_s or MAX_TIMEOUT_S, timeout_s or MAX_TIMEOUT_S)
        return self._agent_exec(episode, f"bash {SOLUTION_PATH}/solve.sh\n", budget, env=dict(self.folder.solution_env))

    def run_references(self, episode: _Episode, timeout_s: float | None = None) -> tuple[Grade, str, bool]:
        """The oracle through every step: each step's reference, then its tests. Returns the
        task's grade, what the references printed, and whether one ran past its time."""
        outputs, timed_out = [], False
        while True:
            ran = self.run_reference(episode, timeout_s)
            outputs.append(ran.output)
            timed_out |= ran.timed_out
            result = self._end_step(episode)
            if isinstance(result, Grade):
                return result, "\n".join(outputs), timed_out

    def _verify(self, episode: _Episode) -> Grade:
        try:
            return self._verify_in(episode)
        except engine_mod.EngineError as e:
            return Grade(Verdict.SANDBOX_ERROR, 0.0, f"container failure while testing: {e}")

    def _verify_in(self, episode: _Episode) -> Grade:
        ctr = episode.container
        step = self.folder.steps[episode.step]
        # Whatever the model left at these paths is replaced by the task's own files.
        self._exec(episode, f"rm -rf {TESTS_PATH} {LOGS_PATH}/verifier; mkdir -p {LOGS_PATH}/verifier {LOGS_PATH}/agent\n", 60, user="0")
        for i, tests in enumerate(step.tests):  # the task's tests/, then the step's over them
            self.engine.copy_in(ctr, tests, TESTS_PATH, merge=i > 0)
        env = {**OFFLINE_ENV, "TEST_DIR": TESTS_PATH, "TESTS_DIR": TESTS_PATH, "LOGS_DIR": LOGS_PATH,
               "APP_DIR": episode.workdir, **dict(step.verifier_env)}
        if episode.gate is not None:
            episode.gate.take_refused()  # what the agent was refused is not the tests'
        if self.verifier_network == "registries":
            self._open_gate(episode, "registries")
            env = {**self._proxy_env(), **env}
        elif episode.gate is not None:
            episode.gate.policy = "none"  # the agent's proxy stays up (its background jobs use it) but lets nothing out
        result = self._exec(episode, f"bash {TESTS_PATH}/test.sh\n", step.verifier_timeout_s, env=env,
                            user=self.folder.verifier_user)
        refused = episode.gate.take_refused() if episode.gate is not None else []
        episode.test_output = result.output
        if result.timed_out:
            return Grade(Verdict.TIMEOUT, 0.0, f"the tests ran past {step.verifier_timeout_s:g}s")
        tail = result.output.strip().splitlines()[-1:]
        said = f" (tests said: {tail[0][:160]})" if tail else ""
        reward = self._reward_file(ctr)
        if isinstance(reward, Grade):
            return reward
        if reward is None:
            reward = 1.0 if result.exit_code == 0 else 0.0
        if reward == 1.0:
            return passed("the tests passed")
        broken = harness_failure(result.output)
        if broken is None and refused and not tests_judged(result.output):
            broken = f"the tests reached for {', '.join(refused[:3])}, which network policy {self.verifier_network!r} refuses"
        if broken is not None:
            # The tests never judged the work: infrastructure, masked, never the model's FAIL.
            return verifier_error(f"the tests could not run here: {broken}")
        if result.exit_code == 137 and not result.timed_out:
            return Grade(Verdict.OOM, 0.0, "the tests were killed (out of memory)")
        return failed(f"the tests gave reward {reward:g} (exit {result.exit_code}){said}", reward)

    def _reward_file(self, container: str) -> float | Grade | None:
        for name in ("reward.txt", "reward.json"):
            data = self.engine.read_file(container, f"{LOGS_PATH}/verifier/{name}")
            if data is None:
                continue
            text = data.decode("utf-8", "replace").strip()
            try:
                value = json.loads(text) if name.endswith(".json") else float(text)
                if isinstance(value, dict):
                    value = value.get("reward", next(iter(value.values()), None))
                reward = float(value)
            except (ValueError, TypeError, StopIteration, json.JSONDecodeError):
                return Grade(Verdict.ERROR, 0.0, f"the tests wrote an unreadable {name}: {text[:40]!r}")
            if not 0.0 <= reward <= 1.0:
                return Grade(Verdict.ERROR, 0.0, f"the tests wrote a reward outside [0, 1]: {reward}")
            return reward
        return None


# Output of a test run that broke before judging anything: the test script's own
# commands missing or pointed at paths that do not exist, the network the tests
# try to reach, the test runner or the Python it asks for absent. A line from bash
# about test.sh itself names the script, so a missing command the model's own
# program runs (reported against its own file) is not matched.
_HARNESS_FAILURES = (
    (re.compile(r"tests/test\.sh: line \d+: ([^:\n]+): command not found"), "test.sh needs {0!r}, which is not installed"),
    (re.compile(r"tests/test\.sh: line \d+: (?:cd|source|\.): (/[^:\n]*): No such file or directory"),
     "test.sh uses the path {0!r}, which does not exist in the task's image"),
    (re.compile(r"tests/test\.sh: (/[^:\n]*): No such file or directory"), "test.sh runs {0!r}, which does not exist here"),
    (re.compile(r"(Could not resolve host|Temporary failure in name resolution|Network is unreachable|"
                r"No matching distribution found for [^\s]+|Failed to fetch: `[^`]+`|"
                r"Because [^\n]+ was not found in the cache|Unable to locate package [^\s]+)"), "the tests need the network ({0})"),
    (re.compile(r"(No interpreter found for Python [^\s]+|A managed Python download is available, but Python downloads are set to 'never')"),
     "the tests ask for a Python the image lacks ({0})"),
    (re.compile(r"No module named '?(pytest|uv)'?"), "the test runner {0!r} is not installed"),
    (re.compile(r"ERROR: file or directory not found: (/[^\s]+)"), "pytest found no tests at {0!r}"),
)


# A test runner's own summary: the tests ran and judged, whatever failed before them
# (test.sh's `curl .../install.sh | sh` prints "Could not resolve host" offline even
# when the tools it would fetch are already in the image).
_RUNNER_VERDICT = re.compile(r"^(=+ )?(\d+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)(, )?)+"
                             r"( in [\d.]+s)|^=+ no tests ran in [\d.]+s", re.M)


def tests_judged(output: str) -> bool:
    """Whether the test output holds a test runner's verdict (a pytest summary line)."""
    return _RUNNER_VERDICT.search(output) is not None


def harness_failure(output: str) -> str | None:
    """Why a failed test run never judged the work (see _HARNESS_FAILURES), or None
    when a test runner's verdict is in the output (`tests_judged`)."""
    if tests_judged(output):
        return None
    for pattern, why in _HARNESS_FAILURES:
        match = pattern.search(output)
        if match:
            return why.format(match.group(1).strip())
    return None


# What a command printed when it reached for the network (apt, pip, uv, curl, wget, git).
_NETWORK = re.compile(r"(Temporary failure resolving '[^']+'|Could not resolve host:? [^\s]+|Could not resolve '[^']+'|"
                      r"Temporary failure in name resolution|Network is unreachable|Failed to fetch: `[^`]+`|"
                      r"unable to resolve host address '[^']+'|Could not connect to [^\s]+|"
                      r"Failed to establish a new connection[^\n]{0,80}|"
                      r"Because [^\n]{1,80} (?:was|were) not found in the (?:package registry|cache)[^\n]{0,40}|"
                      r"the network is disabled[^\n]{0,60})")


_LOOPBACK = re.compile(r"localhost|127\.0\.0\.1")


def needs_network(output: str) -> str | None:
    """The first sign in `output` of a command that needed the network, or None. uv's
    installer (`curl https://astral.sh/uv/...`) does not count (the image has uv), nor
    a connection refused on this machine's own loopback (a server that did not start)."""
    for line in output.splitlines():
        m = _NETWORK.search(line)
        if m and "astral.sh" not in m.group(1) and not _LOOPBACK.search(line):
            return m.group(1)
    return None


def do_nothing(domain: TerminalTaskDomain, task: Problem) -> Grade:
    """The grade of an episode whose every turn is a bare DONE (each step ended at once)."""
    while not isinstance(result := domain.grade(task, DONE), Grade):
        pass
    return result


def validate_task(domain: TerminalTaskDomain) -> str | None:
    """Why the task's tests cannot be trusted here, or None: its reference solution
    (if it has one, run as Harbor's oracle runs it) must PASS, and a do-nothing
    answer must be judged FAIL by the tests themselves (not PASS, and not a
    harness that never ran)."""
    rng = np.random.default_rng(0)
    if domain.folder.has_reference:
        task = domain.sample(rng)
        episode: _Episode = task.hidden
        why = domain._start(episode)
        if why is not None:
            return f"its container cannot start: {why}"
        try:
            grade, output, timed_out = domain.run_references(episode)
        except engine_mod.EngineError as e:
            episode.close(domain.engine)
            return f"its reference solution cannot run: {e}"
        if grade.verdict is not Verdict.PASS:
            if episode.refused:
                return (f"its reference solution needs {', '.join(episode.refused[:3])}, which network policy "
                        f"{domain.network!r} refuses")
            needs = needs_network(output)
            if needs is not None and domain.network != "host":
                beyond = "the network beyond the package registries" if domain.network == "registries" else \
                    "the network, which episodes do not have"
                return f"its reference solution needs {beyond} ({needs[:120]})"
            if timed_out:
                return f"its reference solution ran past the agent's timeout ({grade.feedback[:160]})"
            said = [ln.strip() for ln in output.splitlines() if ln.strip()]
            tail = f"; the reference printed last: {said[-1][:160]}" if said else ""
            return f"its reference solution is {grade.verdict.value}, not PASS: {grade.feedback[:200]}{tail}"
    grade = do_nothing(domain, domain.sample(rng))
    if grade.verdict is Verdict.PASS:
        return "its tests pass a do-nothing answer"
    if grade.verdict is not Verdict.FAIL:
        return f"a do-nothing answer is {grade.verdict.value}, not a FAIL by the tests: {grade.feedback[:200]}"
    return None


def register_task_folder(path: str, split: str = "train", version: int = 0, build: bool = True, validate: bool = True,
                         engine: engine_mod.Engine | None = None, solution_packages: bool = False,
                         network: str = "none", verifier_network: str | None = None) -> str:
    """Loads, builds (cached by content) and registers one task folder as
    `rlpt/tbench-<name>-v<version>`; returns the id. Raises TaskFolderError for a
    malformed folder, a failed build, or (with `validate`, see `validate_task`) a
    task whose tests cannot be trusted here: a task that could only ever score 0
    never reaches training as a silent zero-reward domain."""
    domain = TerminalTaskDomain(load_task_folder(path, solution_packages), split=split, version=version, engine=engine,
                                network=network, verifier_network=verifier_network)
    if build or validate:
        built = build_task(domain.folder, domain.engine)
        if built.error is not None:
            raise TaskFolderError(f"task {domain.folder.name} cannot be built: {built.error} ({path})")
    if validate:
        why = validate_task(domain)
        if why is not None:
            raise TaskFolderError(f"task {domain.folder.name} fails validation: {why} ({path})")
    registry.register(domain)
    return domain.spec.id


def register_tasks(root: str, split: str = "train", version: int = 0, skip_unavailable: bool = False,
                   build: bool = True, validate: bool = True, solution_packages: bool = False,
                   network: str = "none", verifier_network: str | None = None) -> list[str]:
    """Registers every subfolder of `root` (sorted) as a task; returns the ids. With
    skip_unavailable, folders that cannot load, build or validate are logged with the
    reason and skipped instead of raising."""
    if not os.path.isdir(root):
        raise TaskFolderError(f"no such task root directory: {root}")
    ids = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path) or name.startswith("."):
            continue
        try:
            ids.append(register_task_folder(path, split=split, version=version, build=build, validate=validate,
                                            solution_packages=solution_packages, network=network,
                                            verifier_network=verifier_network))
        except TaskFolderError as e:
            if not skip_unavailable:
                raise
            log.warning("terminal_tasks: skipping %s: %s", path, e)
    return ids


# The shipped tasks are registered at import without building (no container engine
# is touched on import); `python -m environments build` builds them, and
# tests/environments/test_terminal_tasks.py validates them.
BUILTIN_IDS = register_tasks(DATA_ROOT, build=False, validate=False) if os.path.isdir(DATA_ROOT) else []
