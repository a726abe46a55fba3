"""CPython compiled from a distribution's source package, for stand-ins whose archive lacks it.

The public `python:3.X` images are CPython 3.X compiled into /usr/local on a Debian
release (`python:3.13-slim-bookworm` is bookworm with 3.13), and a Terminal-Bench
test asks uv for a Python (`uvx -p 3.13`) that uv would download from GitHub,
which is not reachable here. Both are met the way the public images are made:
CPython's source, compiled on the stand-in's own release and installed into
/usr/local (`make altinstall`: `python3.X`, `pip3.X`, no `python3`), so the
release's own `python3` and libraries stay as they are.

The source is the upstream tarball Debian or Ubuntu ships as the `orig` tarball of
its `python3.X` source package, checked as apt checks it: the suite's InRelease
verified with gpgv against the archive's keyring on this machine, then the
Sources index and the tarball by their SHA-256. It is compiled once per
(release, version) in a throwaway mmdebstrap chroot with the build dependencies
and cached (bases.py: under CACHE_DIR/cpython): a tarball of /usr/local and the list of the
release's packages its libraries load (from `ldd` and `dpkg-query -S`, so no
package names are guessed per release); the stand-in installs those packages
and unpacks the tarball (`Recipe.built` in bases.py).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import lzma
import os
import re
import shutil
import subprocess
import tempfile
import urllib.request

from environments.containers.engine import EngineError

# The archives and their keys (bases.py builds the stand-ins from the same ones).
DEBIAN = "http://deb.debian.org/debian"
UBUNTU = "http://archive.ubuntu.com/ubuntu"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
UBUNTU_KEYRING = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"  # Debian's ubuntu-keyring package
ARCHIVES = {"debian": (DEBIAN, DEBIAN_KEYRING), "ubuntu": (UBUNTU, UBUNTU_KEYRING)}
# Where each CPython minor's source package is, newest patch release first.
SOURCES = {
    "3.9": (("debian", "bullseye"),),
    "3.10": (("ubuntu", "jammy-updates"), ("ubuntu", "jammy")),
    "3.11": (("debian", "bookworm"),),
    "3.12": (("ubuntu", "noble-updates"), ("ubuntu", "noble")),
    "3.13": (("debian", "forky"), ("debian", "trixie")),
    "3.14": (("debian", "forky"), ("debian", "sid")),
}
# How a build is made; a change rebuilds every cached CPython.
BUILD_VERSION = 2
BUILD_DEPENDS = ("build-essential", "pkg-config", "xz-utils", "libssl-dev", "zlib1g-dev", "libffi-dev", "libsqlite3-dev",
                 "libbz2-dev", "liblzma-dev", "libreadline-dev", "libncurses-dev", "uuid-dev", "libgdbm-dev")
BUILD_TIMEOUT_S = 3600
# Configure as the public images do, less PGO and LTO (they would treble the build):
# a shared libpython found through the rpath, pip by ensurepip, no static library.
_FAILED = "rlpt-cpython: compile failed at"  # the build script's own failures (cached, not retried per task)
_BUILD_SH = r"""set -eu
version="$1"
FAILED="@FAILED@"
mkdir -p /tmp/src && tar -xJf /tmp/src.tar.xz -C /tmp/src --strip-components=1 && cd /tmp/src
./configure --prefix=/usr/local --enable-shared --with-ensurepip=install --without-static-libpython \
    LDFLAGS="-Wl,-rpath=/usr/local/lib" > /tmp/configure.log 2>&1 || { tail -n 30 /tmp/configure.log >&2; echo "$FAILED configure" >&2; exit 1; }
make -j"$(nproc)" > /tmp/make.log 2>&1 || { grep -m 5 -E "error|Error" /tmp/make.log >&2; tail -n 20 /tmp/make.log >&2; echo "$FAILED make" >&2; exit 1; }
make altinstall > /tmp/install.log 2>&1 || { tail -n 30 /tmp/install.log >&2; echo "$FAILED make altinstall" >&2; exit 1; }
# As the public images: no test suites, no bytecode caches.
find /usr/local -depth \( -type d -a \( -name test -o -name tests -o -name idle_test \) \) -exec rm -rf '{}' +
find /usr/local -depth -type d -name __pycache__ -exec rm -rf '{}' +
"/usr/local/bin/python$version" -c "import ssl, sqlite3, zlib, bz2, lzma, ctypes, readline, uuid, dbm, hashlib" \
  || { echo "$FAILED a standard module does not import" >&2; exit 1; }
