"""Does an assembly stand? Rigid parts on a ground plane, simulated by MuJoCo.

MuJoCo collides convex shapes: a mesh geom is its convex hull, so a block with
a hole is a solid block to it, and a pin in that hole is a deep collision. Each
part is therefore cut into convex pieces first (`convex_pieces`): a piece whose
hull sticks out of it by more than `HULL_MM` anywhere is cut in two, by an
axis plane through the middle of its deepest hull gap, across the axes along
which that gap does not span the piece (cutting along a hole's axis would
leave the hole), until every piece's hull is within `HULL_MM` of it. The cuts
are exact (manifold3d), and the depth is the largest distance from points on
each gap's surface to the piece (trimesh). A block with a 0.5 mm clearance hole
becomes 12-24 pieces in about 0.1 s whose hulls do not touch the pin (CoACD
at its defaults: 4 pieces, 1.1 s, hulls across the hole).

`settle` drops nothing and pushes nothing: the parts start where the script
put them, under gravity (steel, 7.85 g/cm3; friction 0.8), for `seconds`, and
each part's motion is the largest displacement of its bounding-box corners.
An assembly stands when no part moves more than a tolerance. Contacts are
made stiff (time constant 2 ms, time step 0.5 ms) so a part resting on
another sinks by well under 0.05 mm.

What is refused says whose fault it is: a part below the ground
(BelowGround), too light or thin for MuJoCo (TooSmall: checked on the part's
exact mass properties before MuJoCo sees it) or needing too many pieces
(TooComplex) is the model's; anything MuJoCo raises on the pieces this
module cut (its compile errors are plain ValueErrors) is the checker's.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
import time

import manifold3d
import mujoco
import numpy as np
import trimesh

from environments.cad.geometry import Solid, volume_moments

HULL_MM = 0.1
MAX_PIECES = 96
MAX_CUT_S = 10.0        # CPU seconds to cut one part, past which it is refused as too complex
GROUND_MM = 0.05       # a part may start this far below z = 0 (tessellation)
DENSITY = 7850.0       # kg/m3
FRICTION = 0.8
TIMESTEP_S = 5e-4
SOLREF = (0.002, 1.0)  # contact time constant (s) and damping ratio
_FRICTIONS = [FRICTION, 0.005, 0.0001]  # sliding, torsional, rolling
_GAP_SAMPLES = 64
_SLIVER_MM3 = 1e-3     # a cut's crumbs are dropped: under MuJoCo's smallest mesh volume
_MM = 1e-3             # the simulation runs in metres
# A body's mass (kg) and principal inertias (kg m2) must exceed mjMINVAL
# (1e-15) to compile; a part is refused, as the model's, under 10 times that
# (a steel cube 0.4 mm across; the thinnest generated pin, 3 x 15 mm, is at 9e-10).
MIN_INERTIA = 10 * mujoco.mjMINVAL


class TooComplex(ValueError):
    """A part needs more than MAX_PIECES convex pieces (the model's design)."""


class BelowGround(ValueError):
    """A part starts below the ground plane (the model's placement)."""


class TooSmall(ValueError):
    """A part's mass or a principal moment of inertia is under what MuJoCo
    simulates (the model's design: a speck or a needle)."""


@dataclasses.dataclass(frozen=True)
class Motion:
    """How far each part moved (mm, largest bounding-box corner displacement)
    over the simulated time, and the convex pieces each was simulated as."""

    moved_mm: tuple[float, ...]
    pieces: tuple[int, ...]


def _trimesh(m: manifold3d.Manifold) -> trimesh.Trimesh:
    mesh = m.to_mesh()
    return trimesh.Trimesh(np.asarray(mesh.vert_properties)[:, :3], np.asarray(mesh.tri_verts), process=False)


def _deepest_gap(piece: manifold3d.Manifold) -> tuple[float, manifold3d.Manifold | None]:
    """(how far the piece's hull sticks out of it, mm; the gap where it does)."""
    gap = piece.hull() - piece
    if gap.is_empty() or gap.volume() < 1e-9:
        return 0.0, None
    surface = _trimesh(piece)
    deepest: tuple[float, manifold3d.Manifold | None] = (0.0, None)
    for component in gap.decompose():
        if component.volume() < 1e-9:
            continue
        points, _ = trimesh.sample.sample_surface(_trimesh(component), _GAP_SAMPLES, seed=0)
        _, distance, _ = trimesh.proximity.closest_point(surface, points)
        depth = float(distance.max())
        if depth > deepest[0]:
            deepest = (depth, component)
    return deepest


def convex_pieces(solid: manifold3d.Manifold, hull_mm: float = HULL_MM,
                  max_pieces: int = MAX_PIECES, max_s: float = MAX_CUT_S) -> list[np.ndarray]:
    """Vertices (mm, Vx3) of convex pieces whose union is the solid to within
    `hull_mm`; TooComplex past `max_pieces` or `max_s` CPU seconds."""
    todo, done = [solid], []
    deadline = time.process_time() + max_s
    while todo:
        if time.process_time() > deadline:
            raise TooComplex(f"cutting a part into convex pieces took more than {max_s:g} CPU s "
                             f"({len(done)} pieces so far)")
        piece = todo.pop()
        depth, gap = _deepest_gap(piece)
        if depth <= hull_mm:
            done.append(piece)
            continue
        if len(done) + len(todo) + 2 > max_pieces:
            raise TooComplex(f"a part needs more than {max_pieces} convex pieces to simulate")
        g_lo, g_hi = np.split(np.asarray(gap.bounding_box()), 2)
        p_lo, p_hi = np.split(np.asarray(piece.bounding_box()), 2)
        extent = np.where(g_hi - g_lo >= p_hi - p_lo - 1e-6, -1.0, g_hi - g_lo)
        axis = int(np.argmax(extent))
        if extent[axis] <= 0:  # the gap spans the piece every way: cut it in the middle of its longest side
            axis = int(np.argmax(p_hi - p_lo))
        normal = [0.0, 0.0, 0.0]
        normal[axis] = 1.0
        for half in piece.split_by_plane(normal, float((g_lo[axis] + g_hi[axis]) / 2)):
            todo.extend(c for c in half.decompose() if c.volume() > _SLIVER_MM3)
    return [np.asarray(p.hull().to_mesh().vert_properties)[:, :3].astype(np.float64) for p in done]


_PIECES: collections.OrderedDict[bytes, tuple[np.ndarray, ...]] = collections.OrderedDict()
_PIECES_KEPT = 512
_PIECES_LOCK = threading.Lock()


def pieces_of(solid: Solid) -> tuple[np.ndarray, ...]:
    """convex_pieces of a checked solid, cached on its mesh's digest (a reference
    part, or a candidate that repeats one, is cut once per process)."""
    key = hashlib.sha256(np.ascontiguousarray(solid.vertices, dtype=np.float64).tobytes()
                         + np.ascontiguousarray(solid.faces, dtype=np.int64).tobytes()).digest()
    with _PIECES_LOCK:
        if key in _PIECES:
            _PIECES.move_to_end(key)
            return _PIECES[key]
    pieces = tuple(convex_pieces(solid.manifold))
    with _PIECES_LOCK:
        _PIECES[key] = pieces
        while len(_PIECES) > _PIECES_KEPT:
            _PIECES.popitem(last=False)
    return pieces


def mass_properties(solid: Solid) -> tuple[float, np.ndarray]:
    """The part's mass (kg, steel) and principal moments of inertia (kg m2, 3)."""
    _, cov = volume_moments(solid)
    mass = DENSITY * solid.volume * _MM**3
    inertia = mass * (np.trace(cov) * np.eye(3) - cov) * _MM**2  # about the centroid
    return mass, np.linalg.eigvalsh(inertia)


def _model(parts: list[tuple[np.ndarray, ...]]) -> mujoco.MjModel:
    spec = mujoco.MjSpec()
    spec.option.timestep = TIMESTEP_S
    spec.option.gravity = [0.0, 0.0, -9.81]
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    # Bodies at rest go to sleep (30x faster for a standing assembly); one
    # that is starting to tip is not at rest (the tests against statics).
    spec.option.enableflags |= int(mujoco.mjtEnableBit.mjENBL_SLEEP)
    ground = spec.worldbody.add_geom()
    ground.type = mujoco.mjtGeom.mjGEOM_PLANE
    ground.size = [0.0, 0.0, 1.0]
    ground.friction = _FRICTIONS
    ground.solref = list(SOLREF)
    for k, pieces in enumerate(parts):
        body = spec.worldbody.add_body()
        body.name = f"part{k}"
        body.add_freejoint()
        for j, vertices in enumerate(pieces):
            mesh = spec.add_mesh()
            mesh.name = f"part{k}_piece{j}"
            mesh.uservert = (vertices * _MM).ravel().tolist()
            geom = body.add_geom()
            geom.type = mujoco.mjtGeom.mjGEOM_MESH
            geom.meshname = mesh.name
            geom.density = DENSITY
            geom.friction = _FRICTIONS
            geom.solref = list(SOLREF)
    return spec.compile()


def settle(solids: list[Solid], seconds: float = 1.0) -> Motion:
    """Simulate the parts where they are, on the ground plane z = 0, for
    `seconds`; BelowGround if a part starts below the ground, TooSmall if it
    is too light or thin for MuJoCo, TooComplex if it cannot be cut into few
    enough convex pieces: the model's faults. Any
    other exception (MuJoCo's compile errors are ValueErrors) is the
    checker's: its own pieces failed to simulate."""
    for k, s in enumerate(solids, 1):
        low = float(s.vertices[:, 2].min())
        if low < -GROUND_MM:
            raise BelowGround(f"part {k} starts {-low:.2f} mm below the ground (z = 0)")
        mass, inertia = mass_properties(s)
        if mass <= MIN_INERTIA or inertia.min() <= MIN_INERTIA:
            raise TooSmall(f"part {k} is too small or thin to simulate ({s.volume:.3g} mm3, least principal inertia "
                           f"{inertia.min():.2g} kg m2; at least {MIN_INERTIA:g})")
    parts = [pieces_of(s) for s in solids]
    model = _model(parts)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    bodies = [model.body(f"part{k}").id for k in range(len(solids))]
    corners = []
    for k, s in enumerate(solids):
        lo, hi = s.vertices.min(0) * _MM, s.vertices.max(0) * _MM
        box = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
        # Corners in the body's frame (bodies start at the origin, unrotated, but
        # MuJoCo may place a body's frame elsewhere: use the compiled pose).
        start_pos, start_mat = data.xpos[bodies[k]].copy(), data.xmat[bodies[k]].reshape(3, 3).copy()
        corners.append(((box - start_pos) @ start_mat, box))
    for _ in range(int(round(seconds / TIMESTEP_S))):
        mujoco.mj_step(model, data)
    moved = []
    for k, (local, start) in enumerate(corners):
        now = local @ data.xmat[bodies[k]].reshape(3, 3).T + data.xpos[bodies[k]]
        moved.append(float(np.linalg.norm(now - start, axis=1).max()) / _MM)
    return Motion(tuple(moved), tuple(len(p) for p in parts))
