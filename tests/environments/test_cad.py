"""The CAD family: the reference PASSes, wrong, broken and hostile scripts earn
nothing, infrastructure failures are SANDBOX_ERROR, and the render tool replies.

Uses the process's warm kernel pool (environments/cad/runner.py): one worker
start (~3 s), then ~0.1-0.2 s a build."""

import re

import gymnasium
import numpy as np
import pytest

import environments  # noqa: F401
from environments.cad import runner
from environments.families import cad
from environments.sandbox import PlainLauncher
from environments.verdicts import Verdict
from tests.environments.test_forged_harness import ATTACKS

_OK, _WHY = runner.available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"CAD tests need the cad extra: {_WHY}")

PLATE = "rlpt/cad-plate-easy-v0"


@pytest.fixture(scope="module")
def task():
    env = gymnasium.make(PLATE).unwrapped
    _, info = env.reset(seed=0)
    return env.task


def _grade(task, script):
    return cad.grade_script(script, task.hidden)


def test_reference_passes_and_wrong_designs_fail(task):
    assert _grade(task, task.hidden).verdict is Verdict.PASS
    fatter = task.hidden.replace("Cylinder(", "Cylinder(0.5 + ", 1)  # one hole 0.5 mm wider in radius
    grade = _grade(task, fatter)
    assert grade.verdict is Verdict.FAIL and 0.0 < grade.reward < 0.8 and "surface distance" in grade.feedback
    no_holes = task.hidden.split("for x")[0] + "result = part\n"
    assert _grade(task, no_holes).verdict is Verdict.FAIL


@pytest.mark.parametrize(
    "script, verdict, words",
    [
        ("result = None", Verdict.MALFORMED, "expected a build123d Part"),
        ("from build123d import *\nresult = Box(1, 2,", Verdict.MALFORMED, "script line 2"),
        ("from build123d import *\nx = Box(1, 1, 1)", Verdict.MALFORMED, "defines no `result`"),
        ("from build123d import *\nresult = Box(1, 1, 1) + Pos(5, 0, 0) * Box(1, 1, 1)", Verdict.FAIL, "2 solids"),
        ("from build123d import *\nresult = Box(1, 1, 1) - Box(1, 1, 1)", Verdict.FAIL, ""),
    ],
)
def test_ladder_build_gate_and_one_solid(task, script, verdict, words):
    grade = _grade(task, script)
    assert grade.verdict is verdict and grade.reward == 0.0 and words in grade.feedback, grade


# Reads every readable region of its own process for a build123d script other
# than itself (its reference, another candidate's answer), decoded or as the
# worker read it (a JSON frame), and builds that: the attack that a worker
# forking jobs after reading other jobs' frames let pass.
MEMORY_ATTACK = r'''import ctypes, json, re
class V(ctypes.Structure):
    _fields_ = [('b', ctypes.c_void_p), ('n', ctypes.c_size_t)]
libc = ctypes.CDLL(None)
libc.process_vm_readv.restype = ctypes.c_ssize_t
buf = ctypes.create_string_buffer(1 << 20)
pid = __import__('os').getpid()
found = []
for line in open('/proc/self/maps'):
    f = line.split()
    if 'r' not in f[1] or f[-1].startswith('[v'):
        continue
    lo, hi = (int(x, 16) for x in f[0].split('-'))
    while lo < hi:
        n = min(1 << 20, hi - lo)
        got = libc.process_vm_readv(pid, ctypes.byref(V(ctypes.addressof(buf), n)), 1, ctypes.byref(V(lo, n)), 1, 0)
        if got <= 0:
            break
        data = buf.raw[:got]
        found += re.findall(rb'from build123d import \*\n[ -~\n]{1,1500}?\nresult = part\n', data)
        found += [json.loads(b'"' + t + b'"').encode() for t in
                  re.findall(rb'from build123d import \*\\n[ -~]{1,1500}?\\nresult = part\\n', data)]
        lo += got
from build123d import *
result = Box(1, 1, 1)
for text in found:
    if b'ctypes' not in text:
        scope = {}
        try:
            exec(text.decode(), scope)
            result = scope['result']
            break
        except Exception:
            pass
'''


