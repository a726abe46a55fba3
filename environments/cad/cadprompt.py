"""CADPrompt (Alrashedy et al., ICLR 2025) as published, graded against its STL meshes.

CADPrompt (github.com/Kamel773/CAD_Code_Generation, folder CADPrompt/) holds
200 DeepCAD parts, each a folder <id>/ with a text description
(`Natural_Language_Descriptions_Prompt_with_specific_measurements.txt`), the
expert's CadQuery script (`Python_Code.py`) and the part it exports
(`Ground_Truth.stl`). CadQuery and build123d break each other's OCP in one
environment, so the CadQuery scripts are not run: the reference is the
published STL, checked on the host like any candidate (one closed valid
solid, geometry.solid). The data is fetched, never committed: point
`load` / `register` at an extracted copy.

The model is told the published description and to answer in build123d in
CadQuery's default frame (sketch on XY at the origin, extrude along +z), the
frame the references were exported in. Parts are in DeepCAD's unit-sized
coordinates, so the tolerances are relative to the part's size: surface
distance <= DISTANCE_FRACTION of its bounding-box diagonal, IoU >= IOU_PASS
(the published meshes are coarse: a 36-gon circle alone costs 0.5% of IoU),
and the candidate is tessellated to a thousandth of the diagonal.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import numpy as np

from environments import registry
from environments.cad import geometry
from environments.families import cad
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Problem, ToolReply

DESCRIPTION_FILE = "Natural_Language_Descriptions_Prompt_with_specific_measurements.txt"
MESH_FILE = "Ground_Truth.stl"
IOU_PASS = 0.98
DISTANCE_FRACTION = 0.01
_FRAME = ("Answer with a build123d script, not CadQuery (start with `from build123d import *`), in CadQuery's default "
          "frame: sketch on the XY plane at the origin, extrude along +z. Assign the part to `result`.\n")


@dataclasses.dataclass(frozen=True)
class PublicPart:
    """One loaded row: its folder name, published description and STL path."""

    id: str
    description: str
    mesh_path: str


@dataclasses.dataclass(frozen=True)
class Refused:
    id: str
    reason: str


def tolerance(ref: geometry.Solid) -> cad.Tolerance:
    diagonal = float(np.linalg.norm(ref.vertices.max(0) - ref.vertices.min(0)))
    return cad.Tolerance(iou=IOU_PASS, distance=DISTANCE_FRACTION * diagonal, linear_mm=diagonal / 1000)


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


def load(root: str) -> tuple[list[PublicPart], list[Refused]]:
    """Every row under `root` (the CADPrompt folder) whose description reads and
    whose mesh is one closed valid solid; the others with the reason."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"CADPrompt folder {root!r} does not exist (fetch the repository and extract CADPrompt/)")
    parts, refused = [], []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isdir(folder):
            continue
        try:
            with open(os.path.join(folder, DESCRIPTION_FILE), encoding="utf-8") as f:
                description = " ".join(f.read().split())
            reference(os.path.join(folder, MESH_FILE))
        except (OSError, UnicodeDecodeError, ValueError) as e:  # MeshError is a ValueError
            refused.append(Refused(name, f"{type(e).__name__}: {e}"))
            continue
        parts.append(PublicPart(name, description, os.path.join(folder, MESH_FILE)))
    return parts, refused


class CADPromptDomain(Domain):
    answer_format = cad.CADDomain.answer_format

    def __init__(self, spec: DomainSpec, parts: list[PublicPart]) -> None:
        if not parts:
            raise ValueError(f"{spec.id}: no CADPrompt rows loaded")
        self.spec = spec
        self.parts = tuple(parts)

    def sample(self, rng: np.random.Generator) -> Problem:
        part = self.parts[int(rng.integers(len(self.parts)))]
        # No build123d program is published (only CadQuery's): the reference is the mesh.
        return Problem(key=f"cadprompt:{part.id}", prompt=f"{part.description}\n{_FRAME}script:\n", demonstration="",
                       hidden=part.mesh_path, retry_cue="script:\n")

    def grade(self, task: Problem, answer: str) -> Grade | ToolReply:
        ref = reference(task.hidden)
        return cad.grade_against(cad.script_of(answer), ref, tolerance(ref))


def register(root: str, domain_id: str = "rlpt/cad-cadprompt-hard-v0") -> tuple[CADPromptDomain, list[Refused]]:
    """Registers the rows of `root` that load as one gymnasium domain; returns it and the refused rows."""
    parts, refused = load(root)
    spec = DomainSpec(id=domain_id, family="cad", difficulty="hard", tags=("3d", "cad", "build123d", "sandbox", "public", "cadprompt"),
                      max_prompt_chars=4096, max_answer_chars=4000, description="CADPrompt's 200 DeepCAD parts from their text descriptions")
    domain = CADPromptDomain(spec, parts)
    registry.register(domain)
    return domain, refused
