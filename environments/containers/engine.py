"""A thin, typed wrapper over the podman command line (no daemon, no registry).

Everything rlpt does with containers goes through `Engine`: build an image from
a folder, start a container for an episode, run a command in it, copy files in
and out, remove it. Each call is one `podman` process with a timeout; a failure
of the engine itself raises `EngineError` naming the command and podman's own
message, which callers report as infrastructure (never a model's FAIL).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time

PODMAN = os.environ.get("RLPT_PODMAN", "podman")
LABEL = "rlpt.episode"  # every episode container carries it (see `Engine.prune`)


class EngineError(RuntimeError):
    """The container engine failed (not the command run inside a container)."""


@dataclasses.dataclass(frozen=True)
class Resources:
    """Limits of one episode container (task.toml's [environment], else these)."""

    cpus: float = 1.0
    memory_mb: int = 2048
    processes: int = 1024
    open_files: int = 4096

    def flags(self) -> list[str]:
        return [f"--cpus={self.cpus:g}", f"--memory={self.memory_mb}m", f"--memory-swap={self.memory_mb}m",
                f"--pids-limit={self.processes}", f"--ulimit=nofile={self.open_files}:{self.open_files}",
                f"--ulimit=nproc={self.processes}:{self.processes}"]


@dataclasses.dataclass(frozen=True)
class Healthcheck:
    """A command polled in a container until it succeeds (task.toml's healthchecks,
    a compose service's): every `interval_s`, for `start_period_s` plus `retries`
    more intervals."""

    command: str
    interval_s: float = 2.0
    retries: int = 3
    start_period_s: float = 0.0

    @property
    def wait_s(self) -> float:
        return self.start_period_s + self.interval_s * (1 + self.retries)


@dataclasses.dataclass(frozen=True)
class Exec:
    """The result of a command run inside a container."""

    exit_code: int
    output: str  # stdout and stderr interleaved; over `limit` bytes, its first and last halves
    seconds: float
    timed_out: bool
    output_bytes: int  # before the cut


def available() -> str | None:
    """Why containers cannot run here, or None when they can."""
    if shutil.which(PODMAN) is None:
        return f"{PODMAN!r} is not installed (launch/setup_system.sh installs podman, buildah and mmdebstrap)"
    try:
        proc = subprocess.run([PODMAN, "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"podman info failed: {e}"
    if proc.returncode != 0:
        return f"podman info failed: {proc.stderr.strip()[-300:]}"
    return None


class Engine:
    """Podman, rootful, images in local storage only (`--pull=never` unless asked)."""

    def __init__(self, podman: str = PODMAN, pull: str = "never") -> None:
        if pull not in ("never", "missing", "always", "newer"):
            raise ValueError(f"pull must be one of never/missing/always/newer, got {pull!r}")
        self.podman = podman
        self.pull = pull

    def _call(self, args: list[str], timeout_s: float, input_bytes: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run([self.podman, *args], input=input_bytes, capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise EngineError(f"podman {args[0]} took over {timeout_s:g}s: podman {' '.join(args[:6])}") from None
        except OSError as e:
            raise EngineError(f"cannot run podman: {e}") from None
        if check and proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise EngineError(f"podman {args[0]} failed (exit {proc.returncode}): {(err or ['no message'])[-1][:400]}")
        return proc

    # ------------------------------------------------------------------ images

    def image_exists(self, tag: str) -> bool:
        return self._call(["image", "exists", tag], 60, check=False).returncode == 0

    def image_config(self, tag: str) -> dict:
        """The image's config: WorkingDir, Env, User, Cmd, Entrypoint."""
        out = self._call(["image", "inspect", "--format", "{{json .Config}}", tag], 60).stdout
        return json.loads(out or b"{}") or {}

    def tag(self, image: str, *names: str) -> None:
        self._call(["tag", image, *names], 60)

    def remove_image(self, tag: str) -> None:
        self._call(["rmi", "--force", tag], 120, check=False)

    def build(self, context: str, tag: str, timeout_s: float, dockerfile: str | None = None,
              log_path: str | None = None, build_args: dict[str, str] | None = None) -> tuple[bool, str]:
        """Builds `context` into `tag`; returns (ok, the build's output). The build
        has the host's network (package registries) and the engine's default limits."""
        args = ["build", f"--pull={self.pull}", "--layers", "--force-rm", "-t", tag]
        if dockerfile:
            args += ["-f", dockerfile]
        for k, v in (build_args or {}).items():
            args += ["--build-arg", f"{k}={v}"]
        args.append(context)
        log = open(log_path, "wb") if log_path else None
        try:
            proc = subprocess.Popen([self.podman, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                out += f"\nbuild took over {timeout_s:g}s (task.toml [environment] build_timeout_sec)\n".encode()
                proc.returncode = -1
        except OSError as e:
            raise EngineError(f"cannot run podman build: {e}") from None
        text = out.decode("utf-8", "replace")
        if log is not None:
            log.write(out)
            log.close()
        return proc.returncode == 0, text

    def import_rootfs(self, tarball: str, tag: str, changes: list[str]) -> None:
        args = ["import"]
        for c in changes:
            args += ["--change", c]
        self._call([*args, tarball, tag], 600)

    # -------------------------------------------------------------- containers

    def start(self, image: str, name: str, resources: Resources, lifetime_s: float, env: dict[str, str] | None = None,
              keep_entrypoint: bool = False, pod: str | None = None, host_network: bool = False) -> str:
        """Starts a detached container with no network but its own loopback (or in
        `pod`, sharing the pod's; or, with `host_network`, the host's network) that
        removes itself after `lifetime_s` even if this process dies; returns its id.
        With `keep_entrypoint` the image's ENTRYPOINT runs (services a task starts
        there) with `sleep <lifetime>` as its command, as Harbor runs tasks."""
        network = [f"--pod={pod}"] if pod else ["--network=host" if host_network else "--network=none"]
        args = ["run", "--detach", "--rm", "--pull=never", *network,
                "--name", name, "--label", f"{LABEL}=1", "--init", *resources.flags()]
        if not keep_entrypoint:
            args += ["--entrypoint", "sleep"]
        for k, v in (env or {}).items():
            args += ["--env", f"{k}={v}"]
        args += [image, *(["sleep"] if keep_entrypoint else []), f"{int(lifetime_s) + 1}"]
        return self._call(args, 120).stdout.decode().strip()

    def create_pod(self, name: str, host_network: bool = False) -> str:
        """A pod with no network (or the host's): its containers share one loopback interface."""
        network = "--network=host" if host_network else "--network=none"
        return self._call(["pod", "create", network, "--name", name, "--label", f"{LABEL}=1"], 120).stdout.decode().strip()

    def pod_pid(self, pod: str) -> int:
        """Starts `pod` (its infra container holds the pod's namespaces) and returns that container's pid."""
        self._call(["pod", "start", pod], 120)
        infra = self._call(["pod", "inspect", "--format", "{{.InfraContainerID}}", pod], 60).stdout.decode().strip()
        if not infra:
            raise EngineError(f"pod {pod} has no infra container")
        return self.pid(infra)

    def pid(self, container: str) -> int:
        """The host's pid of the container's first process (its namespaces are /proc/<pid>/ns/*)."""
        out = self._call(["inspect", "--format", "{{.State.Pid}}", container], 60).stdout.decode().strip()
        if not out.isdigit() or int(out) <= 0:
            raise EngineError(f"container {container} has no running process (podman inspect said {out[:60]!r})")
        return int(out)

    def start_service(self, image: str, name: str, pod: str, env: dict[str, str] | None = None,
                      command: tuple[str, ...] | None = None) -> str:
        """Starts a sidecar service in `pod` with its image's own command (or `command`)."""
        # Not --rm: a service that exits keeps its log for the reason; the pod's removal takes it.
        args = ["run", "--detach", "--pull=never", f"--pod={pod}", "--name", name, "--label", f"{LABEL}=1",
                "--init", *Resources().flags()]
        for k, v in (env or {}).items():
            args += ["--env", f"{k}={v}"]
        return self._call([*args, image, *(command or ())], 120).stdout.decode().strip()

    def logs(self, container: str, lines: int = 20) -> str:
        """The last `lines` lines a container printed (its main process: a service's log)."""
        proc = self._call(["logs", "--tail", str(lines), container], 60, check=False)
        return (proc.stdout + proc.stderr).decode("utf-8", "replace")

    def remove_pod(self, pod: str) -> None:
        self._call(["pod", "rm", "--force", "--time", "0", pod], 120, check=False)

    def exec(self, container: str, script: str, timeout_s: float, env: dict[str, str] | None = None,
             workdir: str | None = None, limit: int = 65536, user: str | None = None) -> Exec:
        """Runs `script` with bash (sh if the image has no bash) in the container.
        The timeout kills the command's whole process group inside the container."""
        args = ["exec", "--interactive"]
        for k, v in (env or {}).items():
            args += ["--env", f"{k}={v}"]
        if workdir:
            args += ["--workdir", workdir]
        if user:
            args += ["--user", user]
        # `timeout` (coreutils or busybox) kills the script inside the container; the
        # host-side limit below is a backstop for an engine that hangs.
        seconds = max(0.1, timeout_s)
        inner = ('if command -v bash >/dev/null 2>&1; then s=bash; else s=sh; fi; '
                 f'exec timeout -s KILL {seconds:.2f} "$s" -s')
        args += [container, "sh", "-c", inner]
        start = time.monotonic()
        try:
            proc = subprocess.run([self.podman, *args], input=script.encode("utf-8"), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=timeout_s + 30)
        except subprocess.TimeoutExpired:
            raise EngineError(f"podman exec did not return {timeout_s + 30:g}s after its command's limit") from None
        except OSError as e:
            raise EngineError(f"cannot run podman exec: {e}") from None
        took = time.monotonic() - start
        if proc.returncode in (125, 126, 127) and self._engine_said(proc.stdout):
            raise EngineError(f"podman exec failed: {proc.stdout.decode('utf-8', 'replace').strip()[-300:]}")
        timed_out = proc.returncode == 137 and took >= seconds - 0.05
        out = proc.stdout
        if len(out) > limit:  # its start and its end (a test runner's verdict is at the end)
            out = out[: limit // 2] + b"\n...\n" + out[-(limit // 2):]
        return Exec(proc.returncode, out.decode("utf-8", "replace"), took, timed_out, len(proc.stdout))

    @staticmethod
    def _engine_said(out: bytes) -> bool:
        text = out.decode("utf-8", "replace")
        return text.startswith("Error: ") and ("container" in text or "OCI" in text or "runc" in text)

    def copy_in(self, container: str, source: str, dest: str, merge: bool = False) -> None:
        """Copies a host file or folder (binary files as they are) to `dest` in the container;
        with `merge`, a folder's contents go into the existing folder `dest` (same names replaced)."""
        self._call(["cp", os.path.join(source, ".") if merge else source, f"{container}:{dest}"], 300)

    def read_file(self, container: str, path: str, limit: int = 1 << 20) -> bytes | None:
        """A file's bytes from inside the container, or None when it does not exist."""
        proc = self._call(["exec", container, "sh", "-c", f'test -f "$1" && head -c {limit} -- "$1"', "sh", path], 60, check=False)
        return proc.stdout if proc.returncode == 0 else None

    def remove(self, container: str) -> None:
        self._call(["rm", "--force", "--time", "0", container], 120, check=False)

    def prune(self) -> int:
        """Removes every episode container and pod left behind (a crashed trainer); returns how many."""
        out = self._call(["ps", "--all", "--quiet", "--filter", f"label={LABEL}=1"], 60).stdout.decode().split()
        for cid in out:
            self.remove(cid)
        pods = self._call(["pod", "ps", "--quiet", "--filter", f"label={LABEL}=1"], 60).stdout.decode().split()
        for pod in pods:
            self.remove_pod(pod)
        return len(out) + len(pods)
