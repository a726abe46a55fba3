"""A CAD FAIL's partial credit pays for features, not for the envelope.

On rlpt/cad-plate-easy-v0 (seed 0: a 110 x 70 x 7 mm plate, four 4 mm holes)
the old credit, 0.8 x IoU, paid 0.79 for a box of the plate's volume and for
the plate without its holes. The credit (environments/families/cad.py:
0.8 x hull IoU x feature IoU) must pay an envelope at most 0.3, a part
missing one hole less than the part and more than one missing all four, the
reference 1 (PASS), and more as a part's error shrinks. The geometry-only
checks use manifold3d fixtures and need no kernel; the rest build scripts in
the kernel sandbox (~0.2 s a grade)."""

import re

import gymnasium
import numpy as np
import pytest

import environments  # noqa: F401
from environments.cad import runner
from environments.verdicts import Verdict

manifold3d = pytest.importorskip("manifold3d")
from environments.cad import geometry  # noqa: E402
from environments.families import cad  # noqa: E402

_OK, _WHY = runner.available()
needs_kernel = pytest.mark.skipif(not _OK, reason=f"CAD tests need the cad extra: {_WHY}")
ENVELOPE_MAX = 0.3


def _solid(m) -> geometry.Solid:
    mesh = m.to_mesh()
    return geometry.solid(np.asarray(mesh.vert_properties)[:, :3].astype(np.float64), np.asarray(mesh.tri_verts).astype(np.int64))


def _plate(holes=((-40, -20), (-40, 20), (40, -20), (40, 20)), hole_d=6.0, size=(100.0, 60.0, 5.0)):
    part = manifold3d.Manifold.cube(list(size), True)
    for x, y in holes:
        part -= manifold3d.Manifold.cylinder(size[2] + 2, hole_d / 2, hole_d / 2, 64, True).translate([x, y, 0])
    return _solid(part)


def test_agreement_splits_envelope_from_features():
    ref = _plate()
    whole = geometry.agreement(ref, ref)
    assert whole.envelope == pytest.approx(1.0, abs=1e-9) and whole.features == pytest.approx(1.0, abs=1e-9)
    # The plate without its holes is the reference's envelope: hulls agree, features do not.
    bare = geometry.agreement(_plate(holes=()), ref)
    assert bare.envelope == pytest.approx(1.0, abs=1e-6) and bare.credit < 0.1
    # Three of four holes: three quarters of the feature volume.
    three = geometry.agreement(_plate(holes=((-40, -20), (-40, 20), (40, -20))), ref)
    assert three.features == pytest.approx(0.75, abs=0.02)


def test_for_convex_parts_the_credit_is_the_volume_iou():
    a = _solid(manifold3d.Manifold.cube([20, 10, 5]))
    b = _solid(manifold3d.Manifold.cube([16, 12, 5]).translate([1, -1, 0]))
    agree = geometry.agreement(a, b)
    assert agree.features == pytest.approx(1.0, abs=1e-9)
    assert agree.credit == pytest.approx(geometry.iou(a, b), abs=1e-9)


# ---- through the whole ladder (kernel) ----

_BOTTOM = "align=(Align.CENTER, Align.CENTER, Align.MIN)"


@pytest.fixture(scope="module")
def plate():
    """(reference script, w, d, t, hole diameter, hole centres) of cad-plate-easy seed 0."""
    env = gymnasium.make("rlpt/cad-plate-easy-v0").unwrapped
    env.reset(seed=0)
    script = env.task.hidden
    w, d, t = (float(v) for v in re.search(r"Box\(([\d.]+), ([\d.]+), ([\d.]+)", script).groups())
    hole = 2 * float(re.search(r"Cylinder\(([\d.]+)", script).group(1))
    xs = [float(v) for v in re.search(r"for x in \(([-\d., ]+)\)", script).group(1).split(",")]
    ys = [float(v) for v in re.search(r"for y in \(([-\d., ]+)\)", script).group(1).split(",")]
    return script, w, d, t, hole, [(x, y) for x in xs for y in ys]


