"""Physics for CAD assemblies: exact convex pieces, MuJoCo settling checked
against statics, and the assembly ladder's stand rung and overhang task.

The convex pieces are checked against the solid they cut (manifold3d, exact
booleans): their hulls cover it, exceed it by under 0.3% of its volume, and
never reach into a hole's 0.5 mm clearance. Settling is checked against what
statics says: a plank whose centre of mass is 1% or 5% of its length inside
its support's end stands, 1% or 5% past it tips (bodies at rest sleep in the
simulation: this is what shows a tipping one is not put to sleep); a box
released 5 mm up falls 5 mm."""

import re

import gymnasium
import numpy as np
import pytest

import environments  # noqa: F401
from environments.cad import runner
from environments.verdicts import Verdict

physics = pytest.importorskip("environments.cad.physics", reason="CAD physics needs the cad extra (MuJoCo)")
manifold3d = pytest.importorskip("manifold3d")
from environments.cad import geometry  # noqa: E402
from environments.families import cad_assembly  # noqa: E402

_OK, _WHY = runner.available()


def _solid(m) -> "geometry.Solid":
    mesh = m.to_mesh()
    return geometry.solid(np.asarray(mesh.vert_properties)[:, :3].astype(np.float64),
                          np.asarray(mesh.tri_verts).astype(np.int64))


def _box(lo, hi) -> "geometry.Solid":
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return _solid(manifold3d.Manifold.cube((hi - lo).tolist()).translate(lo.tolist()))


def _hulls(pieces):
    return [manifold3d.Manifold.hull_points(p.tolist()) for p in pieces]


def test_a_convex_part_is_one_piece():
    assert len(physics.convex_pieces(manifold3d.Manifold.cube([10, 20, 5]))) == 1
    assert len(physics.convex_pieces(manifold3d.Manifold.cylinder(20, 4, 4, 64))) == 1


@pytest.mark.parametrize("hole_d", [4.0, 8.0, 12.0])
def test_pieces_of_a_block_with_a_hole_cover_it_and_keep_the_hole_open(hole_d):
    block = manifold3d.Manifold.cube([40, 40, 10], True) - manifold3d.Manifold.cylinder(12, hole_d / 2, hole_d / 2, 96, True)
    hulls = _hulls(physics.convex_pieces(block))
    assert 4 <= len(hulls) <= physics.MAX_PIECES
    union = manifold3d.Manifold.batch_boolean(hulls, manifold3d.OpType.Add)
    assert (block - union).volume() < 1e-3 * block.volume()        # the pieces cover the part
    assert union.volume() < 1.003 * block.volume()                  # and barely more
    pin = manifold3d.Manifold.cylinder(20, hole_d / 2 - 0.5, hole_d / 2 - 0.5, 96, True)  # 0.5 mm clearance
    assert max((h ^ pin).volume() for h in hulls) < 1e-9            # no hull reaches into the clearance


def test_pieces_of_a_ring_keep_its_bore_open():
    ring = manifold3d.Manifold.cylinder(2, 7, 7, 96) - manifold3d.Manifold.cylinder(2, 3, 3, 96)
    hulls = _hulls(physics.convex_pieces(ring))
    pin = manifold3d.Manifold.cylinder(2, 2.5, 2.5, 96)
    assert max((h ^ pin).volume() for h in hulls) < 1e-9


def test_a_part_too_intricate_to_cut_is_refused():
    comb = manifold3d.Manifold.cube([100, 10, 10])
    for k in range(60):  # 60 slots: far more pieces than allowed
        comb = comb - manifold3d.Manifold.cube([0.8, 6, 12]).translate([1 + k * 1.6, 2, -1])
    with pytest.raises(physics.TooComplex, match="more than 16 convex pieces"):
        physics.convex_pieces(comb, max_pieces=16)
    with pytest.raises(physics.TooComplex, match="took more than 0.05 CPU s"):
        physics.convex_pieces(comb, max_s=0.05)


def test_a_resting_box_stays_and_a_raised_one_falls_its_height():
    assert physics.settle([_box([-50, -10, 0], [50, 10, 10])]).moved_mm[0] < 0.01
    fallen = physics.settle([_box([-50, -10, 5], [50, 10, 15])]).moved_mm[0]
    assert fallen == pytest.approx(5.0, abs=0.05)


