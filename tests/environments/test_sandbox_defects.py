"""Regression tests for sandbox defects, one section per group of defects.

Each test runs with the bubblewrap launcher (skipped where `bwrap.probe()`
fails) and with the plain forked launcher, where both apply.
"""

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import gymnasium
import pytest

import environments  # noqa: F401
from environments import sandbox
from environments.sandbox import PlainLauncher, PythonJob, SandboxPool, ShellJob, Status, bwrap
from environments.sandbox import worker as wire

BWRAP_OK, BWRAP_REASON = bwrap.probe()
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCHERS = [
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=f"bwrap unusable here: {BWRAP_REASON}")),
    "plain",
]
ADD1 = PythonJob(source="def f(x): return x + 1", entry="f", calls=((1,), (41,)))


def _launcher(name: str):
    return bwrap.BwrapLauncher() if name == "bwrap" else PlainLauncher()


@pytest.fixture(params=LAUNCHERS)
def launcher_name(request):
    return request.param


@pytest.fixture
def pool(launcher_name):
    p = SandboxPool(size=2, launcher=_launcher(launcher_name))
    yield p
    p.close()


@pytest.fixture
def default_pool(launcher_name):
    """The process-wide pool (what the environments use), with the given launcher."""
    p = SandboxPool(size=2, launcher=_launcher(launcher_name))
    previous = sandbox.set_default_pool(p)
    yield p
    sandbox.set_default_pool(previous)
    p.close()


def _values(result):
    assert result.status is Status.OK, result
    return [r.get("ok", r.get("error")) for r in result.result["results"]]


def _job_dirs_in_tmp_root(pool) -> int:
    """Job directories in a worker's tmp root, the running job's own included.

    The root is 0711 (a job can traverse it, not list it), but its link count
    (2 + subdirectories) can be read by any job.
    """
    result = pool.run(ShellJob(script="stat -c %h .."))
    assert result.status is Status.OK, result
    return int(result.output.strip()) - 2


