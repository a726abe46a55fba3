"""A task's image: its own Dockerfile, built once, plus what its tests fetch, baked in.

`build(folder)` turns a task folder's `environment/` into a local image with
podman, ahead of training and never during an episode:

1. The Dockerfile's base images (`FROM`) are made resolvable locally
   (`environments.containers.bases`: stand-ins from the Debian archive).
2. `environment/` is built as published (`COPY`, `RUN apt-get`/`pip install`
   reach the package registries through the host's trusted CAs). A folder
   with no Dockerfile gets `FROM python:3.13-slim`, `WORKDIR /app` and its
   `app/` copied there.
3. A verifier-tools layer on top: `uv`/`uvx` from PyPI (the version the
   task's `tests/test.sh` installs from astral.sh, else UV_VERSION) in
   `/usr/local/bin` and `$HOME/.local/bin` with the installer's `env` file,
   and the test script's own setup commands (`apt-get install`, `pip install`,
   `uv pip install`, `uvx ... <tool>` run as `<tool> --version`) run once
   with the network, so that at verification, with no network, they find
   everything installed or cached. The task's files are not edited.
4. The task's marks: what the stand-ins changed for it (apt pins relaxed,
   renamed packages mapped, read from the apt wrapper's log in the image; a
   base that fell back to Debian) are `Built.warnings`, kept in the image's
   MARKS_LABEL so a cached build reports them too. A marked task is built, not
   refused.

The image is tagged `localhost/rlpt-task/<name>:<digest>`, the digest covering
`environment/`, `tests/test.sh`, the base recipes and this module's tool
version, so an unchanged task is not rebuilt (`cached` in the result).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import tempfile
import time
import tomllib

from environments.containers import bases, compose
from environments.containers.engine import Engine, EngineError

TOOLS_VERSION = "3"  # bump when the tools layer changes: every task image is rebuilt
DEFAULT_BASE = "python:3.13-slim"
CACHE_DIR = bases.CACHE_DIR
WARM_LOG = "/opt/rlpt-tools/warm.log"  # what the tools layer's set-up printed, inside the image
MARKS_LABEL = "rlpt.marks"  # the image's warnings, a JSON list of one-line strings


@dataclasses.dataclass(frozen=True)
class Built:
    """One task's build: the image tag, or why there is none."""

    name: str
    tag: str | None
    seconds: float
    cached: bool
    error: str | None = None  # one line
    log_path: str | None = None
    warnings: tuple[str, ...] = ()  # one line each: what the stand-in changed for the task (see bases)