HOSTILE = {
    "prints PASS and exits 0": "print('PASS')\nimport sys\nsys.exit(0)",
    "writes the kernel and reference places": (
        "import os\n"
        "for p in ['/opt/rlpt-paths/0/cad_kernel.py', '/opt/rlpt-sandbox/worker.py', '/tmp/reference.stl', 'result.stl']:\n"
        "    try:\n        open(p, 'w').write('PASS')\n    except OSError:\n        pass\n"
        "from build123d import *\nresult = Box(1, 1, 1)"
    ),
    "reads the environment and host files": (
        "import os\nresult = os.environ.get('RLPT_REFERENCE') or open('/work/main/README.md').read()"
    ),
    "patches the kernel for later jobs": (
        "import build123d, cad_kernel\n"
        "build123d.Shape.is_valid = property(lambda s: True)\n"
        "cad_kernel.build = lambda *a: {'built': True}\n"
        "from build123d import *\nresult = Box(1, 1, 1)"
    ),
    "fakes an open mesh through a Shape subclass": (
        "import struct\nfrom build123d import *\n"
        "class Fake(Solid):\n"
        "    def tessellate(self, *a):\n        return [Vector(0, 0, 0), Vector(1, 0, 0), Vector(0, 1, 0)], [(0, 1, 2)]\n"
        "result = Fake(Box(1, 1, 1).wrapped)"
    ),
    "fork bomb": "import os\nwhile True:\n    os.fork()",
    "kills its worker": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "builds a script it finds in its memory": MEMORY_ATTACK,
    **{f"breaks the harness: {name}": attack + "from build123d import *\nresult = Box(1, 1, 1)" for name, attack in ATTACKS.items()},
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_scripts_earn_nothing_and_leave_nothing(task, name):
    cad._reference.cache_clear()  # the reference built just before, as for the first answer of a group
    grade = _grade(task, HOSTILE[name])
    # (Those that build a 1 mm box get its IoU's partial credit, ~1e-5.)
    assert grade.verdict is not Verdict.PASS and grade.reward < 1e-3, grade
    assert not grade.infra_error, grade  # what a script does to its harness or worker is its own verdict
    # The next job sees a clean kernel: the reference still passes, a box still fails.
    assert _grade(task, task.hidden).verdict is Verdict.PASS


def test_sleep_and_cpu_burn_are_timeouts():
    slept = runner.build("import time\ntime.sleep(30)", timeout_s=1.0, wall_s=1.5)
    burned = runner.build("while True:\n    pass", timeout_s=1.0, wall_s=5.0)
    assert slept.grade.verdict is Verdict.TIMEOUT and "wall-clock" in slept.grade.feedback
    assert burned.grade.verdict is Verdict.TIMEOUT and "CPU" in burned.grade.feedback


def test_kernel_worker_failures_are_sandbox_errors(task, monkeypatch):
    dead = runner.new_pool(size=1, launcher=PlainLauncher(python="/nonexistent/python"))
    broken = runner.new_pool(size=1, preload=("cad_kernel", "no_such_module_rlpt"))
    try:
        for pool in (dead, broken):
            monkeypatch.setattr(runner, "kernel_pool", lambda pool=pool: pool)
            grade = _grade(task, task.hidden)
            assert grade.verdict is Verdict.SANDBOX_ERROR and grade.infra_error, grade
    finally:
        dead.close()
        broken.close()


def test_env_render_tool_then_repair():
    env = gymnasium.make("rlpt/cad-washer-easy-v0", max_attempts=2)
    obs, info = env.reset(seed=3)
    draft = info["demonstration"].replace("Cylinder(", "Cylinder(2 + ", 1)  # the disc 2 mm too wide
    obs, reward, terminated, truncated, step = env.step("# render\n" + draft + "\nprint('disc drafted')")
    assert (reward, terminated, truncated, step["tool"], step["verdict"]) == (0.0, False, False, "render", "TOOL")
    assert "top +" in obs and "your log: disc drafted" in obs and not obs.startswith("\nresult: px only in yours/only in the part (24x24): top +0/-0")
    obs, reward, terminated, _, step = env.step("```python\n" + draft + "```")
    assert step["verdict"] == "FAIL" and not terminated and 0 < reward < 1
    _, reward, terminated, _, step = env.step(info["demonstration"])
    assert (reward, terminated, step["verdict"]) == (1.0, True, "PASS")


def test_render_of_a_broken_draft_gives_the_kernel_error():
    env = gymnasium.make("rlpt/cad-washer-easy-v0")
    env.reset(seed=0)
    obs, reward, _, _, step = env.step("# render\nfrom build123d import *\nresult = Cylinder(")
    assert step["verdict"] == "ERROR" and "script line 3" in obs and reward == 0.0


def test_generated_parts_are_deterministic_and_distinct():
    from environments.cad import parts

    for kind, (_, generate) in parts.GENERATORS.items():
        a, b = generate(np.random.default_rng(5)), generate(np.random.default_rng(5))
        assert a == b, kind
        assert len({generate(np.random.default_rng(s)).description for s in range(8)}) >= 4, kind


def test_cadprompt_loader_refuses_bad_meshes_and_grades_against_the_published_mesh(tmp_path):
    import trimesh

    from environments import registry
    from environments.cad import cadprompt

    box = trimesh.creation.box(extents=(2.0, 1.0, 0.5))
    box.apply_translation((0, 0, 0.25))
    rows = {"0001": box, "0002": trimesh.util.concatenate([box, box.copy().apply_translation((5, 0, 0))])}
    for name, mesh in rows.items():
        (tmp_path / name).mkdir()
        mesh.export(str(tmp_path / name / cadprompt.MESH_FILE))
        (tmp_path / name / cadprompt.DESCRIPTION_FILE).write_text("Make a 2 x 1 x 0.5 block on the XY plane.\n")
    (tmp_path / "0003").mkdir()  # no files at all
    domain, refused = cadprompt.register(str(tmp_path), "rlpt/cad-testprompt-hard-v0")
    try:
        assert [p.id for p in domain.parts] == ["0001"]
        assert {r.id for r in refused} == {"0002", "0003"} and "2 separate solids" in str(refused)
        env = gymnasium.make("rlpt/cad-testprompt-hard-v0")
        obs, _ = env.reset(seed=0)
        assert "2 x 1 x 0.5 block" in obs and "build123d" in obs
        block = "from build123d import *\nresult = Box(2, 1, 0.5, align=(Align.CENTER, Align.CENTER, Align.MIN))"
        assert env.step(block)[4]["verdict"] == "PASS"
        env.reset(seed=0)
        assert env.step(block.replace("Box(2,", "Box(2.2,"))[4]["verdict"] == "FAIL"
    finally:
        registry.unregister("rlpt/cad-testprompt-hard-v0")


def test_assembly_interference_is_a_fail_and_the_reference_passes():
    from environments.families import cad_assembly

    env = gymnasium.make("rlpt/cad-assembly-stack-hard-v0").unwrapped
    env.reset(seed=0)
    task = env.task.hidden
    reference = task.script
    assert cad_assembly.grade_assembly(reference, task).verdict is Verdict.PASS
    fat = cad_assembly.grade_assembly(reference.replace("pin = Cylinder(", "pin = Cylinder(0.75 + "), task)
    assert fat.verdict is Verdict.FAIL and fat.reward == 0.0 and "parts 1 and 3 interpenetrate" in fat.feedback
    missing = cad_assembly.grade_assembly(reference.replace("result = [plate, washer, pin]", "result = [plate, pin]"), task)
    assert missing.verdict is Verdict.FAIL and "2 parts; expected 3" in missing.feedback
    one = cad_assembly.grade_assembly(reference.replace("result = [plate, washer, pin]", "result = plate"), task)
    assert one.verdict is Verdict.MALFORMED and "must be a list" in one.feedback


def test_kernel_worker_runs_under_the_plain_launcher_too():
    pool = runner.new_pool(size=1, launcher=PlainLauncher())
    try:
        built = runner.build("from build123d import *\nresult = Box(2, 3, 4)", pool=pool)
        assert built.grade is None and built.mesh["solids"] == 1 and abs(built.mesh["volume"] - 24.0) < 1e-6
    finally:
        pool.close()


@pytest.mark.parametrize("domain_id", ["rlpt/cad-block-easy-v0", "rlpt/cad-disc-easy-v0"])
def test_brief_parts_fit_their_bound_pass_and_misplaced_or_broken_fail(domain_id):
    from environments import registry

    domain = registry.domain(domain_id)
    rng = np.random.default_rng(0)
    longest = max(len(domain.sample(rng).prompt) for _ in range(2000))
    assert longest <= domain.spec.max_prompt_chars == cad.BRIEF_MAX_PROMPT_CHARS
    env = gymnasium.make(domain_id)
    obs, info = env.reset(seed=1)
    assert obs.endswith(cad.BRIEF_INSTRUCTIONS + "script:\n") and "bottom face on z=0" in obs
    assert env.step(info["demonstration"])[4]["verdict"] == "PASS"
    # Centred on z=0 instead of standing on it: IoU 1/3, partial credit 0.8 x 1/3.
    centred = re.sub(r"Pos\(0, 0, [0-9.]+\)", "Pos(0, 0, 0)", info["demonstration"])
    env.reset(seed=1)
    _, reward, _, _, step = env.step(centred)
    assert step["verdict"] == "FAIL" and reward == pytest.approx(0.8 / 3, abs=0.01), step
    for answer in ("", "from build123d import *\nresult = Pos(0, 0, 1) *"):
        env.reset(seed=1)
        _, reward, _, _, step = env.step(answer)
        assert (step["verdict"], reward) == ("MALFORMED", 0.0), step
