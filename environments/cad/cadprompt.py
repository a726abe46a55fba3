"""Public CAD sets as published, graded against their reference meshes.

A public set (`PublicSet`) says where its rows are in a fetched copy, what the
model is told besides each row's text, and whether a part is graded in place
or up to a rigid motion. The data is fetched, never committed: point `load` /
`register` at an extracted copy. The references' own programs (CadQuery) are
not run: CadQuery and build123d break each other's OCP in one environment, so
the reference is the published mesh, checked on the host like any candidate
(one closed valid solid, geometry.solid); a row whose mesh is not one is
refused with the reason.

Sets (SETS):
  cadprompt: CADPrompt (Alrashedy et al., ICLR 2025;
    github.com/Kamel773/CAD_Code_Generation, folder CADPrompt/): 200 DeepCAD
    parts, each a folder <id>/ with a text description
    (`Natural_Language_Descriptions_Prompt_with_specific_measurements.txt`),
    the expert's CadQuery script and the part it exports
    (`Ground_Truth.stl`). The model is told to answer in CadQuery's default
    frame (sketch on XY at the origin, extrude along +z), the frame the
    references were exported in; graded in place.
  cadqueryeval: CadQueryEval (github.com/danwahl/cadqueryeval; the root is a
    checkout of the repository): 25 prompts in src/cadqueryeval/data/tasks/
    *.yaml (`description`, `reference_stl`, the approximate bounding box
    its own prompt states) with reference STLs beside them. The references
    sit in poses the text does not state (one centred, the next with a
    corner on the origin and y negative), so a part is graded up to a rigid
    motion (`align`: geometry.aligned, principal axes then ICP, no scaling
    and no mirroring) and the model is told its pose is free.

Tolerances are relative to the part's size (CADPrompt's parts are in DeepCAD's
unit-sized coordinates, CadQueryEval's in mm): surface distance <=
DISTANCE_FRACTION of the reference's bounding-box diagonal, IoU >= IOU_PASS
(the published meshes are coarse: a 36-gon circle alone costs 0.5% of IoU).
The candidate is tessellated with the default deflection, which build123d
makes relative to each edge's size, so it needs no scaling per set.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

import numpy as np

from environments import registry, sandbox
from environments.cad import geometry, runner
from environments.families import cad
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem, ToolReply

DESCRIPTION_FILE = "Natural_Language_Descriptions_Prompt_with_specific_measurements.txt"
MESH_FILE = "Ground_Truth.stl"
CADQUERYEVAL_TASKS = os.path.join("src", "cadqueryeval", "data", "tasks")
IOU_PASS = 0.98
DISTANCE_FRACTION = 0.01
_IN_FRAME = ("Answer with a build123d script, not CadQuery (start with `from build123d import *`), in CadQuery's default "
             "frame: sketch on the XY plane at the origin, extrude along +z. Assign the part to `result`.\n")
_ANY_POSE = ("Answer with a build123d script, not CadQuery (start with `from build123d import *`) that builds it as one "
             "solid and assigns it to `result`. Place it anywhere: it is graded up to a rigid motion (no scaling, no "
             "mirroring).\n")


@dataclasses.dataclass(frozen=True)
class PublicPart:
    """One loaded row: its id, the text the model is given and its reference mesh's path."""

    id: str
    description: str
    mesh_path: str


@dataclasses.dataclass(frozen=True)
class Refused:
    id: str
    reason: str


@dataclasses.dataclass(frozen=True)
class PublicSet:
    """How one published set is laid out and graded.

    rows: root -> [(row id, read)], read() -> (description, mesh path); a row
      whose read raises OSError or ValueError is refused, not fatal.
    frame: what the model is told after the description.
    align: grade up to a rigid motion (the references' poses are not in the
      text); off where the text fixes the frame.
    """

    name: str
    domain_id: str
    summary: str
    rows: Callable[[str], list[tuple[str, Callable[[], tuple[str, str]]]]]
    frame: str
    align: bool


def _cadprompt_rows(root: str) -> list[tuple[str, Callable[[], tuple[str, str]]]]:
    def read(folder: str) -> tuple[str, str]:
        with open(os.path.join(folder, DESCRIPTION_FILE), encoding="utf-8") as f:
            return " ".join(f.read().split()), os.path.join(folder, MESH_FILE)

    return [(name, functools.partial(read, os.path.join(root, name))) for name in sorted(os.listdir(root))
            if os.path.isdir(os.path.join(root, name))]


def _cadqueryeval_rows(root: str) -> list[tuple[str, Callable[[], tuple[str, str]]]]:
    import yaml  # noqa: PLC0415  (a dependency of environments itself)

    tasks = os.path.join(root, CADQUERYEVAL_TASKS)
    if not os.path.isdir(tasks):
        raise FileNotFoundError(f"{root!r} has no {CADQUERYEVAL_TASKS}/ (expected a checkout of danwahl/cadqueryeval)")

    def read(path: str) -> tuple[str, str]:
        with open(path, encoding="utf-8") as f:
            task = yaml.safe_load(f)
        if not isinstance(task, dict) or not isinstance(task.get("description"), str) or not isinstance(task.get("reference_stl"), str):
            raise ValueError("the task file has no description or reference_stl")
        text = "\n".join(line.strip() for line in task["description"].strip().splitlines())
        box = (task.get("requirements") or {}).get("bounding_box")
        if isinstance(box, list) and len(box) == 3 and all(isinstance(v, (int, float)) for v in box):
            text += "\nBounding box (approximate): " + " x ".join(f"{v:.1f}" for v in box) + " mm"
        # reference_stl is relative to the data folder (the tasks folder's parent).
        return text, os.path.normpath(os.path.join(os.path.dirname(tasks), task["reference_stl"]))

    names = sorted((n for n in os.listdir(tasks) if n.endswith(".yaml")), key=lambda n: (len(n), n))
    return [(name[:-5], functools.partial(read, os.path.join(tasks, name))) for name in names]


