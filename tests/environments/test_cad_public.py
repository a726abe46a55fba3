"""Public CAD sets whose references sit in poses their text does not state.

geometry.aligned must put a part moved by any rigid motion back on its
reference (IoU >= 0.999, surface distance <= 0.02 mm on a ~80 mm part),
including a part whose principal moments tie, and must not make a mirror
image or a part scaled 5% pass. The CadQueryEval layout (a fixture of our own:
task YAML files and STL references, one of them in an odd pose) loads, refuses
bad rows with the reason, and grades a build123d answer in another pose PASS
with alignment and FAIL without it (kernel sandbox for those)."""

import dataclasses

import gymnasium
import numpy as np
import pytest

import environments  # noqa: F401
from environments.cad import runner

manifold3d = pytest.importorskip("manifold3d")
trimesh = pytest.importorskip("trimesh")
from environments import registry  # noqa: E402
from environments.cad import cadprompt, geometry  # noqa: E402
from environments.families import cad  # noqa: E402

_OK, _WHY = runner.available()


def _solid(m) -> geometry.Solid:
    mesh = m.to_mesh()
    return geometry.solid(np.asarray(mesh.vert_properties)[:, :3].astype(np.float64), np.asarray(mesh.tri_verts).astype(np.int64))


def _bracket() -> "manifold3d.Manifold":
    """An L bracket with a hole off its middle: no symmetry a rotation could confuse, and chiral."""
    base = manifold3d.Manifold.cube([60, 30, 6])
    upright = manifold3d.Manifold.cube([6, 30, 40])
    return base + upright - manifold3d.Manifold.cylinder(10, 3, 3, 64).translate([40, 20, -2])


def _flange() -> "manifold3d.Manifold":
    """A disc with a bore and five holes: two principal moments equal."""
    part = manifold3d.Manifold.cylinder(8, 40, 40, 96) - manifold3d.Manifold.cylinder(8, 10, 10, 64)
    for k in range(5):
        angle = 2 * np.pi * k / 5
        part -= manifold3d.Manifold.cylinder(8, 3, 3, 32).translate([25 * np.cos(angle), 25 * np.sin(angle), 0])
    return part


def _rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


@pytest.mark.parametrize("make", [_bracket, _flange])
def test_aligned_puts_a_moved_part_back(make):
    ref = _solid(make())
    rng = np.random.default_rng(7)
    for _ in range(2):
        moved = geometry.moved(ref, _rotation(rng), rng.normal(size=3) * 100)
        assert geometry.iou(moved, ref) < 0.5
        back = geometry.aligned(moved, ref)
        assert geometry.iou(back, ref) >= 0.999
        assert geometry.surface_distance(back, ref) <= 0.02


def test_aligned_does_not_mirror_or_scale():
    ref = _solid(_bracket())
    tol = cadprompt.tolerance(ref)
    rng = np.random.default_rng(3)
    mirrored = _solid(_bracket().mirror([0, 1, 0]))
    centre = ref.vertices.mean(0)
    scaled = geometry.solid(centre + (ref.vertices - centre) * 1.05, ref.faces)
    for wrong in (mirrored, scaled):
        grade = cad.compare(geometry.aligned(geometry.moved(wrong, _rotation(rng), [5.0, -7.0, 3.0]), ref), ref, tol)
        assert not grade.success and 0.0 < grade.reward < cad.FAIL_REWARD_SCALE, grade
    # Moved, the right part needs the alignment: in place it fails.
    moved = geometry.moved(ref, _rotation(rng), [5.0, -7.0, 3.0])
    assert not cad.compare(moved, ref, tol).success
    assert cad.compare(geometry.aligned(moved, ref), ref, tol).success


_ANSWER = ("from build123d import *\nMIN = (Align.MIN, Align.MIN, Align.MIN)\n"
           "part = Box(60, 30, 6, align=MIN) + Box(6, 30, 40, align=MIN)\n"
           "part -= Pos(40, 20, 0) * Cylinder(3, 6, align=(Align.CENTER, Align.CENTER, Align.MIN))\nresult = part\n")