tar -C / -cf /tmp/python.tar usr/local
# The release's packages whose libraries it loads (usrmerge: dpkg may know /lib or /usr/lib).
ldd "/usr/local/bin/python$version" /usr/local/lib/libpython*.so* /usr/local/lib/python"$version"/lib-dynload/*.so \
  | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | grep -v '^/usr/local/' | sort -u | while read -r lib; do
    for p in "$lib" "$(readlink -f "$lib")" "/usr$lib" "${lib#/usr}"; do
      dpkg-query -S "$p" 2>/dev/null | grep -v '^diversion by ' | grep -q . && { dpkg-query -S "$p" 2>/dev/null; break; }
    done
  done > /tmp/runtime.txt
""".replace("@FAILED@", _FAILED)


@dataclasses.dataclass(frozen=True)
class Source:
    minor: str  # 3.13
    version: str  # 3.13.15 (upstream)
    package: str  # Debian's source package version, 3.13.15-1
    url: str
    sha256: str
    origin: str  # "debian forky"


@dataclasses.dataclass(frozen=True)
class Build:
    source: Source
    tarball: str  # /usr/local, as a tar
    packages: tuple[str, ...]  # the release's packages its libraries load


def _get(url: str, timeout: int = 120) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except (OSError, ValueError) as e:
        raise EngineError(f"cannot download {url}: {str(e)[:200]}") from e


def _verified_release(archive: str, keyring: str, suite: str) -> str:
    """The suite's InRelease, its signature checked against `keyring` (as apt does)."""
    if not os.path.isfile(keyring):
        raise EngineError(f"the archive key {keyring} is not installed (launch/setup_system.sh installs it)")
    data = _get(f"{archive}/dists/{suite}/InRelease")
    with tempfile.NamedTemporaryFile(suffix=".InRelease") as f:
        f.write(data)
        f.flush()
        proc = subprocess.run(["gpgv", "--keyring", keyring, f.name], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise EngineError(f"{archive} {suite} InRelease: bad signature ({(proc.stderr.strip().splitlines() or ['?'])[-1][:200]})")
    return data.decode("utf-8", "replace")


def _sha256_of(release: str, path: str) -> str:
    section = release.split("SHA256:", 1)[-1]
    for line in section.splitlines()[1:]:
        if not line.startswith(" "):
            break
        digest, _size, name = line.split()
        if name == path:
            return digest
    raise EngineError(f"the Release file lists no {path}")


def parse_sources(text: str, package: str) -> dict[str, str] | None:
    """The stanza of source `package` in a Sources index (the newest where several),
    as {"Version", "Directory", "orig", "sha256"}, or None."""
    best = None
    for stanza in text.split("\n\n"):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Package") != package:
            continue
        for line in fields.get("Checksums-Sha256", "").splitlines():
            parts = line.split()
            if len(parts) == 3 and re.fullmatch(r".+\.orig\.tar\.(xz|gz|bz2)", parts[2]):
                entry = {"Version": fields["Version"], "Directory": fields["Directory"], "orig": parts[2], "sha256": parts[0]}
                if best is None or _version_key(entry["Version"]) > _version_key(best["Version"]):
                    best = entry
    return best


def owners(dpkg_s: str) -> tuple[str, ...]:
    """The packages `dpkg-query -S` output names (`libssl3t64:amd64: /usr/lib/...`,
    `pkg1, pkg2: /path`), less its diversion lines (`diversion by libreadline8t64 from: ...`)."""
    names = set()
    for line in dpkg_s.splitlines():
        if not line.strip() or line.startswith("diversion by ") or ": " not in line:
            continue
        for name in line.split(": ", 1)[0].split(", "):
            name = name.strip().split(":", 1)[0]
            if re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", name):
                names.add(name)
    return tuple(sorted(names))


def _version_key(version: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.+~-]", version.split(":")[-1]))


def find(minor: str) -> Source:
    """Where CPython `minor`'s source is (network: the archives' indexes)."""
    if minor not in SOURCES:
        raise EngineError(f"no source for CPython {minor} is known (known: {', '.join(SOURCES)})")
    tried = []
    for distro, suite in SOURCES[minor]:
        archive, keyring = ARCHIVES[distro]
        index = "main/source/Sources.xz"
        try:
            release = _verified_release(archive, keyring, suite)
            raw = _get(f"{archive}/dists/{suite}/{index}", timeout=300)
            if hashlib.sha256(raw).hexdigest() != _sha256_of(release, index):
                raise EngineError(f"{archive} {suite} {index}: SHA-256 differs from InRelease")
            entry = parse_sources(lzma.decompress(raw).decode("utf-8", "replace"), f"python{minor}")
        except EngineError as e:
            tried.append(f"{distro} {suite}: {e}")
            continue
        if entry is None:
            tried.append(f"{distro} {suite}: no python{minor} source package")
            continue
        upstream = entry["orig"].split("_", 1)[1].rsplit(".orig", 1)[0]
        return Source(minor, upstream, entry["Version"], f"{archive}/{entry['Directory']}/{entry['orig']}",
                      entry["sha256"], f"{distro} {suite}")
    raise EngineError(f"no CPython {minor} source reachable: " + "; ".join(tried))


def _tarball(source: Source, cache: str) -> str:
    path = os.path.join(cache, "src", os.path.basename(source.url))
    if os.path.isfile(path) and _file_sha256(path) == source.sha256:
        return path
    data = _get(source.url, timeout=600)
    if hashlib.sha256(data).hexdigest() != source.sha256:
        raise EngineError(f"{source.url}: SHA-256 differs from the {source.origin} Sources index")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".part", "wb") as f:
        f.write(data)
    os.replace(path + ".part", path)
    return path


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cached(minor: str, distro: str, suite: str, cache: str) -> Build | None:
    """A build of `minor` for (distro, suite) already in the folder `cache` (no network), or None."""
    root = os.path.join(cache, f"{distro}-{suite}", minor)
    meta = os.path.join(root, "build.txt")
    if not os.path.isfile(meta):
        return None
    with open(meta) as f:
        fields = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    if fields.get("build") != str(BUILD_VERSION) or not os.path.isfile(os.path.join(root, "python.tar")):
        return None
    source = Source(minor, fields["version"], fields["package"], fields["url"], fields["sha256"], fields["origin"])
    return Build(source, os.path.join(root, "python.tar"), tuple(fields["packages"].split()))


def build(minor: str, distro: str, suite: str, sources: list[str], cache: str, progress=print) -> Build:
    """CPython `minor` compiled on (distro, suite) (`sources`: mmdebstrap's mirror
    arguments for it), cached in the folder `cache`; EngineError naming the step that failed. One process
    compiles a given (release, version) at a time; another waits and reads its build."""
    done = cached(minor, distro, suite, cache)
    if done is not None:
        return done
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, f".{distro}-{suite}-{minor}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(minor, distro, suite, sources, cache, progress)


def _build_locked(minor: str, distro: str, suite: str, sources: list[str], cache: str, progress) -> Build:
    done = cached(minor, distro, suite, cache)
    if done is not None:
        return done
    root = os.path.join(cache, f"{distro}-{suite}", minor)
    failed = os.path.join(root, "failed.txt")
    if os.path.isfile(failed):  # a compile that failed is not retried for every task (remove the file to retry)
        with open(failed) as f:
            build_version, _, why = f.read().partition("\n")
        if build_version == str(BUILD_VERSION):
            raise EngineError(f"{why.strip()} (an earlier attempt; remove {failed} to retry)")
    if shutil.which("mmdebstrap") is None:
        raise EngineError("mmdebstrap is not installed (launch/setup_system.sh installs it)")
    source = find(minor)
    tarball = _tarball(source, cache)
    progress(f"CPython {source.version} (source package {source.package}, {source.origin}): compiling on "
             f"{distro.capitalize()} {suite}, once (several minutes)")
    with tempfile.TemporaryDirectory(dir=cache, prefix="build-") as tmp:
        script = os.path.join(tmp, "build.sh")
        with open(script, "w") as f:
            f.write(_BUILD_SH)
        cmd = ["mmdebstrap", "--variant=minbase", "--quiet", f"--include={','.join(BUILD_DEPENDS)}",
               f"--customize-hook=upload {tarball} /tmp/src.tar.xz", f"--customize-hook=upload {script} /tmp/build.sh",
               f'--customize-hook=chroot "$1" sh /tmp/build.sh {minor}',
               f"--customize-hook=download /tmp/python.tar {tmp}/python.tar",
               f"--customize-hook=download /tmp/runtime.txt {tmp}/runtime.txt",
               suite.split("-")[0], "/dev/null", *sources]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise EngineError(f"compiling CPython {source.version} on {suite} ran past {BUILD_TIMEOUT_S} s") from e
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            why = f"compiling CPython {source.version} on {suite} failed: " + " | ".join(lines[-6:])[-600:]
            if _FAILED in proc.stderr:
                os.makedirs(root, exist_ok=True)
                with open(failed, "w") as f:
                    f.write(f"{BUILD_VERSION}\n{why}\n")
            raise EngineError(why)
        with open(os.path.join(tmp, "runtime.txt")) as f:
            packages = owners(f.read())
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        shutil.move(os.path.join(tmp, "python.tar"), os.path.join(root, "python.tar"))
        with open(os.path.join(root, "build.txt"), "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in (
                ("build", BUILD_VERSION), ("version", source.version), ("package", source.package), ("url", source.url),
                ("sha256", source.sha256), ("origin", source.origin), ("packages", " ".join(packages)))))
    return cached(minor, distro, suite, cache)