CADPROMPT = PublicSet("cadprompt", "rlpt/cad-cadprompt-hard-v0", "CADPrompt's 200 DeepCAD parts from their text descriptions",
                      _cadprompt_rows, _IN_FRAME, align=False)
CADQUERYEVAL = PublicSet("cadqueryeval", "rlpt/cad-cadqueryeval-hard-v0",
                         "CadQueryEval's 25 parts from their text, graded up to a rigid motion", _cadqueryeval_rows,
                         _ANY_POSE, align=True)
SETS = {s.name: s for s in (CADPROMPT, CADQUERYEVAL)}


def tolerance(ref: geometry.Solid) -> cad.Tolerance:
    diagonal = float(np.linalg.norm(ref.vertices.max(0) - ref.vertices.min(0)))
    return cad.Tolerance(iou=IOU_PASS, distance=DISTANCE_FRACTION * diagonal)


@functools.lru_cache(maxsize=256)
def reference(mesh_path: str) -> geometry.Solid:
    """The published mesh as a checked solid (geometry.MeshError if it is not one)."""
    import trimesh  # noqa: PLC0415  (the cad extra, imported with geometry)

    mesh = trimesh.load(mesh_path, file_type="stl", force="mesh", process=False)
    return geometry.solid(np.asarray(mesh.vertices, dtype=np.float64), np.asarray(mesh.faces, dtype=np.int64))


def mesh_script(solid: geometry.Solid) -> str:
    """A build123d script that rebuilds `solid` face by face from its triangles:
    the kernel round trip that checks a published mesh passes its own task
    through the sandbox, the kernel's tessellation and the tolerances (it is
    no demonstration: far longer than an answer may be)."""
    points = ", ".join("(" + ", ".join(f"{c:.9g}" for c in v) + ")" for v in solid.vertices)
    triangles = ", ".join(f"({a}, {b}, {c})" for a, b, c in solid.faces.tolist())
    return ("from build123d import *\n"
            f"V = [{points}]\nT = [{triangles}]\n"
            "result = Solid(Shell([Face(Wire.make_polygon([V[i] for i in t], close=True)) for t in T]))\n")


def load(root: str, public_set: PublicSet = CADPROMPT) -> tuple[list[PublicPart], list[Refused]]:
    """Every row of `public_set` under `root` whose text reads and whose mesh
    is one closed valid solid; the others with the reason."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{public_set.name} folder {root!r} does not exist (fetch the set and point at its copy)")
    parts, refused = [], []
    for name, read in public_set.rows(root):
        try:
            description, mesh_path = read()
            reference(mesh_path)
        except (OSError, UnicodeDecodeError, ValueError) as e:  # MeshError is a ValueError (so is a YAML error)
            refused.append(Refused(name, f"{type(e).__name__}: {e}"))
            continue
        parts.append(PublicPart(name, description, mesh_path))
    return parts, refused


class PublicSetDomain(Domain):
    answer_format = cad.CADDomain.answer_format

    def __init__(self, spec: DomainSpec, parts: list[PublicPart], public_set: PublicSet = CADPROMPT) -> None:
        if not parts:
            raise ValueError(f"{spec.id}: no {public_set.name} rows loaded")
        self.spec = spec
        self.parts = tuple(parts)
        self.public_set = public_set

    def sample(self, rng: np.random.Generator) -> Problem:
        part = self.parts[int(rng.integers(len(self.parts)))]
        # No build123d program is published (only CadQuery's): the reference is the mesh.
        instruct = Instruct(f"{part.description}\n{self.public_set.frame}{cad.FENCE.instruction()}", "")
        return Problem(key=f"{self.public_set.name}:{part.id}", prompt=f"{part.description}\n{self.public_set.frame}script:\n",
                       demonstration="", hidden=part.mesh_path, retry_cue="script:\n", instruct=instruct)

    def grade(self, task: Problem, answer: str) -> Grade | ToolReply:
        # The reference mesh lies on this host's disk beside its description.
        sandbox.require_sealed_disk(f"{self.spec.id} ({self.public_set.name}'s reference meshes)", runner.kernel_pool())
        ref = reference(task.hidden)
        script = cad.script_of(answer)
        if isinstance(script, Grade):
            return script
        return cad.grade_against(script, ref, tolerance(ref), align=self.public_set.align)


def register(root: str, domain_id: str | None = None, public_set: PublicSet = CADPROMPT) -> tuple[PublicSetDomain, list[Refused]]:
    """Registers the rows of `public_set` under `root` that load as one
    gymnasium domain (`domain_id`, default the set's); returns it and the refused rows."""
    parts, refused = load(root, public_set)
    spec = DomainSpec(id=domain_id or public_set.domain_id, family="cad", difficulty="hard",
                      tags=("3d", "cad", "build123d", "sandbox", "public", public_set.name),
                      max_prompt_chars=4096, max_answer_chars=4000, description=public_set.summary,
                      max_instruct_prompt_chars=4096 + 128, max_instruct_answer_chars=cad.MAX_INSTRUCT_ANSWER_CHARS)
    domain = PublicSetDomain(spec, parts, public_set)
    registry.register(domain)
    return domain, refused
