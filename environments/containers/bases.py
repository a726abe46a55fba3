"""Base images from a distribution archive, tagged with the public names tasks use.

A task's Dockerfile starts `FROM python:3.13-slim` or `FROM ubuntu:24.04`. With
no registry reachable, rlpt builds local stand-ins with `mmdebstrap` from the
Debian archive, or Ubuntu's for `ubuntu:*` (both reachable wherever the set-up
step can install packages), and tags them with those names, so `FROM` resolves
with `--pull=never`. Each stand-in is a minbase with the packages the public
image has (Python, venv and a pip installed by pip for `python:*`; apt and the
Ubuntu keyring for `ubuntu:*`), plus what every stand-in has (`_COMMON`): the
host's trusted CA certificates (so `RUN pip install` / `apt-get` in a task's
Dockerfile reach the package registries through whatever TLS proxy the host
trusts), the CA environment variables pip, requests, curl, uv and node read,
bash, curl, procps and tmux, and the apt wrapper of standin_apt.sh.

The apt wrapper (`/usr/local/bin/apt-get`, `apt`): a Dockerfile written for the
public image pins versions of its archive (`texlive=2023.20240207-1`) or names
packages a newer release renamed (`libgl1-mesa-glx`). The wrapper relaxes only
those arguments of `install` (the pin dropped where the archive lacks that
version, the successor for a renamed package), says so on stderr and in
APT_LOG inside the image, and runs /usr/bin's apt-get; the build reads the log
back into the task's marks (`images.Built.warnings`). A wrapper rather than a
rewritten Dockerfile: the task's files build as published, `RUN` lines that
call apt from scripts, test.sh and solve.sh are covered too, and the decision
is made against the archive the build actually sees (`apt-cache madison`).

`python:3.X-<release>` is that Debian release (where the tag names none, the
one whose python3 is 3.X, else trixie as the public images) with CPython 3.X
compiled from source into /usr/local where the release's python3 is not 3.X, as
the public images are made (cpython.py); a Python a task's tests ask uv for and
the archive lacks is compiled in the same way (uv would download its own from
GitHub). `ubuntu:20.04/22.04/24.04` (and their code names, `latest`, Terminal-Bench's `ubuntu-24-04`) are that Ubuntu
release from archive.ubuntu.com (main, universe; the release, -updates and
-security suites, as the public image) when the Ubuntu archive key is
installed (launch/setup_system.sh) and the archive answers; otherwise, and for
other Ubuntu releases, Debian 13, with the reason on the build's progress
output and in `python -m environments bases`. A machine with a registry can
pull the real ones instead (`Engine(pull="missing")`).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile

from environments.containers import cpython
from environments.containers.engine import Engine, EngineError

DEBIAN, UBUNTU, UBUNTU_KEYRING = cpython.DEBIAN, cpython.UBUNTU, cpython.UBUNTU_KEYRING
UBUNTU_SECURITY = "http://security.ubuntu.com/ubuntu"
# pip as the public python:* images have it (installed by pip, with a RECORD, in
# /usr/local), so a Dockerfile's `pip install --upgrade pip` can uninstall it.
PIP_VERSION = "26.3"
PIP_VERSION_PY39 = "25.3"  # the last pip for Python 3.9
# With pip, by pip, into /usr/local: setuptools and wheel, so a Dockerfile's
# `pip install --upgrade setuptools wheel` replaces them (Debian's have no RECORD).
PIP_COMPANIONS = ("setuptools==80.9.0", "wheel==0.45.1")
STANDIN_DIR = "/opt/rlpt-standin"
APT_LOG = STANDIN_DIR + "/apt-relaxed.log"  # the apt wrapper's changes, one a line
_APT_WRAPPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin_apt.sh")
UV_VERSION = "0.9.5"  # uv when a task names none (its test.sh's installer URL, or an image tag)
CACHE_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "rlpt", "containers")
_UV_IMAGE = re.compile(r"ghcr\.io/astral-sh/uv:(latest|\d+\.\d+\.\d+)")
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
RECIPE_LABEL = "rlpt.base"
_CA_ENV = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")
# What every stand-in has: the public images have these, and verifiers use them.
_COMMON = ("ca-certificates", "bash", "coreutils", "curl", "procps", "tmux")
# python3-dev: the public python images carry Python.h (a task builds a C extension).
_PYTHON = ("python3", "python3-pip", "python3-venv", "python3-dev")
# What the public ubuntu image has beyond minbase's essential set (mmdebstrap's
# minbase leaves apt out for Ubuntu's suites): apt and the archive's keys.
_UBUNTU = ("apt", "gpgv", "ubuntu-keyring")


@dataclasses.dataclass(frozen=True)
class Recipe:
    suite: str  # the distribution's release (code name)
    packages: tuple[str, ...]
    python_links: bool = False  # python -> python3, pip -> pip3, no EXTERNALLY-MANAGED (as python:* images)
    workdir: str = "/"
    pip: str | None = None  # a pip of this version installed by pip over the distribution's (python:*)
    distro: str = "debian"  # "ubuntu": from Ubuntu's archive (main, universe; release, -updates, -security)
    fallback: Recipe | None = None  # built instead where the distribution's archive cannot be used
    pythons: tuple[str, ...] = ()  # the python3.X its archive has
    built: tuple[str, ...] = ()  # CPython 3.X compiled from source into /usr/local (cpython.py)
    python: str | None = None  # with python_links: the 3.X that python3 is (built, where its archive lacks it)

    def key(self) -> str:
        text = repr((self.distro, self.suite, sorted(self.packages), self.python_links, self.workdir, self.pip,
                     PIP_COMPANIONS if self.pip else (), _ca_digest(), _wrapper_digest(),
                     (self.built, self.python, cpython.BUILD_VERSION) if self.built else ()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        python = f" (python3 is {self.python})" if self.python_links and self.python else ""
        extra = [v for v in self.built if v != self.python]
        built = f" with CPython {', '.join(extra)} compiled" if extra else ""
        return f"{self.distro.capitalize()} {self.suite}{python}{built}"

    def has(self, version: str) -> bool:
        """Whether a `python{version}` is in the image or its archive."""
        return version in self.pythons or version in self.built


@functools.cache
def _wrapper_digest() -> str:
    with open(_APT_WRAPPER, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _ca_digest() -> str:
    try:
        with open(HOST_CA_BUNDLE, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:
        return "none"


# Each release's python3.X (Debian main; Ubuntu main and universe). A verifier that
# asks uv for another gets it compiled from source (cpython.py: uv's own CPython
# builds come from GitHub, not reachable here); where that cannot be done, the
# recipe's fallback, Debian 13 (Python 3.13, what Terminal-Bench 2's tests ask for).
_PY_TRIXIE = Recipe("trixie", _COMMON + _PYTHON, python_links=True, pip=PIP_VERSION, pythons=("3.13",), python="3.13")
_PY_BULLSEYE = Recipe("bullseye", _COMMON + _PYTHON, python_links=True, pip=PIP_VERSION_PY39, pythons=("3.9",),
                      python="3.9", fallback=_PY_TRIXIE)
_PY_BOOKWORM = Recipe("bookworm", _COMMON + _PYTHON, python_links=True, pip=PIP_VERSION, pythons=("3.11",),
                      python="3.11", fallback=_PY_TRIXIE)
_TRIXIE = Recipe("trixie", _COMMON, pythons=("3.13",))
_BULLSEYE = Recipe("bullseye", _COMMON, pythons=("3.9",), fallback=_TRIXIE)
_BOOKWORM = Recipe("bookworm", _COMMON, pythons=("3.11",), fallback=_TRIXIE)
_UBUNTU_BY_RELEASE = {v: Recipe(code, _COMMON + _UBUNTU, distro="ubuntu", fallback=_TRIXIE, pythons=pythons)
                      for v, code, pythons in (("20.04", "focal", ("3.8", "3.9")), ("22.04", "jammy", ("3.10", "3.11")),
                                               ("24.04", "noble", ("3.12",)))}
_UBUNTU_BY_RELEASE.update({r.suite: r for r in list(_UBUNTU_BY_RELEASE.values())})
_UBUNTU_BY_RELEASE["latest"] = _UBUNTU_BY_RELEASE["noble"]

# python:3.X[.Y][-slim][-<debian>]: as the public image, that Debian release (trixie,
# the public images' default, where the tag names none) with CPython 3.X; Debian's
# own python3 packages where the release's python3 is 3.X, else 3.X compiled from
# source into /usr/local as the public images have it. Where no release is named
# and one has 3.X as its python3, that release (no compile). The fallback, where
# compiling cannot be done: the Debian release whose python3 is nearest 3.X.
_DEBIAN_PYTHON = {"bullseye": _PY_BULLSEYE, "bookworm": _PY_BOOKWORM, "trixie": _PY_TRIXIE}
_NEAREST = {9: _PY_BULLSEYE, 10: _PY_BOOKWORM, 11: _PY_BOOKWORM, 12: _PY_TRIXIE, 13: _PY_TRIXIE, 14: _PY_TRIXIE}


def _python_image(minor: int, suite: str | None) -> Recipe | None:
    if minor not in _NEAREST:
        return None
    version = f"3.{minor}"
    if suite is None:
        suite = next((s for s, r in _DEBIAN_PYTHON.items() if r.python == version), "trixie")
    own = _DEBIAN_PYTHON[suite]
    if own.python == version:
        return own
    return Recipe(suite, _COMMON, python_links=True, pip=PIP_VERSION_PY39 if minor == 9 else PIP_VERSION,
                  pythons=own.pythons, built=(version,), python=version, fallback=_NEAREST[minor])


_DEBIAN_BY_RELEASE = {"11": _BULLSEYE, "bullseye": _BULLSEYE, "12": _BOOKWORM, "bookworm": _BOOKWORM, "stable": _BOOKWORM,
                      "13": _TRIXIE, "trixie": _TRIXIE, "latest": _TRIXIE}
_PATTERNS = (
    (re.compile(r"docker\.io/library/python:3\.(\d+)(\.\d+)?(-slim)?(-(bullseye|bookworm|trixie))?"),
     lambda m: _python_image(int(m.group(1)), m.group(5))),
    (re.compile(r"docker\.io/library/debian:([a-z]+|\d+)(\.\d+)*(-slim)?"), lambda m: _DEBIAN_BY_RELEASE.get(m.group(1))),
    # Ubuntu's LTS releases from Ubuntu's archive; Debian 13 for the others.
    (re.compile(r"docker\.io/library/ubuntu:(\d\d\.\d\d|[a-z]+)"), lambda m: _UBUNTU_BY_RELEASE.get(m.group(1), _TRIXIE)),
    # Terminal-Bench 1's own base images.
    (re.compile(r"ghcr\.io/laude-institute/t-bench/python-3-13:[\w.-]+"), lambda m: _PY_TRIXIE),
    (re.compile(r"ghcr\.io/laude-institute/t-bench/ubuntu-24-04:[\w.-]+"), lambda m: _UBUNTU_BY_RELEASE["noble"]),
)


def normalise(name: str) -> str:
    """`python:3.13-slim` -> `docker.io/library/python:3.13-slim` (as podman resolves it)."""
    name = name.strip()
    if "@" in name:
        name = name.split("@", 1)[0]
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}"
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def recipe_for(name: str) -> Recipe | None:
    """The local stand-in's recipe for a public image name, or None."""
    norm = normalise(name)
    for pattern, pick in _PATTERNS:
        m = pattern.fullmatch(norm)
        if m:
            return pick(m)
    return None