def _files(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames.sort()
        out += [os.path.join(dirpath, n) for n in sorted(names)]
    return out


def _folders(task_path: str, kind: str) -> list[str]:
    """The task's `kind` folders ("tests" or "solution"): its own, then each step's
    (steps/<name>/<kind>, a multi-step task), those that exist."""
    steps = os.path.join(task_path, "steps")
    names = sorted(os.listdir(steps)) if os.path.isdir(steps) else []
    return [d for d in [os.path.join(task_path, kind)] + [os.path.join(steps, n, kind) for n in names] if os.path.isdir(d)]


def _scripts(task_path: str, kind: str, script: str) -> str | None:
    """The text of every `kind`/`script` of the task (its own and its steps'), joined; None if none."""
    texts = []
    for folder in _folders(task_path, kind):
        if os.path.isfile(os.path.join(folder, script)):
            with open(os.path.join(folder, script), encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
    return "\n".join(texts) if texts else None


def _solve_sh(task_path: str) -> str | None:
    return _scripts(task_path, "solution", "solve.sh")


def test_script(task_path: str) -> str:
    """Every test.sh of the task (its own and its steps'), joined."""
    return _scripts(task_path, "tests", "test.sh") or ""


def _merge_copy(folders: list[str], dest: str) -> None:
    for folder in folders:
        shutil.copytree(folder, dest, symlinks=True, dirs_exist_ok=True)


_DATED_TAG = re.compile(r":[\w.-]*?(20\d\d)(\d\d)(\d\d)$")
# The day for tasks that name none (a Harbor folder has no dated image): the day
# their folder was published, say. YYYY-MM-DD; unset, such tasks resolve today's packages.
AS_OF_ENV = "RLPT_PACKAGES_AS_OF"


def as_of(task_path: str) -> str | None:
    """The day the task's published image was built, YYYY-MM-DD, from its task.toml's
    `[environment] docker_image` tag (Terminal-Bench 2's `alexgshaw/mteb-retrieve:20251031`),
    else the day in $RLPT_PACKAGES_AS_OF, else None. The stand-ins resolve PyPI and npm
    packages as of then (`bases.ensure`): an unpinned dependency that has since broken
    its API (`transformers`, `mcp`) installs the version the task was made with, as the
    published image holds it."""
    return _tagged_day(task_path) or default_as_of()


def default_as_of() -> str | None:
    """$RLPT_PACKAGES_AS_OF, checked: ValueError naming the value unless it is a YYYY-MM-DD day."""
    value = os.environ.get(AS_OF_ENV, "")
    if not value:
        return None
    try:
        day = datetime.date.fromisoformat(value)
    except ValueError:
        day = None
    if day is None or len(value) != 10:
        raise ValueError(f"{AS_OF_ENV}={value!r}: expected a day as YYYY-MM-DD (the day whose "
                         "packages tasks without a dated image resolve), e.g. 2026-05-30")
    return day.isoformat()


def _tagged_day(task_path: str) -> str | None:
    path = os.path.join(task_path, "task.toml")
    try:
        with open(path, "rb") as f:
            image = (tomllib.load(f).get("environment") or {}).get("docker_image")
    except (OSError, tomllib.TOMLDecodeError):
        return None  # the folder's loader reports a task.toml it cannot read
    m = _DATED_TAG.search(image) if isinstance(image, str) else None
    if m is None:
        return None
    year, month, day = (int(g) for g in m.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return f"{year:04d}-{month:02d}-{day:02d}"


def digest(task_path: str, solution_packages: bool = False) -> str:
    """Content digest of what the image is built from."""
    h = hashlib.sha256(f"rlpt-task-image {TOOLS_VERSION}\n".encode())
    if solution_packages:
        h.update(b"solution-packages\0" + (_solve_sh(task_path) or "").encode())
    env = os.path.join(task_path, "environment")
    for path in _files(env) if os.path.isdir(env) else []:
        h.update(os.path.relpath(path, env).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    test_sh = test_script(task_path)
    if test_sh:
        h.update(b"test.sh\0" + test_sh.encode())
    pythons = tests_pythons(test_sh or "")
    h.update(f"as-of {as_of(task_path)}\n".encode())
    for name in base_images(task_path):
        recipe = bases.resolve(name, pythons)
        h.update(f"base {bases.normalise(name)} {recipe.key() if recipe else bases.known(name)}\n".encode())
    return h.hexdigest()[:16]


def tag_for(name: str, task_path: str, solution_packages: bool = False) -> str:
    return f"localhost/rlpt-task/{name}:{digest(task_path, solution_packages)}"


def _dockerfile_text(task_path: str) -> str:
    path = os.path.join(task_path, "environment", "Dockerfile")
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    app = os.path.isdir(os.path.join(task_path, "environment", "app"))
    return f"FROM {DEFAULT_BASE}\nWORKDIR /app\n" + ("COPY app/ /app/\n" if app else "")


SERVICE_VERSION = 2  # how a sidecar image is made (2: `uv run` scripts resolved at build)


def sidecars(task_path: str) -> tuple[compose.Service, ...]:
    """The services a task's compose file starts beside its own container (see compose)."""
    path = compose.find(task_path)
    return compose.load(path).services if path else ()


def service_images(name: str, task_path: str) -> dict[str, str]:
    """{service: its image}: the tag the task builds for a service with a `build`
    (content-digested like the task's own), else the stand-in for its `image`."""
    env_digest = digest(task_path)
    return {svc.name: (f"localhost/rlpt-task/{name}--{svc.name}:" + hashlib.sha256(
                f"{env_digest} service {svc.name} {SERVICE_VERSION}".encode()).hexdigest()[:16]
                if svc.context is not None else bases.normalise(svc.image))
            for svc in sidecars(task_path)}


def uv_run_script(command) -> str | None:
    """The script of a `uv run [options] <script>.py ...` command (a list, or one shell string), or None."""
    words = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    if len(words) == 3 and words[:2] in (["sh", "-c"], ["bash", "-c"], ["/bin/sh", "-c"]):
        words = shlex.split(words[2])
    for i in range(len(words) - 1):
        if os.path.basename(words[i]) == "uv" and words[i + 1] == "run":
            return next((w for w in words[i + 2:] if w.endswith(".py") and not w.startswith("-")), None)
    return None


def base_images(task_path: str) -> list[str]:
    """The external images a task's Dockerfile, and its sidecars', start from."""
    out = _from_images(_dockerfile_text(task_path))
    for svc in sidecars(task_path):
        if svc.context is None:
            names = [svc.image]
        else:
            with open(os.path.join(svc.context, svc.dockerfile), encoding="utf-8", errors="replace") as f:
                names = _from_images(f.read())
        out += [n for n in names if n not in out]
    return out


def _from_images(dockerfile: str) -> list[str]:
    """The external images a Dockerfile starts from (stages it names are not)."""
    text = re.sub(r"\\\s*\n", " ", dockerfile)
    args: dict[str, str] = {}
    stages: set[str] = set()
    out: list[str] = []
    for line in text.splitlines():
        words = line.strip().split()
        if not words:
            continue
        op = words[0].upper()
        if op == "ARG" and len(words) > 1 and "=" in words[1]:
            k, v = words[1].split("=", 1)
            args.setdefault(k, v.strip("\"'"))
        elif op == "FROM":
            rest = [w for w in words[1:] if not w.startswith("--")]
            if not rest:
                continue
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), rest[0])
            if len(rest) >= 3 and rest[1].upper() == "AS":
                stages.add(rest[2].lower())
            if image.lower() not in stages and image.lower() != "scratch" and image not in out:
                out.append(image)
        elif op in ("COPY", "ADD"):
            for w in words[1:]:
                if w.startswith("--from="):
                    image = w[len("--from="):]
                    if not image.isdigit() and image.lower() not in stages and image not in out and (":" in image or "/" in image):
                        out.append(image)
    return out


# ------------------------------------------------------------ verifier tools


def _uv_version(test_sh: str) -> str:
    m = re.search(r"astral\.sh/uv/(\d+\.\d+\.\d+)/install\.sh", test_sh)
    return m.group(1) if m else bases.UV_VERSION


_UVX_VALUE_OPTIONS = {"-p", "--python", "-w", "--with", "--from", "--with-requirements", "--with-editable",
                      "--index", "--index-url", "--extra-index-url", "-i", "--find-links", "-f", "--constraints",
                      "-c", "--overrides", "--python-platform", "--cache-dir", "--index-strategy", "--default-index",
                      "--prerelease", "--resolution", "--exclude-newer", "--keyring-provider", "--python-preference",
                      "--refresh-package", "--reinstall-package", "--upgrade-package", "-P", "--no-build-package",
                      "--no-binary-package", "--link-mode", "--config-setting", "-C", "--config-file", "--directory",
                      "--project", "--color", "--allow-insecure-host", "--env-file", "--build-constraints",
                      "--torch-backend"}


def _uvx_warm(words: list[str]) -> list[str] | None:
    """`uvx [opts] tool args...` -> `uvx [opts] tool --version` (resolves and caches the tool)."""
    i = 1
    while i < len(words):
        w = words[i]
        if w in _UVX_VALUE_OPTIONS:
            i += 2
        elif w.startswith("-"):
            i += 1
        else:
            return words[: i + 1] + ["--version"]
    return None


def tests_pythons(test_sh: str) -> tuple[str, ...]:
    """The Python versions (`3.13`) a test script asks uv for (`uvx -p 3.13`, `--python=3.12`)."""
    joined = re.sub(r"\\\s*\n", " ", test_sh)
    return tuple(sorted({m.group(2) for m in re.finditer(r"(?:^|\s)(-p|--python)[ =](3\.\d+)\b", joined)}))


def warm_script(test_sh: str) -> str:
    """The set-up commands of a test script, to run once at build time with the network."""
    joined = re.sub(r"\\\s*\n", " ", test_sh)
    lines = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"\s*(?:&&|\|\||;)\s*", line):
            try:
                words = shlex.split(part, posix=True)
            except ValueError:
                continue
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                words = words[1:]
            if words and words[0] in ("sudo", "command"):
                words = words[1:]
            if not words:
                continue
            head = os.path.basename(words[0])
            cmd = None
            if head in ("apt-get", "apt") and len(words) > 1 and words[1] in ("update", "install"):
                cmd = words + (["-y"] if words[1] == "install" and "-y" not in words else [])
            elif head in ("pip", "pip3") and "install" in words[1:2]:
                cmd = words
            elif re.fullmatch(r"python[\d.]*", head) and words[1:4] == ["-m", "pip", "install"]:
                cmd = words
            elif head == "uv" and words[1:3] == ["tool", "run"]:
                cmd = _uvx_warm(["uvx", *words[3:]])
            elif head == "uv" and len(words) > 1 and (words[1] in ("pip", "venv", "init", "add", "sync") or words[1:3] == ["tool", "install"]):
                cmd = words
            elif head == "uvx":
                cmd = _uvx_warm(words)
            elif head == "uv" and words[1:2] == ["run"] and "--with" in words:
                # `uv run --with pkg ... <command>`: the ephemeral environment, resolved into uv's cache.
                opts = [w for i, w in enumerate(words[2:], 2)
                        if w in ("--with", "-p", "--python") or words[i - 1] in ("--with", "-p", "--python")]
                cmd = ["uv", "run", *opts, "python3", "-c", "pass"]
            elif head in ("source", ".") and len(words) == 2 and words[1].endswith((".local/bin/env", "/bin/activate")):
                cmd = words  # uv's env file; a venv the script made (`uv venv .tb`), for the `uv pip install` after it
            if cmd:
                lines.append(" ".join(shlex.quote(w) if not w.startswith("$") else w for w in cmd))
    versions = tests_pythons(test_sh)
    if lines and any(ln.split()[0] in ("uv", "uvx") for ln in lines):
        # uv would download a managed CPython from GitHub; the distribution's Python stands in for it.
        wanted = " ".join(f"python{v} python{v}-venv" for v in versions) or "python3 python3-venv"
        probe = " && ".join(f"command -v python{v}" for v in versions) or "command -v python3"
        lines.insert(0, f"({probe}) >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq {wanted})")
    body = "".join(f"echo '+ {ln.replace(chr(39), '')[:200]}'; {ln} || echo 'rlpt-warm: failed ({ln.replace(chr(39), '')[:120]})'\n"
                   for ln in lines)
    return "set +e\nexport DEBIAN_FRONTEND=noninteractive\n" + body


def needs_tools(task_path: str, solution_packages: bool = False) -> bool:
    """Whether the task's test script (or, with `solution_packages`, its reference
    solution) installs or runs anything (uv, pip, apt) to bake in."""
    text = test_script(task_path)
    solve = _solve_sh(task_path) if solution_packages else None
    return ("uv" in re.findall(r"[A-Za-z_]+", text) or "uvx" in text or warm_script(text).count("\n") > 2
            or (solve is not None and warm_script(solve).count("\n") > 2))


def _tools_context(ctx: str, task_path: str, env_tag: str, config: dict, solution_packages: bool = False) -> str:
    test_sh = test_script(task_path)
    tools = os.path.join(ctx, "rlpt-tools")
    os.makedirs(os.path.join(tools, "bin"))
    uv = bases.uv_binaries(_uv_version(test_sh))
    for b in ("uv", "uvx"):
        shutil.copy2(os.path.join(uv, b), os.path.join(tools, "bin", b))
    env_file = 'case ":${PATH}:" in *:"$HOME/.local/bin":*) ;; *) export PATH="$HOME/.local/bin:$PATH" ;; esac\n'
    with open(os.path.join(tools, "env"), "w") as f:
        f.write(env_file)
    install = (
        "set -e\n"
        "cp /opt/rlpt-tools/bin/uv /opt/rlpt-tools/bin/uvx /usr/local/bin/\n"
        'for h in /root "$HOME"; do mkdir -p "$h/.local/bin" && cp /opt/rlpt-tools/bin/uv /opt/rlpt-tools/bin/uvx '
        '/opt/rlpt-tools/env "$h/.local/bin/"; done\n'
    )
    with open(os.path.join(tools, "install.sh"), "w") as f:
        f.write(install)
    with open(os.path.join(tools, "warm.sh"), "w") as f:
        f.write(warm_script(test_sh))
    _merge_copy(_folders(task_path, "tests"), os.path.join(ctx, "tests"))
    os.makedirs(os.path.join(ctx, "tests"), exist_ok=True)
    solve = _solve_sh(task_path) if solution_packages else None
    if solve is not None:
        with open(os.path.join(tools, "warm-solution.sh"), "w") as f:
            f.write(warm_script(solve))
        _merge_copy(_folders(task_path, "solution"), os.path.join(ctx, "solution"))
    user = config.get("User") or ""
    workdir = config.get("WorkingDir") or "/"
    lines = [
        f"FROM {env_tag}",
        "USER root",
        "COPY rlpt-tools/ /opt/rlpt-tools/",
        "RUN sh /opt/rlpt-tools/install.sh",
        "COPY tests/ /tests/",
        # The test script's own set-up, with the network, once: at verification it finds all of it.
        f"RUN mkdir -p /logs/verifier && cd /tmp && UV_PYTHON_DOWNLOADS=never UV_LINK_MODE=copy "
        f"bash /opt/rlpt-tools/warm.sh > {WARM_LOG} 2>&1; rm -rf /tests /logs; true",
    ]
    if solve is not None:
        # What the reference solution installs from the registries (opt-in: the task then
        # starts with those packages, which an offline episode could not fetch).
        lines += ["COPY solution/ /solution/",
                  f"RUN cd /tmp && UV_PYTHON_DOWNLOADS=never UV_LINK_MODE=copy bash /opt/rlpt-tools/warm-solution.sh "
                  f">> {WARM_LOG} 2>&1; rm -rf /solution; true"]
    lines.append(f"WORKDIR {workdir}")
    if user:
        lines.append(f"USER {user}")
    with open(os.path.join(ctx, "Dockerfile"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return ctx


_CAUSE = re.compile(r"^(E: |ERROR|error|Error:|fatal:|curl: \(\d+\)|wget: |.*Could not resolve|.*Temporary failure resolving|"
                    r".*No such file or directory|.*not found|.*Permission denied)")


# A download the step could not make: named before whatever failed after it (a clone
# that did not happen, then `cd` into it), so a need for another host is said as such.
_NETWORK_CAUSE = re.compile(r"Could not resolve host|Temporary failure resolving|unable to access '|Failed to connect to|"
                            r"CONNECT tunnel failed|rlpt egress proxy: |Name or service not known.*https?://")

INFRASTRUCTURE = "infrastructure failure, not the task's: "


def _infrastructure(output: str) -> str | None:
    """The one line for a build that failed for this machine's sake (its disk full), or None."""
    if re.search(r"no space left on device", output, re.I):
        return INFRASTRUCTURE + "the machine's disk is full (no space left on device); free space and build again"
    return None


def _reason(output: str) -> str:
    """One line saying why a build failed: the cause a command printed, and the step."""
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    step_at = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("Error: building at STEP")), None)
    if step_at is None:
        last = next((ln for ln in reversed(lines) if ln.startswith("Error:") or "error" in ln.lower()), lines[-1] if lines else "no output")
        return last[:300]
    step = re.sub(r"\s+", " ", lines[step_at][len("Error: building at STEP "):].split('": while running')[0].strip('"'))
    start = next((i for i in range(step_at - 1, -1, -1) if re.match(r"STEP \d+/\d+:", lines[i])), -1)
    cause = next((ln for ln in lines[start + 1:step_at] if _NETWORK_CAUSE.search(ln)), None)
    cause = cause or next((lines[i] for i in range(step_at - 1, max(-1, step_at - 40), -1)
                           if _CAUSE.match(lines[i]) and not lines[i].startswith("Error: building")), None)
    if cause is None and step_at > 0 and not re.match(r"(STEP \d+/\d+:|-->|COMMIT)", lines[step_at - 1]):
        cause = lines[step_at - 1]  # what the failing command printed last
    if cause and "curl: (" in cause:
        cause = cause[cause.index("curl: ("):]  # past curl's progress meter
    return (f"{cause[:200]} (at {step[:90]})" if cause else f"a step failed: {step[:200]}")[:300]


def _marks(engine: Engine, tag: str) -> tuple[str, ...] | None:
    """The warnings kept in a task image's label, or None when there is no such image."""
    proc = engine._call(["image", "inspect", "--format", "{{index .Labels \"" + MARKS_LABEL + "\"}}", tag], 60, check=False)
    if proc.returncode != 0:
        return None
    text = proc.stdout.decode().strip()
    try:
        return tuple(str(w) for w in json.loads(text)) if text.startswith("[") else ()
    except ValueError:
        return ()


def _mark(engine: Engine, tag: str, notes: list[str], timeout_s: float, log_path: str) -> tuple[str, ...]:
    """Reads the apt wrapper's log from the built image, and keeps it with `notes`
    in the image's label (a one-instruction layer, only when there is something to keep)."""
    proc = engine._call(["run", "--rm", "--network=none", "--user=root", "--entrypoint", "cat", tag, bases.APT_LOG],
                        120, check=False)
    lines = proc.stdout.decode("utf-8", "replace").splitlines() if proc.returncode == 0 else []
    marks = tuple(dict.fromkeys([*notes, *(ln.strip() for ln in lines if ln.strip())]))
    if marks:
        value = json.dumps(list(marks)).replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
        with tempfile.TemporaryDirectory(prefix="rlpt_image_build_") as ctx:
            with open(os.path.join(ctx, "Dockerfile"), "w") as f:
                f.write(f'FROM {tag}\nLABEL {MARKS_LABEL}="{value}"\n')
            ok, out = engine.build(ctx, tag, timeout_s, log_path=log_path + ".marks")
        if not ok:
            raise EngineError(f"cannot label the image with its marks: {_reason(out)}")
    return marks


def _build_service(svc: compose.Service, tag: str, engine: Engine, timeout_s: float, log_path: str) -> str | None:
    """Builds a sidecar service's image; returns why it failed, or None."""
    ok, out = engine.build(svc.context, tag, timeout_s, dockerfile=os.path.join(svc.context, svc.dockerfile),
                           log_path=log_path)
    if not ok:
        return f"service {svc.name!r}'s Dockerfile failed: {_reason(out)}"
    config = engine.image_config(tag)
    script = uv_run_script(svc.command or (*(config.get("Entrypoint") or ()), *(config.get("Cmd") or ())))
    if script is None:
        return None
    # `uv run x.py` fetches the script's dependencies when the service starts, which an
    # episode (offline) cannot: they are resolved into the image's uv cache now.
    with tempfile.TemporaryDirectory(prefix="rlpt_image_build_") as ctx:
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write(f"FROM {tag}\nRUN cd {shlex.quote(config.get('WorkingDir') or '/')} && "
                    f"uv sync --script {shlex.quote(script)}\n")
        ok, out = engine.build(ctx, tag, timeout_s, log_path=log_path + ".warm")
    if not ok:
        engine.remove_image(tag)
        return f"service {svc.name!r}: `uv sync --script {script}` failed: {_reason(out)}"
    return None


def build(task_path: str, name: str, engine: Engine | None = None, timeout_s: float = 1800.0,
          log_dir: str | None = None, progress=None, solution_packages: bool = False) -> Built:
    """Builds (or finds cached) the image of one task folder. With `solution_packages`
    the image also holds what its reference solution installs (apt, pip, uv)."""
    engine = engine or Engine()
    start = time.monotonic()
    tag = tag_for(name, task_path, solution_packages)
    built = {svc: tag for svc, tag in service_images(name, task_path).items() if tag.startswith("localhost/")}
    marks = _marks(engine, tag)
    if marks is not None and all(engine.image_exists(t) for t in built.values()):
        return Built(name, tag, time.monotonic() - start, cached=True, warnings=marks)
    log_dir = log_dir or os.path.join(CACHE_DIR, "logs")
    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, f"{name}.log")
    notes: list[str] = []
    try:
        for image, got in bases.ensure(base_images(task_path), engine, progress=progress or (lambda s: None), notes=notes,
                                        pythons=tests_pythons(test_script(task_path) or ""), as_of=as_of(task_path)).items():
            if got != image and engine.pull == "never":
                return Built(name, None, time.monotonic() - start, False, got, None)
        for svc in sidecars(task_path):
            if svc.name in built and not engine.image_exists(built[svc.name]):
                why = _build_service(svc, built[svc.name], engine, timeout_s, f"{log_path}.{svc.name}")
                if why is not None:
                    return Built(name, None, time.monotonic() - start, False, why, f"{log_path}.{svc.name}")
        env_tag = f"localhost/rlpt-task-env/{name}:{digest(task_path)}"
        env_dir = os.path.join(task_path, "environment")
        with tempfile.TemporaryDirectory(prefix="rlpt_image_build_") as tmp:
            if os.path.isfile(os.path.join(env_dir, "Dockerfile")):
                context, dockerfile = env_dir, None
            else:
                context = os.path.join(tmp, "env")
                if os.path.isdir(env_dir):
                    shutil.copytree(env_dir, context, symlinks=True)
                else:
                    os.makedirs(context)
                dockerfile = os.path.join(tmp, "Dockerfile.implicit")
                with open(dockerfile, "w") as f:
                    f.write(_dockerfile_text(task_path))
            ok, out = engine.build(context, env_tag, timeout_s, dockerfile=dockerfile, log_path=log_path)
            if not ok:
                return Built(name, None, time.monotonic() - start, False,
                             _infrastructure(out) or f"the task's Dockerfile failed: {_reason(out)}", log_path)
            if needs_tools(task_path, solution_packages):
                ctx = _tools_context(os.path.join(tmp, "tools"), task_path, env_tag, engine.image_config(env_tag), solution_packages)
                ok, out2 = engine.build(ctx, tag, timeout_s, log_path=log_path + ".tools")
                if not ok:
                    return Built(name, None, time.monotonic() - start, False,
                                 _infrastructure(out2) or f"the verifier tools layer failed: {_reason(out2)}", log_path + ".tools")
            else:
                engine.tag(env_tag, tag)
        engine.remove_image(env_tag)  # the task image's layers keep it; only the name goes
        marks = _mark(engine, tag, notes, timeout_s, log_path)
        return Built(name, tag, time.monotonic() - start, cached=False, log_path=log_path, warnings=marks)
    except EngineError as e:
        return Built(name, None, time.monotonic() - start, False, str(e)[:300], log_path)
