"""A task's docker-compose file as Harbor reads it: the task's own container is the
service `main` (Harbor configures its image, command and limits), and every other
service is a sidecar the episode starts beside it (an API server, an MCP server).

Episodes run the services in one pod with no network: they share a loopback
interface, so `main` reaches `http://api-server:5000` through a hosts entry
naming each service 127.0.0.1. What this subset reads of each sidecar: `build`
(a context folder under environment/, and its `dockerfile`), `image` (when it
has no build: a local stand-in name, `environments.containers.bases`),
`environment`, `command`, `healthcheck`, `depends_on`; `expose`, `ports`,
`networks`, `restart`, `container_name` and `hostname` have no meaning in one
pod and are ignored. Of `main` it reads `environment` and `depends_on`; its
build, image, command, volumes, network and limits are the task's (task.toml).
A key that would change what runs (a sidecar's `volumes`, `privileged`,
`network_mode`, ...) is refused with its name, not silently dropped.
`${VAR}` and `${VAR:-default}` take the default (empty when none): the episode
has no host secrets to give a service.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from typing import Any

import yaml

from environments.containers.engine import Healthcheck

MAIN = "main"
_IGNORED = {"expose", "ports", "networks", "restart", "container_name", "hostname", "labels", "logging", "stdin_open", "tty"}
_SIDECAR_KEYS = {"build", "image", "environment", "command", "healthcheck", "depends_on", "working_dir", *_IGNORED}
_MAIN_KEYS = {"build", "image", "command", "environment", "depends_on", "volumes", "network_mode", "deploy",
              "entrypoint", "working_dir", *_IGNORED}


class ComposeError(ValueError):
    """A compose file this subset cannot run as it is written."""


@dataclasses.dataclass(frozen=True)
class Service:
    name: str
    context: str | None  # build context folder (absolute), or None for an image
    dockerfile: str | None  # relative to the context
    image: str | None
    env: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] | None = None
    healthcheck: Healthcheck | None = None
    depends_on: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Compose:
    services: tuple[Service, ...]  # the sidecars, in start order (each after what it depends on)
    main_env: tuple[tuple[str, str], ...] = ()


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _interpolate(text: str) -> str:
    return _VAR.sub(lambda m: m.group(2) or "", text.replace("$$", "\0")).replace("\0", "$")


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = re.fullmatch(r"\s*((?:\d+(?:\.\d+)?(?:h|ms|m|s|us|ns))+)\s*", str(value))
    if not m:
        raise ComposeError(f"{where}: a duration like '2s' or '1m30s', got {value!r}")
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    return sum(float(n) * scale[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)", m.group(1)))


def _env(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if isinstance(value, dict):
        items = [(str(k), "" if v is None else str(v)) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(str(e).partition("=")[0], str(e).partition("=")[2]) for e in value]
    else:
        raise ComposeError(f"{where}: environment must be a list of NAME=value or a mapping, got {value!r}")
    return tuple((k, _interpolate(v)) for k, v in items)


def _healthcheck(value: Any, where: str) -> Healthcheck | None:
    if not isinstance(value, dict) or value.get("disable"):
        return None
    test = value.get("test")
    if isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL", "NONE"):
        if test[0] == "NONE":
            return None
        command = " ".join(test[1:]) if test[0] == "CMD-SHELL" else shlex.join(str(t) for t in test[1:])
    elif isinstance(test, str):
        command = test
    else:
        raise ComposeError(f"{where}: healthcheck.test must be a string or a [CMD, ...] list, got {test!r}")
    return Healthcheck(command, _seconds(value.get("interval", "30s"), where), int(value.get("retries", 3)),
                       _seconds(value.get("start_period", 0), where))


def _depends(value: Any) -> tuple[str, ...]:
    if isinstance(value, dict):
        return tuple(str(k) for k in value)
    if isinstance(value, list):
        return tuple(str(k) for k in value)
    return ()


def load(path: str) -> Compose:
    """The compose file at `path` (in a task's environment/ folder); ComposeError names what it cannot run."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ComposeError(f"cannot read {path} as YAML: {e}") from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict):
        raise ComposeError(f"{path}: no services mapping")
    env_dir = os.path.dirname(os.path.abspath(path))
    sidecars: dict[str, Service] = {}
    main_env: tuple[tuple[str, str], ...] = ()
    for name, spec in services.items():
        where = f"{path}: services.{name}"
        spec = spec or {}
        if not isinstance(spec, dict):
            raise ComposeError(f"{where} must be a mapping, got {spec!r}")
        allowed = _MAIN_KEYS if name == MAIN else _SIDECAR_KEYS
        unknown = sorted(set(spec) - allowed)
        if unknown:
            raise ComposeError(f"{where}: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not supported "
                               f"(a service here may set {', '.join(sorted(allowed - _IGNORED))})")
        if name == MAIN:
            main_env = _env(spec.get("environment"), where)
            continue
        build = spec.get("build")
        context = dockerfile = None
        if build is not None:
            build = {"context": build} if isinstance(build, str) else build
            if not isinstance(build, dict) or "context" not in build:
                raise ComposeError(f"{where}: build must be a folder or {{context, dockerfile}}, got {build!r}")
            context = os.path.normpath(os.path.join(env_dir, _interpolate(str(build["context"]))))
            if not os.path.isdir(context):
                raise ComposeError(f"{where}: build context {build['context']!r} is not a folder under environment/")
            dockerfile = str(build.get("dockerfile", "Dockerfile"))
        elif not spec.get("image"):
            raise ComposeError(f"{where}: a service needs a build or an image")
        command = spec.get("command")
        if isinstance(command, str):
            command = ("sh", "-c", command)
        elif command is not None:
            command = tuple(str(c) for c in command)
        sidecars[name] = Service(name, context, dockerfile, None if context else _interpolate(str(spec["image"])),
                                 _env(spec.get("environment"), where), command,
                                 _healthcheck(spec.get("healthcheck"), where), _depends(spec.get("depends_on")))
    return Compose(_start_order(sidecars, path), main_env)


def _start_order(sidecars: dict[str, Service], path: str) -> tuple[Service, ...]:
    order: list[Service] = []
    state: dict[str, int] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise ComposeError(f"{path}: services depend on each other in a cycle: {' -> '.join(chain + (name,))}")
        state[name] = 1
        for dep in sidecars[name].depends_on:
            if dep == MAIN:
                raise ComposeError(f"{path}: services.{name} depends on main, which starts last")
            if dep not in sidecars:
                raise ComposeError(f"{path}: services.{name} depends on {dep!r}, which is not a service")
            visit(dep, chain + (name,))
        state[name] = 2
        order.append(sidecars[name])

    for name in sidecars:
        visit(name, ())
    return tuple(order)


def find(task_path: str) -> str | None:
    """The task's compose file, if it has one."""
    for name in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        path = os.path.join(task_path, "environment", name)
        if os.path.isfile(path):
            return path
    return None