def test_a_part_below_the_ground_is_refused():
    with pytest.raises(physics.BelowGround, match="part 1 starts 1.00 mm below the ground"):
        physics.settle([_box([0, 0, -1], [10, 10, 10])])
    grade = cad_assembly.stands([_box([0, 0, -1], [10, 10, 10])])
    assert grade.verdict is Verdict.FAIL and "below the ground" in grade.feedback


def test_a_speck_is_the_models_fail_and_a_piece_mujoco_refuses_is_the_checkers(monkeypatch):
    """MuJoCo's compile errors are ValueErrors: before, `stands` called each
    one the model's FAIL. A part too small to simulate is the model's design
    (FAIL, caught before MuJoCo); a convex piece the checker cut that MuJoCo
    refuses is the checker's fault (VERIFIER_ERROR, which the trainer masks)."""
    base = _box([0, 0, 0], [20, 20, 2])
    speck = cad_assembly.stands([base, _box([0, 0, 2], [0.1, 0.1, 2.1])])
    assert speck.verdict is Verdict.FAIL and "part 2 is too small or thin to simulate" in speck.feedback, speck
    assert cad_assembly.stands([base, _box([0, 0, 2], [0.5, 0.5, 2.5])]) is None  # 0.5 mm still simulates
    # The cut hands MuJoCo a flat piece (four coplanar corners): it cannot compile it.
    monkeypatch.setattr(physics, "pieces_of", lambda solid: (np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0.0]]),))
    grade = cad_assembly.stands([base])
    assert grade.verdict is Verdict.VERIFIER_ERROR and grade.infra_error and "coplanar" in grade.feedback, grade


@pytest.mark.parametrize("centre_past_edge, stands", [(-0.05, True), (-0.01, True), (0.01, False), (0.05, False)])
def test_a_plank_over_an_edge_tips_exactly_when_statics_says(centre_past_edge, stands):
    length = 100.0
    base = _box([-length, -10, 0], [0, 10, 10])
    # The top plank's centre of mass is `centre_past_edge` x length past the base's end.
    x_end = length / 2 + centre_past_edge * length
    top = _box([x_end - length, -10, 10], [x_end, -10 + 20, 20])
    moved = physics.settle([base, top]).moved_mm[1]
    assert (moved < cad_assembly.STAND_MM) == stands, moved


# ---- the assembly ladder (needs the kernel) ----

needs_kernel = pytest.mark.skipif(not _OK, reason=f"CAD tests need the cad extra: {_WHY}")


def _overhang_task(seed=1):
    env = gymnasium.make("rlpt/cad-assembly-overhang-hard-v0").unwrapped
    env.reset(seed=seed)
    return env.task.hidden


def _stack(task, x2, x3, z3=None):
    """A script with the task's planks at +x ends x=0, x2, x3 (mm)."""
    line = task.script.splitlines()[1]  # plank = Box(L, W, H, align=...)
    height = float(line.split("Box(")[1].split(",")[2])
    z3 = 2 * height if z3 is None else z3
    return (f"from build123d import *\n{line}\n"
            f"result = [plank, Pos({x2}, 0, {height}) * plank, Pos({x3}, 0, {z3}) * plank]\n")


@needs_kernel
def test_overhang_reference_passes_and_physics_decides_the_rest():
    task = _overhang_task()
    length = float(task.script.splitlines()[1].split("Box(")[1].split(",")[0])
    grade = cad_assembly.grade_assembly(task.script, task)
    assert grade.verdict is Verdict.PASS and grade.reward == 1.0, grade.feedback
    # Plank 3 alone out past plank 2 by the goal: its centre is past the edge, it tips.
    tipped = cad_assembly.grade_assembly(_stack(task, 0, task.overhang_mm), task)
    assert tipped.verdict is Verdict.FAIL and tipped.reward == 0.0 and "part 3 moved" in tipped.feedback
    # Flush planks stand but reach nothing: partial credit 0.
    flush = cad_assembly.grade_assembly(_stack(task, 0, 0), task)
    assert flush.verdict is Verdict.FAIL and flush.reward == 0.0 and "overhangs plank 1 by 0.0 mm" in flush.feedback
    # A safe, short stack: partial credit in proportion.
    short = cad_assembly.grade_assembly(_stack(task, 0.1 * length, 0.4 * length), task)
    assert short.verdict is Verdict.FAIL
    assert short.reward == pytest.approx(0.8 * 0.4 * length / task.overhang_mm, rel=1e-3)
    # Plank 3 put on the ground far out: it stands, but does not lie on plank 2.
    cheat = cad_assembly.grade_assembly(_stack(task, 0, 2 * length, z3=0), task)
    assert cheat.verdict is Verdict.FAIL and "does not lie on plank 2" in cheat.feedback
    # Floating planks fall.
    floating = cad_assembly.grade_assembly(_stack(task, 0, 0, z3=40), task)
    assert floating.verdict is Verdict.FAIL and "does not stand" in floating.feedback
    # A shorter plank is the wrong shape wherever it is.
    shorter = task.script.replace(f"Box({length:g},", f"Box({length - 2:g},")
    wrong = cad_assembly.grade_assembly(shorter, task)
    assert wrong.verdict is Verdict.FAIL and "wrong shape" in wrong.feedback


