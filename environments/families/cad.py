"""CAD code generation: write a build123d script that builds the described part.

The model's answer is a build123d script that assigns the part to `result`
(the reply's last fenced block, else the whole reply: `environments.answers`).
The instruct prompt style states the full contract and asks for the script in
one ```python fenced block; its demonstration is the reference script so. It runs in the sandbox on a kernel
worker that imported build123d before its first job (environments/cad:
runner.py, cad_kernel.py); only the mesh comes back, and the host grades it
against the reference part, built by the task's own script the same way.

Reward ladder:
  1. it must build: a script that raises, defines no `result`, or whose result
     is no build123d shape is MALFORMED, the feedback the kernel's error line
     (exception and script line); TIMEOUT / OOM as for any sandbox job;
  2. it must be one closed valid solid: the kernel's validity check and solid
     count, and the host's own check of the returned mesh (manifold3d:
     watertight, manifold, one connected piece, positive volume); else FAIL, 0;
  3. it is compared with the reference: volume IoU (manifold3d, exact on the
     meshes) and the largest point-to-surface distance both ways (trimesh, 256
     points each way, fixed seed). PASS iff IoU >= IOU_PASS and distance <=
     DISTANCE_PASS_MM; else FAIL with reward FAIL_REWARD_SCALE x `credit`.
Every dimension in a prompt is a whole or half mm, so a wrong design misses by
at least 0.5 mm somewhere, while the same design built another way meshes
to nearly the same triangles: both parts are tessellated alike (runner.py:
build123d's linear deflection is relative to each edge's size, so the 0.2 rad
angular deflection governs, a full circle becoming 63 chords whatever its
size, 6.2e-4 of its diameter off the true circle, 0.05 mm at 80 mm).

Partial credit pays for features, not bulk. 0.8 x IoU paid 0.79 for a box of
the plate's volume or the plate without its holes, against 1.0 for the part:
an envelope carries nearly all the volume. A solid is its convex hull (its
envelope) minus its features (what it leaves out of the hull: holes,
pockets, the inside of an L), so `credit` is the product of the two
agreements (geometry.agreement): the IoU of the hulls times the IoU of the
feature sets, each of the latter's terms plus 0.1% of the reference hull's
volume (so two convex parts' features agree, and mesh noise is no feature).
The product is 1 only for the same solid, falls as either the envelope or a
feature is off, and an envelope alone earns 0.8 x floor / (features + floor):
0.11 on the plate of seed 0, at most 0.13 on any generated plate
(tests/environments/test_cad_credit.py, benchmarks/cad_credit.py). For two
convex parts (the block, the disc) it is 0.8 x IoU, as before. Features
weigh by volume, so where a large one dwarfs the small ones a part without
the small ones still earns nearly full credit: the L bracket without its two
4 mm holes earns 0.80, the inside of its L being 99.8% of its feature volume.

Render tool (multi-turn repair): a turn whose first line is `# render` is not
graded; its script is built and the reply gives, per view (top, front, side,
24 x 24 pixels over both parts' bounding box), the pixels only the candidate
covers and those only the reference covers, with its volume, the kernel's
check and the last line the script printed, or the kernel's error line.
`spec.max_turns` bounds such turns.

Nothing the candidate does in the sandbox reaches the grade but the mesh it
returns: the reference lives in the host, printing "PASS" or exiting 0 means
nothing, writing files or patching build123d changes only its own job's
process, and a worker that dies is SANDBOX_ERROR, never the model's FAIL.

Parts: a block and a disc (easy, brief: the contract in one line, for small
contexts such as the tiny base's), a plate and a washer (easy), a bracket, a
flange and a shaft (medium), a hub, a spindle and a pocketed plate (hard);
environments/cad/parts.py.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np

from environments import answers, registry
from environments.cad import parts, runner
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem, ToolReply, Verdict, failed, malformed, passed

try:  # the `cad` extra; without it the domains are listed but grading says what is missing
    from environments.cad import geometry
except ImportError as _e:  # noqa: N816
    geometry = None
    _MISSING = f"the CAD domains need the `cad` extra (manifold3d, trimesh, rtree, build123d): {_e}"

IOU_PASS = 0.99
DISTANCE_PASS_MM = 0.2
FAIL_REWARD_SCALE = 0.8
MAX_TURNS = 6
RENDER = "# render"
FENCE = answers.Fenced("python", "the script")
MAX_INSTRUCT_PROMPT_CHARS = 1280
MAX_INSTRUCT_ANSWER_CHARS = 8000
_INSTRUCTIONS = (
    "Write a build123d Python script (units mm; start with `from build123d import *`) that builds this part "
    "as one solid and assigns it to `result`. A turn starting with `# render` builds a draft and compares its "
    "top/front/side silhouettes with the part's, without grading it.\n"
)
_CUE = "script:\n"
# The brief rung's contract, in one line (environments/cad/parts.py: block, disc).
BRIEF_INSTRUCTIONS = "A build123d script (mm) that assigns it to `result`.\n"
BRIEF_MAX_PROMPT_CHARS = 160  # the longest brief prompt is 148 (tests/environments/test_cad.py)


def script_of(answer: str) -> str | Grade:
    """The script of an answer: its last fenced block, else the whole answer
    (`answers.final_block`); MALFORMED when it holds several different blocks."""
    found = answers.final_block(answer)
    many = answers.several(found)
    if many:
        return malformed(answers.several_feedback(many, "fenced blocks"))
    return found.text


def instruct_prompt(description: str) -> str:
    """The instruct-style prompt of a part: its description, the full contract, the fence asked for."""
    return f"{description}\n{_INSTRUCTIONS}{FENCE.instruction()}"


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """PASS needs volume IoU >= `iou` and surface distance <= `distance` (mm).

    deflection: the candidate's linear tessellation deflection, runner.build's
      `linear_mm`. build123d meshes with OCCT's relative deflection
      (BRepMesh_IncrementalMesh(..., isRelative=True, ...)): it is a fraction
      of each edge's size, not mm, so the same value suits a part of any
      units (at 0.05 and 0.2 rad a circle gets 63 chords from 2 to 400 mm
      across: the angular deflection governs)."""

    iou: float = IOU_PASS
    distance: float = DISTANCE_PASS_MM
    deflection: float = runner.LINEAR_MM

    def __post_init__(self) -> None:
        if not (0.0 < self.iou <= 1.0 and self.distance > 0 and self.deflection > 0):
            raise ValueError(f"Tolerance needs 0 < iou <= 1 and positive distance and deflection, got {self}")


GENERATED = Tolerance()


class ReferenceBuildError(RuntimeError):
    """The task's own script did not build: the verifier's fault."""


@functools.lru_cache(maxsize=512)
def _reference(script: str) -> "geometry.Solid":
    built = runner.build(script)
    if built.grade is not None:
        if built.grade.verdict is Verdict.SANDBOX_ERROR:
            raise ConnectionError(built.grade.feedback)
        raise ReferenceBuildError(f"the reference part did not build: {built.grade.feedback}")
    return geometry.solid_from_kernel(built.mesh)


def reference_or_grade(script: str) -> "geometry.Solid | Grade":
    """The reference solid, or the SANDBOX_ERROR grade when the sandbox failed building it."""
    try:
        return _reference(script)
    except ConnectionError as e:
        return Grade(Verdict.SANDBOX_ERROR, 0.0, f"sandbox failure building the reference: {e}")


def candidate(script: str, deflection: float = runner.LINEAR_MM) -> "geometry.Solid | Grade":
    """Steps 1 and 2 of the ladder: the candidate's checked solid, or its grade."""
    return checked(runner.build(script, linear_mm=deflection))