def _plate_script(w, d, t, hole, centres):
    cuts = "".join(f"part -= Pos({x:g}, {y:g}, 0) * Cylinder({hole / 2:g}, {t:g}, {_BOTTOM})\n" for x, y in centres)
    return f"from build123d import *\npart = Box({w:g}, {d:g}, {t:g}, {_BOTTOM})\n{cuts}result = part\n"


@needs_kernel
def test_plate_credit_pays_features_not_the_envelope(plate):
    script, w, d, t, hole, centres = plate
    grade = lambda answer: cad.grade_script(answer, script)  # noqa: E731
    reference = grade(script)
    assert (reference.verdict, reference.reward) == (Verdict.PASS, 1.0)
    assert grade(_plate_script(w, d, t, hole, centres)).verdict is Verdict.PASS  # the same part, written anew
    volume = cad.reference_or_grade(script).volume
    box = grade(f"from build123d import *\nresult = Box({w:g}, {d:g}, {volume / (w * d):.6f}, {_BOTTOM})\n")
    cube = grade(f"from build123d import *\nresult = Box(*[{volume ** (1 / 3):.6f}] * 3, {_BOTTOM})\n")
    bare = grade(_plate_script(w, d, t, hole, []))
    for envelope in (box, cube, bare):
        assert envelope.verdict is Verdict.FAIL and envelope.reward <= ENVELOPE_MAX, envelope
    missing_one = grade(_plate_script(w, d, t, hole, centres[:3]))
    missing_two = grade(_plate_script(w, d, t, hole, centres[:2]))
    assert missing_one.verdict is Verdict.FAIL and "feature (hull minus part) IoU" in missing_one.feedback
    assert bare.reward < missing_two.reward < missing_one.reward < reference.reward
    # Three of four holes: 0.8 x (3/4 f + floor) / (f + floor), f the holes' share of the hull.
    ref = cad.reference_or_grade(script)
    f = ref.features.volume() / ref.hull.volume()
    floor = geometry.FEATURE_FLOOR
    assert missing_one.reward == pytest.approx(0.8 * (0.75 * f + floor) / (f + floor), abs=0.005)


@needs_kernel
def test_plate_credit_grows_as_the_error_shrinks(plate):
    script, w, d, t, hole, centres = plate
    sweeps = {
        "hole diameter": [_plate_script(w, d, t, hole + e, centres) for e in (4, 2, 1, 0.5)],
        "plate length": [_plate_script(w + e, d, t, hole, centres) for e in (16, 8, 4, 1)],
        "hole offset": [_plate_script(w, d, t, hole, [(x + e, y) for x, y in centres]) for e in (3, 2, 1, 0.5)],
    }
    for name, answers in sweeps.items():
        grades = [cad.grade_script(a, script) for a in answers]
        assert all(g.verdict is Verdict.FAIL for g in grades), (name, grades)
        rewards = [g.reward for g in grades]
        assert all(a < b for a, b in zip(rewards, rewards[1:])), (name, rewards)
        assert 0.0 < rewards[0] and rewards[-1] < cad.FAIL_REWARD_SCALE, (name, rewards)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_bracket_missing_either_hole_fails(seed):
    """Each hole's wall is well under 1% of a bracket's surface: random surface
    samples alone can miss it (seed 0 once PASSed without its upright's hole);
    every triangle's centroid is sampled too."""
    env = gymnasium.make("rlpt/cad-bracket-medium-v0").unwrapped
    env.reset(seed=seed)
    lines = env.task.hidden.splitlines()
    holes = [i for i, line in enumerate(lines) if "Cylinder" in line]
    assert len(holes) == 2
    for drop in holes:
        grade = cad.grade_script("\n".join(l for i, l in enumerate(lines) if i != drop) + "\n", env.task.hidden)
        assert grade.verdict is Verdict.FAIL and grade.reward < 0.8, grade
    assert cad.grade_script(env.task.hidden, env.task.hidden).verdict is Verdict.PASS