def _processes_matching(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `marker`."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        pids.append(int(name))
    return pids


# ----------------------------------------------------------------------------- thread / cleanup / size / text

# -- 1. a worker must outlive the thread that started it


def test_pool_started_from_an_exited_thread_serves_other_threads(pool):
    starter = threading.Thread(target=lambda: _values(pool.run(ADD1)))
    starter.start()
    starter.join()
    statuses = []
    for _ in range(20):  # each job from a fresh thread that exits right after
        t = threading.Thread(target=lambda: statuses.append(pool.run(ADD1)))
        t.start()
        t.join()
    assert [_values(r) for r in statuses] == [[2, 42]] * 20
    assert pool.workers_started <= 2


_HOST = """
import os, sys, threading, time
sys.path.insert(0, sys.argv[2])
from environments.sandbox import Limits, PlainLauncher, PythonJob, SandboxPool, ShellJob, bwrap
from environments.sandbox.pool import default_worker_config
launcher = bwrap.BwrapLauncher() if sys.argv[1] == "bwrap" else PlainLauncher()
# The marker (only in the workers' command lines) comes from the environment.
pool = SandboxPool(size=2, launcher=launcher, worker_config=dict(default_worker_config(), marker=os.environ["MARKER"]))
job = PythonJob(source="import time\\ndef f(): time.sleep(0.3); return 1", entry="f", calls=((),))
# Workers started by threads that have exited by the time the host is killed.
starters = [threading.Thread(target=pool.run, args=(job,)) for _ in range(2)]
for t in starters: t.start()
for t in starters: t.join()
# A worker busy with a long job does not read its pipe: only its death
# signal can stop it when the host dies.
long_job = PythonJob(source="import time\\ntime.sleep(60)", timeout_s=90)
m = os.environ["MARKER"]
long_shell = ShellJob(script=f"cp /bin/sleep {m} && (./{m} 60 & setsid ./{m} 61 & sleep 60)", timeout_s=90, limits=Limits(processes=16))
for j in (long_job, long_shell):
    threading.Thread(target=pool.run, args=(j,), daemon=True).start()
time.sleep(1.0)
print("ready", flush=True)
time.sleep(120)
"""


def test_workers_die_with_a_killed_host(launcher_name):
    marker = f"rlpt-host-kill-{uuid.uuid4().hex}"
    host = subprocess.Popen(
        [sys.executable, "-c", _HOST, launcher_name, REPO], stdout=subprocess.PIPE, text=True, env=dict(os.environ, MARKER=marker)
    )
    try:
        assert host.stdout.readline().strip() == "ready"
        assert host.pid not in _processes_matching(marker)
        assert len(_processes_matching(marker)) >= 4, "both workers and the shell job's sleepers should be running"
        host.send_signal(signal.SIGKILL)
        host.wait()
        deadline = time.monotonic() + 5.0
        while _processes_matching(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_matching(marker) == []
    finally:
        host.kill()
        host.wait()


# -- 2. a deep directory chain must not break clean-up

_DEEP = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"


@pytest.mark.parametrize("body, expected", [("x + 1", [2, 42]), ("x", [1, 41])], ids=["right", "wrong"])
def test_deep_directory_chain_gets_its_normal_verdict_and_is_removed(pool, body, expected):
    assert _job_dirs_in_tmp_root(pool) == 1
    result = pool.run(PythonJob(source=_DEEP + f"def f(x): return {body}\n", entry="f", calls=((1,), (41,)), timeout_s=10))
    assert _values(result) == expected
    assert _job_dirs_in_tmp_root(pool) == 1  # the 3000-deep job directory is gone
    assert _values(pool.run(ADD1)) == [2, 42]


def test_deep_directory_chain_in_a_shell_workspace_is_snapshotted_boundedly(pool):
    result = pool.run(ShellJob(script="mkdir -p $(printf 'd/%.0s' $(seq 3000)) && : > top.txt && echo made", timeout_s=10))
    assert result.status is Status.OK, result
    assert result.output == "made\n"
    assert result.files["top.txt"]["type"] == "file" and result.files["d"] == {"type": "dir"}
    assert result.files_truncated  # the chain is deeper than what the snapshot descends
    assert len(result.files) <= wire.MAX_SNAPSHOT_FILES
    assert max(len(path) for path in result.files) <= wire.MAX_SNAPSHOT_PATH_CHARS
    assert _job_dirs_in_tmp_root(pool) == 1


def test_unreadable_deep_directories_are_still_removed(pool):
    # Directories the job made unreadable and unwritable (000 / 500) on the way down.
    script = "mkdir -p a/b/c && : > a/b/c/f && chmod 500 a/b && chmod 000 a/b/c && chmod 000 a && echo ok"
    result = pool.run(ShellJob(script=script))
    assert result.status is Status.OK and result.output == "ok\n", result
    assert _job_dirs_in_tmp_root(pool) == 1


# -- 3. a large workspace must not kill the worker


def _big_workspace(source: str) -> str:
    return f"for i in $(seq 255); do head -c 65536 {source} > f$i; done"


@pytest.mark.parametrize("source", ["/dev/zero", "/dev/urandom"])
def test_large_workspace_comes_back_truncated_with_sizes_and_hashes(pool, source):
    result = pool.run(ShellJob(script=_big_workspace(source), timeout_s=10))
    assert result.status is Status.OK, result
    files = {path: info for path, info in result.files.items() if path.startswith("f")}
    assert len(files) == 255 and not result.files_truncated
    assert all(info["size"] == 65536 and len(info["sha256"]) == 64 for info in files.values())
    if source == "/dev/zero":
        zeros = hashlib.sha256(bytes(65536)).hexdigest()
        assert all(info["sha256"] == zeros for info in files.values())
    assert any(info["truncated"] for info in files.values())
    whole = [info for info in files.values() if not info["truncated"]]
    assert len(whole) * 65536 <= wire.MAX_SNAPSHOT_BYTES  # contents returned in all are bounded
    assert len(wire.encode_frame(result.files)) < wire.MAX_FRAME_BYTES // 4
    assert _values(pool.run(ADD1)) == [2, 42]


def test_small_files_keep_their_contents_next_to_large_ones(pool):
    script = _big_workspace("/dev/urandom") + "; echo hello > small.txt"
    result = pool.run(ShellJob(script=script, timeout_s=10))
    assert result.status is Status.OK, result
    small = result.files["small.txt"]
    assert small["data"] == "hello\n" and not small["truncated"]
    assert small["sha256"] == hashlib.sha256(b"hello\n").hexdigest()


def test_no_response_frame_exceeds_the_limit(pool):
    huge_output = pool.run(PythonJob(source="import sys\nsys.stdout.write('\\x01' * (64 << 20))", output_limit=1 << 30, timeout_s=10))
    assert huge_output.status is Status.OK, huge_output
    assert huge_output.output_bytes == 64 << 20 and len(huge_output.output) <= wire.MAX_OUTPUT_BYTES
    links = "t=$(printf 'x%.0s' $(seq 4000)); for i in $(seq 255); do ln -s $t l$i; done"
    result = pool.run(ShellJob(script=links, timeout_s=10))
    assert result.status is Status.OK, result
    assert len(result.files) == 255
    assert _values(pool.run(ADD1)) == [2, 42]


def _terminal(domain: str):
    env = gymnasium.make(domain)
    _, info = env.reset(seed=0)
    return env, info["demonstration"], env.unwrapped.task


def test_terminal_grades_a_correct_answer_next_to_a_large_workspace(default_pool):
    env, demo, _ = _terminal("rlpt/terminal-create-easy-v0")
    answer = f"{demo}; for i in $(seq 250); do head -c 65536 /dev/zero > f$i; done"
    assert len(answer) <= env.unwrapped.domain_spec.max_answer_chars
    _, reward, _, _, info = env.step(answer)
    assert (info["verdict"], reward) == ("PASS", 1.0), info


@pytest.mark.parametrize("source", ["/dev/zero", "/dev/urandom"])
def test_terminal_large_workspace_gets_a_model_verdict(default_pool, source):
    env, _, _ = _terminal("rlpt/terminal-upper-hard-v0")
    _, reward, _, _, info = env.step(_big_workspace(source))
    assert (info["verdict"], reward, info["infra_error"]) == ("FAIL", 0.0, False), info


def test_terminal_graded_file_with_truncated_contents_fails_clearly(default_pool):
    env, demo, task = _terminal("rlpt/terminal-upper-easy-v0")
    # out.txt: the right text, padding past what the snapshot returns, then junk
    # (so the file is wrong, though its returned prefix looks right).
    answer = f"{demo}; head -c 99999 /dev/zero | tr '\\0' ' ' >> out.txt; echo junk >> out.txt"
    assert len(answer) <= env.unwrapped.domain_spec.max_answer_chars
    _, reward, _, _, info = env.step(answer)
    assert (info["verdict"], reward) == ("FAIL", 0.0), info
    assert "out.txt" in info["feedback"] and "too large" in info["feedback"]


def test_terminal_listing_past_the_entry_cap_cannot_hide_files(default_pool):
    # Without deleting the .log files, 300 entries that sort before them must
    # not push them out of the snapshot and earn a PASS.
    env, demo, _ = _terminal("rlpt/terminal-delete-easy-v0")
    _, reward, _, _, info = env.step("for i in $(seq 300); do : > a$i; done")
    assert (info["verdict"], reward) == ("FAIL", 0.0), info
    env.reset(seed=0)
    _, reward, _, _, info = env.step(demo)
    assert (info["verdict"], reward) == ("PASS", 1.0), info


# -- 7. text leaving environments is valid UTF-8

_SURROGATE_ANSWER = 'exec("raise OSError(\'\\\\ud800\')")'  # the model's text holds "\\ud800"


def _assert_strict_utf8(value):
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, dict):
        for k, v in value.items():
            _assert_strict_utf8(k)
            _assert_strict_utf8(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _assert_strict_utf8(v)


def test_lone_surrogate_in_feedback_is_valid_utf8(default_pool):
    env = gymnasium.make("rlpt/code-linear-easy-v0", max_attempts=2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(_SURROGATE_ANSWER)
    assert info["verdict"] == "ERROR" and not terminated and not truncated
    _assert_strict_utf8(obs)
    _assert_strict_utf8(info)
    assert "OSError" in obs and "\\ud800" in obs  # shown escaped, not dropped
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    assert tok.encode(obs).ids and tok.encode(info["feedback"]).ids


def test_sandbox_text_is_valid_utf8(pool):
    raised = pool.run(PythonJob(source="raise OSError('\\ud800')"))
    assert raised.status is Status.OK and raised.result["error_type"] == "OSError"
    _assert_strict_utf8(raised.result)
    named = pool.run(ShellJob(script="touch \"$(printf 'bad\\377name')\" && ln -s \"$(printf '\\377')\" link && echo ok"))
    assert named.status is Status.OK and named.output == "ok\n", named
    _assert_strict_utf8(named.files)
    assert "bad\\xffname" in named.files and named.files["link"]["target"] == "\\xff"


# ----------------------------------------------------------------------------- runtime


def test_commands_behind_etc_alternatives_run(pool):
    """Debian's /usr/bin/awk (and other commands) link through /etc/alternatives,
    which the bubblewrap runtime must include: a shell task may use awk."""
    if not os.path.exists("/etc/alternatives/awk"):
        pytest.skip("no awk alternative on this host")
    result = pool.run(ShellJob(script="printf 'a 1\\nb 2\\n' | awk '{s += $2} END {print s}'"))
    assert result.status is Status.OK and result.exit_code == 0, result
    assert result.output == "3\n"