def checked(built: runner.BuildOutcome) -> "geometry.Solid | Grade":
    """Step 2 on a build: its one checked solid, or the grade that stops the ladder."""
    if built.grade is not None:
        return built.grade
    mesh = built.mesh
    if mesh.get("solids") != 1:
        return failed(f"the part is {mesh.get('solids')} solids; expected one")
    if mesh.get("valid") is not True:
        return failed("the kernel finds the part invalid (BRep check)")
    try:
        return geometry.solid_from_kernel(mesh)
    except geometry.MeshError as e:
        return failed(str(e))


def credit(agree: "geometry.Agreement") -> float:
    """A FAIL's reward: FAIL_REWARD_SCALE x envelope agreement x feature
    agreement (geometry.agreement), in [0, FAIL_REWARD_SCALE]."""
    return FAIL_REWARD_SCALE * max(0.0, min(1.0, agree.credit))


def compare(cand: "geometry.Solid", ref: "geometry.Solid", tol: Tolerance = GENERATED) -> Grade:
    """Step 3: PASS within the tolerances, else FAIL with the feature credit."""
    iou = geometry.iou(cand, ref)
    distance = geometry.surface_distance(cand, ref)
    summary = f"volume IoU {iou:.4f}, surface distance up to {distance:.3g} mm"
    if iou >= tol.iou and distance <= tol.distance:
        return passed(summary)
    agree = geometry.agreement(cand, ref)
    return failed(f"{summary}; convex hull IoU {agree.envelope:.3f}, feature (hull minus part) IoU {agree.features:.3f} "
                  f"(PASS needs IoU >= {tol.iou} and <= {tol.distance:.3g} mm)", reward=credit(agree))


