"""An attacker's memory scan, as a candidate program runs it, for the tests
that check no job can read another job's material (test_sealed.py).

`SCANNER` is stdlib-only Python source defining `_rlpt_scan(digest)`: it
reads every readable region (listed in /proc/PID/maps) of every process it
may read (its own first), with process_vm_readv or else /proc/PID/mem, finds each occurrence of the marker
``MARKER`` and hashes the `SECRET_CHARS` bytes after it. It returns
[hits, bytes_read]: hits counts occurrences whose hash is `digest`. The
marker is built at run time and the secret is never in the scanner, so the
scan cannot find what it carries itself: a hit means the secret is in memory
the candidate can read.

A secret is MARKER + SECRET_CHARS hex characters (`new_secret`); a test plants
one in a job through a grading path, then runs the scan as a later candidate
on the same pool and asserts it finds nothing; the control, a scan whose own
job carries the secret, must find it.
"""

from __future__ import annotations

import hashlib
import secrets

MARKER = "RLPT" + "SEAL-"
SECRET_CHARS = 32

SCANNER = '''
import ctypes as _ctypes
import hashlib as _hashlib
import os as _os


class _IOVec(_ctypes.Structure):
    _fields_ = [("base", _ctypes.c_void_p), ("len", _ctypes.c_size_t)]


_libc = _ctypes.CDLL(None, use_errno=True)
_libc.process_vm_readv.restype = _ctypes.c_ssize_t


def _reader(pid):
    """read(address, n) -> bytes of process `pid` (b"" where unreadable):
    process_vm_readv (a bad address is an error, never a crash), else /proc/PID/mem."""
    buf = _ctypes.create_string_buffer(1 << 20)

    def by_syscall(address, n):
        local, remote = _IOVec(_ctypes.addressof(buf), n), _IOVec(address, n)
        got = _libc.process_vm_readv(pid, _ctypes.byref(local), 1, _ctypes.byref(remote), 1, 0)
        return buf.raw[:got] if got > 0 else b""

    return by_syscall


def _rlpt_scan(digest, length=%(length)d):
    marker = ("RLPT" + "SEAL-").encode()
    keep = len(marker) + length
    hits = read = 0
    me = _os.getpid()
    pids = [me] + sorted(int(p) for p in _os.listdir("/proc") if p.isdigit() and int(p) != me)
    for pid in pids:
        try:
            with open("/proc/%%d/maps" %% pid) as f:
                regions = f.read().splitlines()
        except OSError:
            continue
        fetch = _reader(pid)
        try:
            mem = open("/proc/%%d/mem" %% pid, "rb", buffering=0)
        except OSError:
            mem = None
        for line in regions:
            fields = line.split()
            if "r" not in fields[1] or fields[-1] in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            at, tail = low, b""
            while at < high:
                n = min(1 << 20, high - at)
                chunk = fetch(at, n)
                if not chunk and mem is not None:
                    try:
                        mem.seek(at)
                        chunk = mem.read(n)
                    except (OSError, ValueError, OverflowError):
                        chunk = b""
                if not chunk:
                    break
                data = tail + chunk
                i = data.find(marker)
                while i >= 0:
                    found = data[i + len(marker):i + keep]
                    if len(found) == length and _hashlib.sha256(found).hexdigest() == digest:
                        hits += 1
                    i = data.find(marker, i + 1)
                tail = data[-keep:]
                read += len(chunk)
                at += len(chunk)
        if mem is not None:
            mem.close()
    return [hits, read]
''' % {"length": SECRET_CHARS}


def new_secret() -> str:
    """A fresh secret: the marker and SECRET_CHARS random hex characters."""
    return MARKER + secrets.token_hex(SECRET_CHARS // 2)


def digest(secret: str) -> str:
    """What the scanner is given to recognise `secret` by (never the secret itself)."""
    return hashlib.sha256(secret[len(MARKER):].encode()).hexdigest()


def python_scan(secret: str, carry: bool = False) -> str:
    """Source of a candidate that defines `scan()` -> [hits, bytes read]; with
    `carry`, its own source holds the secret (the control)."""
    own = f"_carried = {secret!r}\n" if carry else ""  # a constant: kept in memory as long as the module
    return f"{own}{SCANNER}\n\ndef scan():\n    return _rlpt_scan({digest(secret)!r})\n"


def cad_scan(secret: str, carry: bool = False, assembly: bool = False) -> str:
    """A build123d script that scans, prints `memscan <hits> <bytes read>` and
    builds a valid part (or a one-part assembly)."""
    own = f"# {secret}\n" if carry else ""
    result = "[Box(10, 10, 10)]" if assembly else "Box(10, 10, 10)"
    return (f"{own}from build123d import Box\n{SCANNER}\n"
            f"_hits, _read = _rlpt_scan({digest(secret)!r})\n"
            f"print('memscan', _hits, _read)\nresult = {result}\n")


def parse_log(line: str) -> tuple[int, int]:
    """(hits, bytes read) from a scan's `memscan` line."""
    word, hits, read = line.split()
    assert word == "memscan", line
    return int(hits), int(read)