def known(name: str) -> bool:
    """Whether `name` has a local stand-in (a Debian recipe, or astral's uv image)."""
    return recipe_for(name) is not None or _UV_IMAGE.fullmatch(normalise(name)) is not None


def uv_binaries(version: str) -> str:
    """A folder holding uv and uvx of `version` for this machine, from PyPI (cached)."""
    machine = platform.machine()
    dest = os.path.join(CACHE_DIR, "uv", f"{version}-{machine}")
    if os.path.isfile(os.path.join(dest, "uvx")):
        return dest
    os.makedirs(CACHE_DIR, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        plat = {"x86_64": "manylinux_2_17_x86_64", "aarch64": "manylinux_2_17_aarch64"}.get(machine, machine)
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               f"--platform={plat}", "--python-version=3.11", f"uv=={version}", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if proc.returncode != 0 or not wheels:
            raise EngineError(f"cannot download uv {version} from PyPI: {(proc.stderr.strip().splitlines() or ['no wheel'])[-1][:200]}")
        stage = os.path.join(tmp, "bin")
        os.makedirs(stage)
        with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as z:
            for member in z.namelist():
                if re.fullmatch(r"uv-[^/]+\.data/scripts/(uv|uvx)", member):
                    target = os.path.join(stage, os.path.basename(member))
                    with z.open(member) as src, open(target, "wb") as out:
                        shutil.copyfileobj(src, out)
                    os.chmod(target, 0o755)
        if not os.path.isfile(os.path.join(stage, "uvx")):
            raise EngineError(f"the uv {version} wheel holds no uv/uvx binaries")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.move(stage, dest)
    return dest


def _uv_image(version: str, tag: str, engine: Engine) -> None:
    """A stand-in for astral's distroless uv image: /uv and /uvx, from the PyPI wheel."""
    folder = uv_binaries(version)
    with tempfile.TemporaryDirectory(prefix="rlpt_uv_image_") as tmp:
        tarball = os.path.join(tmp, "uv.tar")
        with tarfile.open(tarball, "w") as tar:
            for b in ("uv", "uvx"):
                tar.add(os.path.join(folder, b), arcname=b)
        engine.import_rootfs(tarball, tag, [f"LABEL {RECIPE_LABEL}=uv-{version}", 'ENTRYPOINT ["/uv"]'])


def unusable(recipe: Recipe) -> str | None:
    """Why `recipe`'s archive cannot be used here (its fallback then stands in), or None."""
    return _ubuntu_unusable(recipe.suite) if recipe.distro == "ubuntu" else None


def with_pythons(recipe: Recipe, pythons: tuple[str, ...]) -> Recipe:
    """`recipe` for a task whose tests ask uv for `pythons`: each its archive lacks
    compiled from source into /usr/local (where cpython.py knows its source; uv's
    own CPython builds come from GitHub). No network is asked (task image digests
    use it)."""
    missing = tuple(v for v in pythons if not recipe.has(v) and v in cpython.SOURCES)
    return dataclasses.replace(recipe, built=recipe.built + missing) if missing else recipe


def resolve(name: str, pythons: tuple[str, ...] = ()) -> Recipe | None:
    """The recipe `ensure` builds first for public image `name` and tests asking uv for `pythons`."""
    recipe = recipe_for(name)
    return None if recipe is None else with_pythons(recipe, pythons)


@functools.cache
def _ubuntu_unusable(suite: str) -> str | None:
    if not os.path.isfile(UBUNTU_KEYRING):
        return f"the Ubuntu archive key {UBUNTU_KEYRING} is not installed (launch/setup_system.sh installs ubuntu-keyring)"
    try:
        urllib.request.urlopen(urllib.request.Request(f"{UBUNTU}/dists/{suite}/InRelease", method="HEAD"), timeout=15).close()
    except (OSError, ValueError) as e:
        return f"{UBUNTU} does not answer ({str(e)[:120]})"
    return None


def _sources(recipe: Recipe) -> list[str]:
    if recipe.distro == "ubuntu":
        opts = f"[signed-by={UBUNTU_KEYRING}]"
        return [f"deb {opts} {UBUNTU} {recipe.suite} main universe",
                f"deb {opts} {UBUNTU} {recipe.suite}-updates main universe",
                f"deb {opts} {UBUNTU_SECURITY} {recipe.suite}-security main universe"]
    return [DEBIAN]


def _mmdebstrap(recipe: Recipe, tarball: str, log: list[str], progress=print) -> None:
    if shutil.which("mmdebstrap") is None:
        raise EngineError("mmdebstrap is not installed (launch/setup_system.sh installs it)")
    hooks, packages = [], list(recipe.packages)
    if os.path.isfile(HOST_CA_BUNDLE):
        hooks += [f"--customize-hook=upload {HOST_CA_BUNDLE} /usr/local/share/ca-certificates/rlpt-host-trusted.crt",
                  '--customize-hook=chroot "$1" update-ca-certificates --fresh >/dev/null 2>&1']
    for version in recipe.built:
        build = cpython.build(version, recipe.distro, recipe.suite, _sources(recipe), os.path.join(CACHE_DIR, "cpython"),
                              progress)
        packages += [p for p in build.packages if p not in packages]
        hooks += [f"--customize-hook=tar-in {build.tarball} /", '--customize-hook=chroot "$1" ldconfig']
    python = "python3"
    if recipe.python_links and recipe.python in recipe.built:
        # As the public python:* images: /usr/local/bin/python3 is the compiled 3.X.
        python = f"python{recipe.python}"
        links = (f"{python} python3", "python3 python", f"pip{recipe.python} pip3", "pip3 pip",
                 f"{python}-config python3-config", "python3-config python-config")
        hooks.append('--customize-hook=chroot "$1" sh -c "cd /usr/local/bin && '
                     + " && ".join(f"ln -sf {link}" for link in links) + '"')
    elif recipe.python_links:
        hooks.append('--customize-hook=chroot "$1" sh -c "rm -f /usr/lib/python3*/EXTERNALLY-MANAGED; '
                     'ln -sf python3 /usr/bin/python; ln -sf pip3 /usr/bin/pip"')
    if recipe.pip:
        # From PyPI into /usr/local (Debian's Python installs there), ahead of Debian's pip on sys.path.
        ca = "/etc/ssl/certs/ca-certificates.crt"
        hooks.append(f'--customize-hook=chroot "$1" env SSL_CERT_FILE={ca} PIP_CERT={ca} {python} -m pip install '
                     f'--quiet --no-cache-dir --disable-pip-version-check --ignore-installed pip=={recipe.pip} '
                     + " ".join(PIP_COMPANIONS))
    hooks += [f"--customize-hook=upload {_APT_WRAPPER} /usr/local/bin/apt-get",
              f'--customize-hook=chroot "$1" sh -c "chmod 755 /usr/local/bin/apt-get; ln -sf apt-get /usr/local/bin/apt; '
              f'mkdir -p {STANDIN_DIR}"']
    # Images carry no apt caches; tasks run `apt-get update` first, as with the public images.
    hooks.append('--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin')
    cmd = ["mmdebstrap", "--variant=minbase", "--quiet", f"--include={','.join(packages)}",
           *hooks, recipe.suite, tarball, *_sources(recipe)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    log.append(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        said = [ln.strip() for ln in proc.stderr.strip().splitlines() if ln.strip()] or ["no message"]
        # apt's first error names the cause (a package it cannot find); mmdebstrap's last only that it failed.
        first = next((ln for ln in said if ln.startswith("E: ") and "mmdebstrap failed" not in ln), None)
        raise EngineError(f"mmdebstrap {recipe.describe()} failed: " + "; ".join(dict.fromkeys(filter(None, (first, said[-1]))))[:300])


def _build(recipe: Recipe, engine: Engine, progress=print) -> str:
    """The local image of `recipe` (built once); returns its tag."""
    source = f"localhost/rlpt-base:{recipe.suite}-{recipe.key()}"
    if engine.image_exists(source) and _label(engine, source) == recipe.key():
        return source
    with tempfile.TemporaryDirectory(prefix="rlpt_base_image_") as tmp:
        tarball = os.path.join(tmp, "rootfs.tar")
        _mmdebstrap(recipe, tarball, [], progress)
        ca = HOST_CA_BUNDLE if os.path.isfile(HOST_CA_BUNDLE) else "/etc/ssl/certs/ca-certificates.crt"
        changes = [f"ENV {k}={ca}" for k in _CA_ENV] + [
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            f"LABEL {RECIPE_LABEL}={recipe.key()}", f"WORKDIR {recipe.workdir}", 'CMD ["bash"]']
        engine.import_rootfs(tarball, source, changes)
    return source


def ensure(names: list[str], engine: Engine | None = None, progress=print, notes: list[str] | None = None,
           pythons: tuple[str, ...] = (), as_of: str | None = None) -> dict[str, str]:
    """Makes every public name in `names` that has a recipe resolvable locally,
    building each recipe once; returns {normalised name: local image id or reason}.
    `pythons`: the Python versions (`3.13`) the task's tests ask uv for; those the
    archive lacks are compiled in (`with_pythons`). A name whose own archive cannot
    be used, or whose build fails (a CPython that does not compile), gets its
    recipe's fallback: one line saying so goes to `progress` and to `notes`. The
    public name is tagged to what this task needs each time (builds run one at a
    time). `as_of` (YYYY-MM-DD, `images.as_of`): pip, uv and npm in the image resolve
    packages uploaded before the end of that day (`resolve_as_of`)."""
    engine = engine or Engine()
    out: dict[str, str] = {}
    by_recipe: dict[tuple[Recipe, Recipe, str | None], list[str]] = {}
    for name in names:
        norm = normalise(name)
        recipe = recipe_for(norm)
        uv = _UV_IMAGE.fullmatch(norm)
        if uv is not None:
            version = UV_VERSION if uv.group(1) == "latest" else uv.group(1)
            if not (engine.image_exists(norm) and _label(engine, norm) == f"uv-{version}"):
                progress(f"uv image {norm}: from the PyPI wheel of uv {version}")
                _uv_image(version, norm, engine)
            out[norm] = norm
            continue
        if recipe is None:
            out[norm] = f"no local stand-in for base image {name!r} (known: python:3.9-3.14, debian:11-13, ubuntu:*, Terminal-Bench's bases, ghcr.io/astral-sh/uv)"
            continue
        recipe = with_pythons(recipe, pythons)
        why = unusable(recipe)
        use = recipe if why is None else with_pythons(recipe.fallback, pythons)
        if engine.image_exists(norm) and _label(engine, norm) == _dated(use.key(), as_of):
            out[norm] = norm
            if why is not None:
                _note(f"{norm}: {use.describe()} stands in for {recipe.describe()}: {why}", progress, notes)
            continue
        by_recipe.setdefault((recipe, use, why), []).append(norm)
    for (recipe, use, why), tags in by_recipe.items():
        if why is None:
            progress(f"base image {recipe.describe()} ({len(recipe.packages)} packages) for {', '.join(tags)}: building with mmdebstrap")
            try:
                source = _build(recipe, engine, progress)
            except EngineError as e:
                if recipe.fallback is None:
                    raise
                use, why = with_pythons(recipe.fallback, pythons), str(e)
        if why is not None:
            _note(f"{', '.join(tags)}: {use.describe()} stands in for {recipe.describe()}: {why}", progress, notes)
            source = _build(use, engine, progress)
        if as_of is not None:
            source = _as_of_image(source, use, as_of, engine)
        engine.tag(source, *tags)
        for t in tags:
            out[t] = t
    return out


def resolve_as_of(day: str) -> dict[str, str]:
    """The variables that make pip (26 and later), uv and npm resolve packages as of the
    end of `day` (YYYY-MM-DD): a published image built that day held those."""
    end = datetime.date.fromisoformat(day) + datetime.timedelta(days=1)
    stamp = f"{end.isoformat()}T00:00:00Z"
    return {"PIP_UPLOADED_PRIOR_TO": stamp, "UV_EXCLUDE_NEWER": stamp, "npm_config_before": stamp}


def _dated(key: str, as_of: str | None) -> str:
    return key if as_of is None else f"{key}@{as_of}"


def _as_of_image(source: str, recipe: Recipe, as_of: str, engine: Engine) -> str:
    """`source` with resolve_as_of's variables (one layer, cached by its label)."""
    tag = f"{source}-{as_of}"
    label = _dated(recipe.key(), as_of)
    if engine.image_exists(tag) and _label(engine, tag) == label:
        return tag
    with tempfile.TemporaryDirectory(prefix="rlpt_base_image_") as ctx:
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write(f"FROM {source}\n" + "".join(f"ENV {k}={v}\n" for k, v in resolve_as_of(as_of).items())
                    + f"LABEL {RECIPE_LABEL}={label}\n")
        ok, out = engine.build(ctx, tag, 300)
    if not ok:
        raise EngineError(f"cannot make the as-of-{as_of} layer over {source}: {out.strip()[-200:]}")
    return tag


def _note(line: str, progress, notes: list[str] | None) -> None:
    progress(line)
    if notes is not None:
        notes.append(line)


def table() -> list[tuple[str, str]]:
    """(public names, what stands in for them here), for `python -m environments bases`."""
    then = "; a Python the tests ask uv for and the archive lacks compiled from source (3.9-3.14)"
    rows = [("python:3.9*, python:3.11*, python:3.13* (no release named)",
             f"Debian bullseye, bookworm, trixie: Debian's python3 3.9, 3.11, 3.13, venv, pip {PIP_VERSION} "
             f"({PIP_VERSION_PY39} for 3.9)" + then),
            ("python:3.X-<release> (bullseye, bookworm, trixie), other python:3.X (trixie)",
             "that Debian release with CPython 3.X compiled into /usr/local, as the public image" + then),
            ("TB's python-3-13", "Debian trixie: python3 3.13, venv, pip " + PIP_VERSION),
            ("debian:11, 12, 13 (code names, point releases, -slim)", "that Debian release" + then)]
    for version, code in (("20.04", "focal"), ("22.04", "jammy"), ("24.04", "noble")):
        recipe = _UBUNTU_BY_RELEASE[code]
        why = unusable(recipe)
        names = f"ubuntu:{version}, ubuntu:{code}" + (", ubuntu:latest, TB's ubuntu-24-04" if code == "noble" else "")
        rows.append((names, f"Ubuntu {version} {code} from {UBUNTU}{then}" if why is None
                     else f"{recipe.fallback.describe()} ({why})"))
    rows += [("other ubuntu:*", _TRIXIE.describe()),
             ("ghcr.io/astral-sh/uv:<version>", "/uv, /uvx from the PyPI wheel")]
    return rows


def _label(engine: Engine, tag: str) -> str | None:
    try:
        return (engine._call(["image", "inspect", "--format", "{{index .Labels \"" + RECIPE_LABEL + "\"}}", tag], 60)
                .stdout.decode().strip() or None)
    except EngineError:
        return None