def grade_against(script: str, ref: "geometry.Solid", tol: Tolerance, align: bool = False) -> Grade:
    """Steps 1-3 for a reference already in hand (e.g. a public set's mesh);
    with `align`, up to a rigid motion: the candidate is first moved onto the
    reference (geometry.aligned), for sets whose text does not fix the pose."""
    if geometry is None:
        raise RuntimeError(_MISSING)
    cand = candidate(script, tol.deflection)
    if isinstance(cand, Grade):
        return cand
    return compare(geometry.aligned(cand, ref) if align else cand, ref, tol)


def grade_script(script: str, reference_script: str) -> Grade:
    """The full ladder for one script against the reference built by `reference_script`."""
    if geometry is None:
        raise RuntimeError(_MISSING)
    ref = reference_or_grade(reference_script)
    if isinstance(ref, Grade):
        return ref
    cand = candidate(script)
    return cand if isinstance(cand, Grade) else compare(cand, ref)


def render(script: str, reference_script: str) -> ToolReply | Grade:
    """The render tool's reply: silhouette differences per view, volume and kernel check."""
    if geometry is None:
        raise RuntimeError(_MISSING)
    ref = reference_or_grade(reference_script)
    if isinstance(ref, Grade):
        return ref
    built = runner.build(script)
    cand = checked(built)
    if isinstance(cand, Grade):
        if cand.infra_error:
            return cand
        return ToolReply(Verdict.ERROR, f"{cand.verdict.value}: {cand.feedback}", tool="render")
    views = geometry.silhouette_diff(cand, ref)
    shown = ", ".join(f"{view} +{extra}/-{missing}" for view, (extra, missing) in views.items())
    log = f"; your log: {built.log}" if built.log else ""
    text = f"px only in yours/only in the part (24x24): {shown}; volume {cand.volume:.1f} mm3; kernel: one valid solid{log}"
    return ToolReply(Verdict.TOOL, text, tool="render")


class CADDomain(Domain):
    answer_format = "a build123d script that assigns the part to `result`"

    def __init__(self, spec: DomainSpec, generate: Callable[[np.random.Generator], parts.PartTask],
                 instructions: str = _INSTRUCTIONS) -> None:
        self.spec = spec
        self._generate = generate
        self.instructions = instructions  # the full contract, or BRIEF_INSTRUCTIONS's one line

    def sample(self, rng: np.random.Generator) -> Problem:
        part = self._generate(rng)
        fenced = FENCE.demonstrate(part.script)
        return Problem(
            key=f"cad:{part.kind}:{part.description}",
            prompt=f"{part.description}\n{self.instructions}{_CUE}",
            demonstration=part.script,
            hidden=part.script,
            retry_cue=_CUE,
            demonstration_turns=(part.script,),
            instruct=Instruct(instruct_prompt(part.description), fenced, demonstration_turns=(fenced,)),
        )

    def grade(self, task: Problem, answer: str) -> Grade | ToolReply:
        script = script_of(answer)
        if isinstance(script, Grade):
            return script
        if script.lstrip().startswith(RENDER):
            return render(script, task.hidden)
        return grade_script(script, task.hidden)


def _register() -> None:
    for kind, (difficulty, generate) in parts.GENERATORS.items():
        brief = kind in parts.BRIEF_KINDS
        spec = DomainSpec(
            id=f"rlpt/cad-{kind}-{difficulty}-v0",
            family="cad",
            difficulty=difficulty,
            tags=("3d", "cad", "build123d", "sandbox", "partial-credit", "tools", kind),
            max_prompt_chars=BRIEF_MAX_PROMPT_CHARS if brief else 1024,
            max_answer_chars=4000,
            description=f"write a build123d script for a generated {kind} part; graded by volume IoU and surface distance",
            max_turns=MAX_TURNS,
            max_instruct_prompt_chars=MAX_INSTRUCT_PROMPT_CHARS,
            max_instruct_answer_chars=MAX_INSTRUCT_ANSWER_CHARS,
        )
        registry.register(CADDomain(spec, generate, BRIEF_INSTRUCTIONS if brief else _INSTRUCTIONS))


_register()
