"""CAD assemblies: parts that must fit together without interpenetrating, and stand.

The answer is a build123d script whose `result` is a list of parts, in the
order the prompt names them (the reply's last fenced block, else the whole
reply; the instruct prompt style asks for one ```python fenced block). Ladder, after the part ladder of
environments/families/cad.py for each part (it builds; each part one closed
valid solid, checked on the host):
  1. no two parts may interpenetrate by more than INTERFERENCE_MM3
     (manifold3d's exact intersection volume of each pair; else FAIL, 0,
     naming the pair and the volume);
  2. the assembly must stand: the parts, where the script put them, on a
     ground plane at z = 0 under gravity for STAND_S (MuJoCo; each part cut
     into exact convex pieces first, environments/cad/physics.py): a part that
     starts below the ground, is too small or thin for MuJoCo to simulate, or
     moves more than STAND_MM is a FAIL, 0, naming the part and how far it
     moved; MuJoCo failing on the convex pieces the checker cut (its compile
     errors) is VERIFIER_ERROR, the checker's fault, never the model's FAIL;
  3. fixed assemblies: each part is compared with its reference part in place
     (volume IoU, surface distance, the part family's tolerances): PASS iff
     all match, else FAIL with the mean of the parts' feature credits
     (cad.credit: 0.8 x hull IoU x feature IoU, so a part's envelope alone
     earns ~0 where its reference has features). The overhang task
     compares each plank's shape wherever it is (moved onto its reference's
     bounding-box centre), checks that each plank lies on the one below, and
     PASSes iff the top plank reaches the overhang asked for; short of it, a
     standing stack earns 0.8 x the overhang reached over the one asked for.

Tasks: two blocks, the smaller lying centred on the larger (easy, with the
contract in one line for small contexts); a block with a vertical through hole and a pin standing in it with
radial clearance (medium); a base plate, a washer and a pin through both
(hard); three planks stacked so that the top one overhangs the bottom one's
end by more than half a plank's length (hard: a plank alone over its support
tips at half its length, so the stack must be staggered, and physics is the
judge).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Callable

import numpy as np

from environments import registry
from environments.cad import runner
from environments.families import cad
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem, Verdict, failed, passed

try:  # MuJoCo, in the `cad` extra
    from environments.cad import physics
except ImportError as _e:  # noqa: N816
    physics = None
    _NO_PHYSICS = f"the assembly domains need MuJoCo (the `cad` extra): {_e}"

INTERFERENCE_MM3 = 0.1
STAND_MM = 0.5
STAND_S = 1.0
LEVEL_MM = 0.05  # a plank lies on the one below when its bottom is this close to that one's top
_BOTTOM = "align=(Align.CENTER, Align.CENTER, Align.MIN)"
_INSTRUCTIONS = ("Write a build123d Python script (units mm; start with `from build123d import *`) that builds the parts "
                 "and assigns them to `result` as a list, in the order named. Parts must not interpenetrate, and the "
                 "assembly must stand on the ground (z = 0) under gravity.\n")
BRIEF_INSTRUCTIONS = "A build123d script (mm) that assigns the list of parts to `result`; they must stand.\n"
BRIEF_KINDS = frozenset({"tower"})  # prompts with the contract in one line, for small contexts
BRIEF_MAX_PROMPT_CHARS = 224  # the longest tower prompt is 196 (tests/environments/test_cad_physics.py)


@dataclasses.dataclass(frozen=True)
class AssemblyTask:
    """A prompt, the reference script, and the overhang goal (mm) if the
    parts' positions are the model's choice (None: the reference's in place)."""

    description: str
    script: str
    overhang_mm: float | None = None


def _i(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def tower(rng: np.random.Generator) -> AssemblyTask:
    a, h1 = _i(rng, 6, 12) * 5, _i(rng, 2, 10)
    b, h2 = _i(rng, 2, a // 5 - 2) * 5, _i(rng, 2, 10)
    desc = f"Two blocks on the z axis. 1: {a} x {a} x {h1} mm on the ground (z=0). 2: {b} x {b} x {h2} mm lying on block 1."
    script = (f"from build123d import *\nresult = [Pos(0, 0, {h1 / 2:g}) * Box({a}, {a}, {h1}), "
              f"Pos(0, 0, {h1 + h2 / 2:g}) * Box({b}, {b}, {h2})]\n")
    return AssemblyTask(desc, script)


def pin_in_block(rng: np.random.Generator) -> AssemblyTask:
    w, t, hole = _i(rng, 3, 6) * 10, _i(rng, 2, 4) * 5, _i(rng, 2, 5) * 2
    pin, length = hole - 1, t + _i(rng, 1, 4) * 5
    desc = (f"An assembly of two parts. 1: a block {w} x {w} x {t} mm centred on the z axis, bottom face on z=0, with a "
            f"vertical through hole of diameter {hole} mm on the z axis. 2: a pin, a cylinder of diameter {pin} mm and "
            f"length {length} mm on the z axis, its bottom at z=0, standing in the hole.")
    script = (f"from build123d import *\nblock = Box({w}, {w}, {t}, {_BOTTOM}) - Cylinder({hole / 2}, {t}, {_BOTTOM})\n"
              f"pin = Cylinder({pin / 2}, {length}, {_BOTTOM})\nresult = [block, pin]\n")
    return AssemblyTask(desc, script)


def pin_through_stack(rng: np.random.Generator) -> AssemblyTask:
    w, t, hole = _i(rng, 4, 8) * 10, _i(rng, 2, 4) * 2, _i(rng, 2, 4) * 2
    washer_od, washer_t = hole + _i(rng, 3, 6) * 2, _i(rng, 1, 3)
    pin, length = hole - 1, t + washer_t + _i(rng, 1, 3) * 5
    desc = (f"An assembly of three parts. 1: a plate {w} x {w} x {t} mm centred on the z axis, bottom face on z=0, with a "
            f"vertical through hole of diameter {hole} mm on the z axis. 2: a washer of outer diameter {washer_od} mm, bore "
            f"{hole} mm and thickness {washer_t} mm lying on the plate, coaxial with the hole. 3: a pin of diameter {pin} mm "
            f"and length {length} mm on the z axis, its bottom at z=0, through plate and washer.")
    script = (f"from build123d import *\nplate = Box({w}, {w}, {t}, {_BOTTOM}) - Cylinder({hole / 2}, {t}, {_BOTTOM})\n"
              f"washer = Pos(0, 0, {t}) * (Cylinder({washer_od / 2}, {washer_t}, {_BOTTOM}) - Cylinder({hole / 2}, {washer_t}, {_BOTTOM}))\n"
              f"pin = Cylinder({pin / 2}, {length}, {_BOTTOM})\nresult = [plate, washer, pin]\n")
    return AssemblyTask(desc, script)


# The reference stack: plank 2 overhangs plank 1 by 0.2 L and plank 3 plank 2
# by 0.4 L (0.6 L in all); each plank's centre of mass, and planks 2 and 3's
# together, stay 0.1 L inside the end below them. The goal asks for 0.52-0.56 L:
# plank 3 alone that far past plank 2 tips (its centre past the edge).
_OVERHANG = (0.2, 0.4)


def plank_overhang(rng: np.random.Generator) -> AssemblyTask:
    length, width, height = _i(rng, 6, 12) * 10, _i(rng, 2, 4) * 5, _i(rng, 1, 2) * 5
    goal = float(np.ceil(length * (0.52 + 0.01 * _i(rng, 0, 4))))
    desc = (f"An assembly of three planks, each {length} x {width} x {height} mm (length along x, width along y, height "
            f"along z), all centred on y=0. 1: a plank lying on the ground (bottom face on z=0). 2: a plank lying on plank 1. "
            f"3: a plank lying on plank 2. Place them so that the +x end of plank 3 reaches at least {goal:g} mm past the "
            f"+x end of plank 1, and the stack stands on its own.")
    x2, x3 = _OVERHANG[0] * length, (_OVERHANG[0] + _OVERHANG[1]) * length
    script = (f"from build123d import *\nplank = Box({length}, {width}, {height}, align=(Align.MAX, Align.CENTER, Align.MIN))\n"
              f"result = [plank, Pos({x2:g}, 0, {height}) * plank, Pos({x3:g}, 0, {2 * height}) * plank]\n")
    return AssemblyTask(desc, script, overhang_mm=goal)


def _checked_parts(script: str) -> "list | Grade":
    """Each part's checked solid, or the grade that stops the ladder."""
    built = runner.build(script, assembly=True)
    if built.grade is not None:
        return built.grade
    reports = built.mesh.get("parts")
    if type(reports) is not list or not all(type(r) is dict for r in reports):
        return Grade(Verdict.MALFORMED, 0.0, "the kernel returned no part reports")
    solids = []
    for k, report in enumerate(reports, 1):
        if report.get("solids") != 1 or report.get("valid") is not True:
            return failed(f"part {k} is not one valid solid (kernel: {report.get('solids')} solids, valid={report.get('valid')})")
        try:
            solids.append(cad.geometry.solid_from_kernel(report))
        except cad.geometry.MeshError as e:
            return failed(f"part {k}: {e}")
    return solids


@functools.lru_cache(maxsize=256)
def _reference(script: str) -> tuple:
    parts = _checked_parts(script)
    if isinstance(parts, Grade):
        if parts.infra_error:
            raise ConnectionError(parts.feedback)
        raise cad.ReferenceBuildError(f"the reference assembly did not build: {parts.feedback}")
    return tuple(parts)


def interference(parts: list) -> tuple[float, int, int]:
    """The largest pairwise intersection volume (mm3) and its pair (1-based)."""
    worst = (0.0, 0, 0)
    for (i, a), (j, b) in itertools.combinations(enumerate(parts, 1), 2):
        volume = float((a.manifold ^ b.manifold).volume())
        worst = max(worst, (volume, i, j))
    return worst


def stands(parts: list) -> Grade | None:
    """None if the assembly stands for STAND_S, else the grade that stops the ladder."""
    try:
        motion = physics.settle(parts, seconds=STAND_S)
    except physics.TooComplex as e:
        return failed(f"the assembly cannot be simulated: {e}")
    except (physics.BelowGround, physics.TooSmall) as e:
        return failed(str(e))
    # MuJoCo refusing or failing on pieces the checker cut (its compile errors
    # are ValueErrors) is the checker's fault, never the model's FAIL.
    except Exception as e:  # noqa: BLE001
        return Grade(Verdict.VERIFIER_ERROR, 0.0, f"the physics check failed: {type(e).__name__}: {e}")
    moved, k = max((m, k) for k, m in enumerate(motion.moved_mm, 1))
    if moved > STAND_MM:
        return failed(f"the assembly does not stand: part {k} moved {moved:.2f} mm in {STAND_S:g} s "
                      f"(at most {STAND_MM} mm allowed)")
    return None


def _compare_in_place(parts: list, ref: tuple) -> Grade:
    grades = [cad.compare(p, r) for p, r in zip(parts, ref)]
    if all(g.success for g in grades):
        return passed(f"{len(parts)} parts match, none interpenetrate, the assembly stands")
    k = next(k for k, g in enumerate(grades, 1) if not g.success)
    credits = [cad.credit(cad.geometry.agreement(p, r)) for p, r in zip(parts, ref)]
    return failed(f"part {k}: {grades[k - 1].feedback}", reward=float(np.mean(credits)))


def _centre(s) -> np.ndarray:
    return (s.vertices.min(0) + s.vertices.max(0)) / 2


def _compare_overhang(parts: list, ref: tuple, goal_mm: float) -> Grade:
    for k, (p, r) in enumerate(zip(parts, ref), 1):
        shape = cad.compare(cad.geometry.translated(p, _centre(r) - _centre(p)), r)
        if not shape.success:
            return failed(f"plank {k} has the wrong shape: {shape.feedback}")
    for k in range(1, len(parts)):
        below_top, bottom = float(parts[k - 1].vertices[:, 2].max()), float(parts[k].vertices[:, 2].min())
        if abs(bottom - below_top) > LEVEL_MM:
            return failed(f"plank {k + 1} does not lie on plank {k}: its bottom is at z={bottom:.2f} mm, "
                          f"plank {k}'s top at z={below_top:.2f} mm")
    reached = float(parts[-1].vertices[:, 0].max() - parts[0].vertices[:, 0].max())
    if reached >= goal_mm:
        return passed(f"the stack stands and plank {len(parts)} overhangs plank 1 by {reached:.1f} mm (>= {goal_mm:g})")
    return failed(f"the stack stands but plank {len(parts)} overhangs plank 1 by {reached:.1f} mm; at least "
                  f"{goal_mm:g} mm asked", reward=cad.FAIL_REWARD_SCALE * max(0.0, min(1.0, reached / goal_mm)))


def grade_assembly(script: str, task: AssemblyTask) -> Grade:
    if cad.geometry is None:
        raise RuntimeError(cad._MISSING)
    if physics is None:
        raise RuntimeError(_NO_PHYSICS)
    try:
        ref = _reference(task.script)
    except ConnectionError as e:
        return Grade(Verdict.SANDBOX_ERROR, 0.0, f"sandbox failure building the reference: {e}")
    parts = _checked_parts(script)
    if isinstance(parts, Grade):
        return parts
    if len(parts) != len(ref):
        return failed(f"the assembly has {len(parts)} parts; expected {len(ref)}")
    volume, i, j = interference(parts)
    if volume > INTERFERENCE_MM3:
        return failed(f"parts {i} and {j} interpenetrate by {volume:.2f} mm3 (at most {INTERFERENCE_MM3} allowed)")
    fallen = stands(parts)
    if fallen is not None:
        return fallen
    if task.overhang_mm is None:
        return _compare_in_place(parts, ref)
    return _compare_overhang(parts, ref, task.overhang_mm)


class AssemblyDomain(Domain):
    answer_format = "a build123d script that assigns the list of parts to `result`"

    def __init__(self, spec: DomainSpec, generate: Callable[[np.random.Generator], AssemblyTask],
                 instructions: str = _INSTRUCTIONS) -> None:
        self.spec = spec
        self._generate = generate
        self.instructions = instructions  # the full contract, or BRIEF_INSTRUCTIONS's one line

    def sample(self, rng: np.random.Generator) -> Problem:
        task = self._generate(rng)
        instruct = Instruct(f"{task.description}\n{_INSTRUCTIONS}{cad.FENCE.instruction()}",
                            cad.FENCE.demonstrate(task.script))
        return Problem(key=f"cad-assembly:{task.description}", prompt=f"{task.description}\n{self.instructions}script:\n",
                       demonstration=task.script, hidden=task, retry_cue="script:\n", instruct=instruct)

    def grade(self, task: Problem, answer: str) -> Grade:
        script = cad.script_of(answer)
        return script if isinstance(script, Grade) else grade_assembly(script, task.hidden)


GENERATORS = {
    "tower": ("easy", tower, ("interference",)),  # the brief rung (experiments/domains.py MIXED_REAL)
    "pin": ("medium", pin_in_block, ("interference",)),
    "stack": ("hard", pin_through_stack, ("interference",)),
    "overhang": ("hard", plank_overhang, ("placement",)),
}


def _register() -> None:
    for kind, (difficulty, generate, tags) in GENERATORS.items():
        brief = kind in BRIEF_KINDS
        spec = DomainSpec(
            id=f"rlpt/cad-assembly-{kind}-{difficulty}-v0",
            family="cad",
            difficulty=difficulty,
            tags=("3d", "cad", "build123d", "sandbox", "assembly", "physics", kind, *tags),
            max_prompt_chars=BRIEF_MAX_PROMPT_CHARS if brief else 1024,
            max_answer_chars=4000,
            description=f"write a build123d assembly ({kind}) whose parts fit without interpenetrating and stand",
            max_instruct_prompt_chars=cad.MAX_INSTRUCT_PROMPT_CHARS,
            max_instruct_answer_chars=cad.MAX_INSTRUCT_ANSWER_CHARS,
        )
        registry.register(AssemblyDomain(spec, generate, BRIEF_INSTRUCTIONS if brief else _INSTRUCTIONS))


_register()