@pytest.fixture()
def queryeval(tmp_path):
    """A CadQueryEval-shaped checkout: task1 (the bracket, its reference turned
    and moved), task2 (a reference of two solids), task3 (no description)."""
    data = tmp_path / "src" / "cadqueryeval" / "data"
    (data / "tasks").mkdir(parents=True)
    (data / "reference").mkdir()
    rng = np.random.default_rng(11)
    posed = geometry.moved(_solid(_bracket()), _rotation(rng), [30.0, -12.0, 4.0])
    trimesh.Trimesh(posed.vertices, posed.faces).export(str(data / "reference" / "task1.stl"))
    two = manifold3d.Manifold.cube([5, 5, 5]) + manifold3d.Manifold.cube([5, 5, 5]).translate([10, 0, 0])
    mesh = two.to_mesh()
    trimesh.Trimesh(np.asarray(mesh.vert_properties)[:, :3], np.asarray(mesh.tri_verts)).export(str(data / "reference" / "task2.stl"))
    (data / "tasks" / "task1.yaml").write_text(
        'task_id: "task1"\ndescription: |\n  An L bracket 30 mm wide: a base 60 x 30 x 6 mm and an upright 6 x 30 x 40 mm at one end.\n'
        '  A 6 mm through hole in the base, 40 mm from the upright\'s outer face and 20 mm from one side.\n'
        'reference_stl: "./reference/task1.stl"\nrequirements:\n  bounding_box: [60, 30, 40]\n')
    (data / "tasks" / "task2.yaml").write_text('task_id: "task2"\ndescription: "Two cubes."\nreference_stl: "./reference/task2.stl"\n')
    (data / "tasks" / "task3.yaml").write_text('task_id: "task3"\nreference_stl: "./reference/task1.stl"\n')
    return tmp_path


def test_cadqueryeval_layout_loads_and_refuses_bad_rows(queryeval):
    parts, refused = cadprompt.load(str(queryeval), cadprompt.CADQUERYEVAL)
    assert [p.id for p in parts] == ["task1"]
    assert "Bounding box (approximate): 60.0 x 30.0 x 40.0 mm" in parts[0].description
    reasons = {r.id: r.reason for r in refused}
    assert set(reasons) == {"task2", "task3"} and "2 separate solids" in reasons["task2"] and "no description" in reasons["task3"]
    with pytest.raises(FileNotFoundError, match="danwahl/cadqueryeval"):
        cadprompt.load(str(queryeval / "src"), cadprompt.CADQUERYEVAL)


@pytest.mark.skipif(not _OK, reason=f"needs the CAD kernel: {_WHY}")
def test_a_part_correct_by_its_text_passes_in_any_pose_only_with_alignment(queryeval):
    in_place = dataclasses.replace(cadprompt.CADQUERYEVAL, name="cadqueryeval-in-place", align=False)
    ids = {"rlpt/cad-testqueryeval-hard-v0": cadprompt.CADQUERYEVAL, "rlpt/cad-testqueryeval-inplace-hard-v0": in_place}
    try:
        for domain_id, public_set in ids.items():
            cadprompt.register(str(queryeval), domain_id, public_set)
        env = gymnasium.make("rlpt/cad-testqueryeval-hard-v0")
        obs, _ = env.reset(seed=0)
        assert "graded up to a rigid motion" in obs and "L bracket" in obs
        assert env.step(_ANSWER)[4]["verdict"] == "PASS"
        env.reset(seed=0)
        wrong = _ANSWER.replace("Pos(40, 20, 0)", "Pos(40, 10, 0)")  # the hole in the middle: no pose makes it right
        _, reward, _, _, step = env.step(wrong)
        assert step["verdict"] == "FAIL" and 0.0 < reward < cad.FAIL_REWARD_SCALE, step
        env = gymnasium.make("rlpt/cad-testqueryeval-inplace-hard-v0")
        env.reset(seed=0)
        assert env.step(_ANSWER)[4]["verdict"] == "FAIL"
    finally:
        for domain_id in ids:
            registry.unregister(domain_id)
