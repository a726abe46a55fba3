"""CAD assemblies: parts that must fit together without interpenetrating.

The answer is a build123d script whose `result` is a list of parts, in the
order the prompt names them. Ladder, after the part ladder of
environments/families/cad.py for each part (it builds; each part one closed
valid solid, checked on the host): no two parts may interpenetrate by more
than INTERFERENCE_MM3 (manifold3d's exact intersection volume of each pair;
else FAIL, reward 0, naming the pair and the volume); then each part is
compared with its reference part (volume IoU, surface distance, the part
family's tolerances): PASS iff all match, else FAIL with 0.8 x their mean IoU.

Tasks: a block with a vertical through hole and a pin standing in it with
radial clearance (medium); a base plate, a washer and a pin through both
(hard). Whether the assembly stands (MuJoCo, parts split by CoACD) is not
checked yet: this is the interference rung.
"""

from __future__ import annotations

import functools
import itertools
from typing import Callable

import numpy as np

from environments import registry
from environments.cad import runner
from environments.families import cad
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Problem, Verdict, failed, passed

INTERFERENCE_MM3 = 0.1
_BOTTOM = "align=(Align.CENTER, Align.CENTER, Align.MIN)"
_INSTRUCTIONS = ("Write a build123d Python script (units mm; start with `from build123d import *`) that builds the parts "
                 "and assigns them to `result` as a list, in the order named. Parts must not interpenetrate.\n")


def _i(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def pin_in_block(rng: np.random.Generator) -> tuple[str, str]:
    w, t, hole = _i(rng, 3, 6) * 10, _i(rng, 2, 4) * 5, _i(rng, 2, 5) * 2
    pin, length = hole - 1, t + _i(rng, 1, 4) * 5
    desc = (f"An assembly of two parts. 1: a block {w} x {w} x {t} mm centred on the z axis, bottom face on z=0, with a "
            f"vertical through hole of diameter {hole} mm on the z axis. 2: a pin, a cylinder of diameter {pin} mm and "
            f"length {length} mm on the z axis, its bottom at z=0, standing in the hole.")
    script = (f"from build123d import *\nblock = Box({w}, {w}, {t}, {_BOTTOM}) - Cylinder({hole / 2}, {t}, {_BOTTOM})\n"
              f"pin = Cylinder({pin / 2}, {length}, {_BOTTOM})\nresult = [block, pin]\n")
    return desc, script


def pin_through_stack(rng: np.random.Generator) -> tuple[str, str]:
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
    return desc, script


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


def grade_assembly(script: str, reference_script: str) -> Grade:
    if cad.geometry is None:
        raise RuntimeError(cad._MISSING)
    try:
        ref = _reference(reference_script)
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
    grades = [cad.compare(p, r) for p, r in zip(parts, ref)]
    if all(g.success for g in grades):
        return passed(f"{len(parts)} parts match, none interpenetrate")
    k = next(k for k, g in enumerate(grades, 1) if not g.success)
    ious = [cad.geometry.iou(p, r) for p, r in zip(parts, ref)]
    return failed(f"part {k}: {grades[k - 1].feedback}", reward=cad.FAIL_REWARD_SCALE * float(np.mean(ious)))


class AssemblyDomain(Domain):
    answer_format = "a build123d script that assigns the list of parts to `result`"

    def __init__(self, spec: DomainSpec, generate: Callable[[np.random.Generator], tuple[str, str]]) -> None:
        self.spec = spec
        self._generate = generate

    def sample(self, rng: np.random.Generator) -> Problem:
        desc, script = self._generate(rng)
        return Problem(key=f"cad-assembly:{desc}", prompt=f"{desc}\n{_INSTRUCTIONS}script:\n", demonstration=script,
                       hidden=script, retry_cue="script:\n")

    def grade(self, task: Problem, answer: str) -> Grade:
        return grade_assembly(cad.script_of(answer), task.hidden)


GENERATORS = {"pin": ("medium", pin_in_block), "stack": ("hard", pin_through_stack)}


def _register() -> None:
    for kind, (difficulty, generate) in GENERATORS.items():
        spec = DomainSpec(
            id=f"rlpt/cad-assembly-{kind}-{difficulty}-v0",
            family="cad",
            difficulty=difficulty,
            tags=("3d", "cad", "build123d", "sandbox", "assembly", "interference", kind),
            max_prompt_chars=1024,
            max_answer_chars=4000,
            description=f"write a build123d assembly ({kind}) whose parts fit without interpenetrating",
        )
        registry.register(AssemblyDomain(spec, generate))


_register()