@needs_kernel
def test_a_pin_dropped_into_its_hole_falls_through_to_the_ground():
    env = gymnasium.make("rlpt/cad-assembly-pin-medium-v0").unwrapped
    env.reset(seed=0)
    task = env.task.hidden
    assert cad_assembly.grade_assembly(task.script, task).verdict is Verdict.PASS
    raised = task.script.replace("pin = Cylinder(", "pin = Pos(0, 0, 3) * Cylinder(")
    grade = cad_assembly.grade_assembly(raised, task)
    # It falls 3 mm down the hole (the block's pieces leave it open) and lands on the ground.
    assert grade.verdict is Verdict.FAIL and "part 2 moved 3.0" in grade.feedback, grade.feedback


@pytest.mark.skipif(not _OK, reason=f"the tower needs the CAD kernel: {_WHY}")
def test_tower_reference_passes_and_physics_and_interference_decide_the_rest():
    from environments import registry
    from environments.families import cad

    domain = registry.domain("rlpt/cad-assembly-tower-easy-v0")
    rng = np.random.default_rng(0)
    longest = max(len(domain.sample(rng).prompt) for _ in range(2000))
    assert longest <= domain.spec.max_prompt_chars == cad_assembly.BRIEF_MAX_PROMPT_CHARS
    env = gymnasium.make("rlpt/cad-assembly-tower-easy-v0").unwrapped
    obs, _ = env.reset(seed=2)
    assert obs.endswith(cad_assembly.BRIEF_INSTRUCTIONS + "script:\n")
    task = env.task.hidden
    assert cad_assembly.grade_assembly(task.script, task).verdict is Verdict.PASS
    (z1, a, h1), (z2, b, h2) = [(float(z), int(w), int(h)) for z, w, h in
                                re.findall(r"Pos\(0, 0, ([0-9.]+)\) \* Box\((\d+), \d+, (\d+)\)", task.script)]

    def tower(x2, z2, first=(a, h1, z1), second=(b, h2)):
        (w1, t1, zz1), (w2, t2) = first, second
        return (f"from build123d import *\nresult = [Pos(0, 0, {zz1:g}) * Box({w1}, {w1}, {t1}), "
                f"Pos({x2:g}, 0, {z2:g}) * Box({w2}, {w2}, {t2})]\n")

    assert cad_assembly.grade_assembly(tower(0, z2), task).verdict is Verdict.PASS
    floating = cad_assembly.grade_assembly(tower(0, z2 + 3), task)
    assert floating.verdict is Verdict.FAIL and "part 2 moved" in floating.feedback, floating
    sunk = cad_assembly.grade_assembly(tower(0, z2 - 1), task)
    assert sunk.verdict is Verdict.FAIL and "interpenetrate" in sunk.feedback, sunk
    # Off centre but standing (its centre over block 1): it stands, and is not the design asked for.
    shifted = cad_assembly.grade_assembly(tower(3, z2), task)
    assert shifted.verdict is Verdict.FAIL and "part 2" in shifted.feedback and 0 < shifted.reward < cad.FAIL_REWARD_SCALE
    # The small block under the large one: each stands, neither is the part asked for in its place.
    swapped = cad_assembly.grade_assembly(tower(0, h2 + h1 / 2, first=(b, h2, h2 / 2), second=(a, h1)), task)
    assert swapped.verdict is Verdict.FAIL and swapped.reward < 0.5 * cad.FAIL_REWARD_SCALE, swapped
