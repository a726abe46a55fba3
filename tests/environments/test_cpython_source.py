"""CPython from a distribution's source package (environments.containers.cpython).

The archive's files here are of our own making (a Sources index, a Release file
and a tarball standing in for the orig tarball); the signature check is gpgv's,
replaced here by a function returning our Release text. The compile itself runs
in benchmarks/task_folders.py and the terminal-task builds, not here (minutes).
"""

import hashlib
import lzma

import pytest

from environments.containers import cpython
from environments.containers.engine import EngineError

SOURCES = """Package: python3.13
Binary: python3.13, python3.13-venv
Version: 3.13.5-2
Directory: pool/main/p/python3.13
Checksums-Sha256:
 {dsc} 3210 python3.13_3.13.5-2.dsc
 {old} 22856016 python3.13_3.13.5.orig.tar.xz
 {deb} 250000 python3.13_3.13.5-2.debian.tar.xz

Package: python3.13
Version: 3.13.15-1
Directory: pool/main/p/python3.13
Checksums-Sha256:
 {dsc} 3210 python3.13_3.13.15-1.dsc
 {new} 23160540 python3.13_3.13.15.orig.tar.xz

Package: python3.14
Version: 3.14.8-1
Directory: pool/main/p/python3.14
Checksums-Sha256:
 {dsc} 3100 python3.14_3.14.8-1.dsc
 {dsc} 23000000 python3.14_3.14.8.orig.tar.xz
"""


def _sources(new="b" * 64):
    return SOURCES.format(dsc="a" * 64, old="c" * 64, deb="d" * 64, new=new)


def test_the_newest_source_stanza_and_its_orig_tarball_are_read():
    entry = cpython.parse_sources(_sources(), "python3.13")
    assert entry == {"Version": "3.13.15-1", "Directory": "pool/main/p/python3.13",
                     "orig": "python3.13_3.13.15.orig.tar.xz", "sha256": "b" * 64}
    assert cpython.parse_sources(_sources(), "python3.12") is None
    assert cpython._version_key("3.13.15-1") > cpython._version_key("3.13.5-2+deb13u5")


def test_find_checks_the_index_and_the_tarball_against_the_signed_release(monkeypatch, tmp_path):
    tarball = b"not really a tarball"
    index = lzma.compress(_sources(hashlib.sha256(tarball).hexdigest()).encode())
    release = ("Origin: Debian\nSHA256:\n"
               f" {hashlib.sha256(index).hexdigest()} {len(index)} main/source/Sources.xz\n"
               f" {'e' * 64} 100 main/binary-amd64/Packages.xz\n")
    files = {"http://deb.debian.org/debian/dists/forky/main/source/Sources.xz": index,
             "http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_3.13.15.orig.tar.xz": tarball}
    asked = []

    def get(url, timeout=120):
        asked.append(url)
        if url not in files:
            raise EngineError(f"cannot download {url}: HTTP Error 404")
        return files[url]
    monkeypatch.setattr(cpython, "_get", get)
    monkeypatch.setattr(cpython, "_verified_release", lambda archive, keyring, suite: release)
    source = cpython.find("3.13")
    assert (source.version, source.package, source.origin) == ("3.13.15", "3.13.15-1", "debian forky")
    with open(cpython._tarball(source, str(tmp_path)), "rb") as f:
        assert f.read() == tarball
    # A tarball or an index that is not what the signed Release says is refused, never used.
    files[source.url] = b"tampered"
    (tmp_path / "src" / "python3.13_3.13.15.orig.tar.xz").unlink()
    with pytest.raises(EngineError, match="SHA-256 differs"):
        cpython._tarball(source, str(tmp_path))
    files["http://deb.debian.org/debian/dists/forky/main/source/Sources.xz"] = lzma.compress(b"Package: python3.13\n")
    with pytest.raises(EngineError, match=r"no CPython 3\.13 source reachable: debian forky: .*SHA-256 differs.*; "
                                          r"debian trixie: cannot download"):
        cpython.find("3.13")
    with pytest.raises(EngineError, match=r"no source for CPython 3\.8 is known"):
        cpython.find("3.8")


def test_a_build_is_read_back_from_the_cache_and_a_failed_compile_is_not_retried(monkeypatch, tmp_path):
    assert cpython.cached("3.13", "debian", "bookworm", str(tmp_path)) is None
    root = tmp_path / "debian-bookworm" / "3.13"
    root.mkdir(parents=True)
    (root / "python.tar").write_bytes(b"")
    (root / "build.txt").write_text(f"build={cpython.BUILD_VERSION}\nversion=3.13.15\npackage=3.13.15-1\nurl=http://x/y.tar.xz\n"
                                    f"sha256={'b' * 64}\norigin=debian forky\npackages=libffi8 libssl3 zlib1g\n")
    build = cpython.build("3.13", "debian", "bookworm", [], str(tmp_path), progress=None)  # from the cache: nothing asked
    assert build.packages == ("libffi8", "libssl3", "zlib1g") and build.source.version == "3.13.15"
    (root / "build.txt").write_text("build=0\n")  # another way of building: not this one
    assert cpython.cached("3.13", "debian", "bookworm", str(tmp_path)) is None
    (root / "failed.txt").write_text(f"{cpython.BUILD_VERSION}\ncompiling CPython 3.13.15 on bookworm failed: make\n")
    monkeypatch.setattr(cpython.shutil, "which", lambda name: "/usr/bin/" + name)
    with pytest.raises(EngineError, match=r"failed: make \(an earlier attempt; remove .*failed.txt to retry\)"):
        cpython.build("3.13", "debian", "bookworm", [], str(tmp_path), progress=None)


def test_the_build_script_marks_its_own_failures():
    # Only the compile's own failures are cached (a network error is retried next time).
    assert cpython._BUILD_SH.count(f'FAILED="{cpython._FAILED}"') == 1 and cpython._BUILD_SH.count("$FAILED") == 4
    assert "make altinstall" in cpython._BUILD_SH and "--prefix=/usr/local" in cpython._BUILD_SH


def test_the_runtime_packages_are_read_from_dpkg_s_without_its_diversion_lines():
    # As Ubuntu 24.04 answers for libreadline's files (t64 transition diversions).
    out = ("diversion by libreadline8t64 from: /lib/x86_64-linux-gnu/libreadline.so.8\n"
           "diversion by libreadline8t64 to: /lib/x86_64-linux-gnu/libreadline.so.8.usr-is-merged\n"
           "libreadline8t64:amd64: /lib/x86_64-linux-gnu/libreadline.so.8\n"
           "libssl3t64:amd64: /usr/lib/x86_64-linux-gnu/libssl.so.3\n"
           "libc6:amd64, libc6-dev:amd64: /usr/lib/x86_64-linux-gnu/libm.so.6\n"
           "zlib1g:amd64: /lib/x86_64-linux-gnu/libz.so.1\n\n")
    assert cpython.owners(out) == ("libc6", "libc6-dev", "libreadline8t64", "libssl3t64", "zlib1g")
