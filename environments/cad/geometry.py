"""Host side of CAD grading: checks and compares meshes the kernel returned.

Nothing the sandbox reports is trusted: the mesh is rebuilt here from its raw
arrays, vertices shared by adjacent faces are merged, and manifold3d decides
whether it is one closed, valid solid (its own status check; a mesh with a
hole, a flipped or dangling face fails). Volume IoU is manifold3d's exact
intersection of the two meshes; the surface distance is trimesh's
point-to-surface distance (rtree) from points sampled on each surface to the
other, both ways. Silhouettes (top, front, side) are rasterised here too.

`agreement` splits a solid into its envelope (its convex hull) and its
features (what it leaves out of that hull: holes, pockets, the inside of an
L) and scores each against the reference's; a FAIL's partial credit is built
on it (environments/families/cad.py), so that an envelope alone earns nothing.
`aligned` finds the rigid motion that best puts a candidate on a reference,
for public sets whose references sit in poses their text does not state
(environments/cad/cadprompt.py).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import manifold3d
import numpy as np
import trimesh
from scipy.spatial import cKDTree  # scipy comes with build123d (the cad extra)

# Vertex coordinates equal to this many mm are one vertex (float32 export of
# the same kernel vertex is bit-equal; this also absorbs rounding).
_MERGE_MM = 1e-4
_SAMPLES = 256
_CENTROIDS = 8192
# Features (hull minus solid) are compared up to this fraction of the reference
# envelope's volume: the Jaccard smoothing term of `agreement`. A tessellated
# convex part rotated off the axes leaves ~1e-5 of its hull out (vertices
# merged on a 1e-4 mm grid); the smallest feature of a generated part (four
# 4 mm holes in a 120 x 80 mm plate) is 5e-3 of its hull.
FEATURE_FLOOR = 1e-3


class MeshError(ValueError):
    """The returned geometry is not one valid closed solid (the model's fault)."""


@dataclasses.dataclass(frozen=True)
class Solid:
    """A checked solid: merged vertices_Vx3 (mm), faces_Fx3 (indices), its manifold."""

    vertices: np.ndarray
    faces: np.ndarray
    manifold: manifold3d.Manifold

    @property
    def volume(self) -> float:
        return float(self.manifold.volume())

    @functools.cached_property
    def hull(self) -> manifold3d.Manifold:
        """The convex hull: the part's envelope."""
        return self.manifold.hull()

    @functools.cached_property
    def features(self) -> manifold3d.Manifold:
        """What the part leaves out of its hull (empty for a convex part)."""
        return self.hull - self.manifold


def solid_from_kernel(mesh: dict) -> Solid:
    """The one closed solid in a kernel report; MeshError names what is wrong."""
    vertices_b, triangles_b = mesh.get("vertices"), mesh.get("triangles")
    if type(vertices_b) is not bytes or type(triangles_b) is not bytes or len(vertices_b) % 12 or len(triangles_b) % 12:
        raise MeshError("the kernel returned malformed mesh arrays")
    vertices = np.frombuffer(vertices_b, dtype=np.float32).reshape(-1, 3).astype(np.float64)
    faces = np.frombuffer(triangles_b, dtype=np.uint32).reshape(-1, 3).astype(np.int64)
    if len(faces) == 0:
        raise MeshError("the part is empty (no faces)")
    if not np.isfinite(vertices).all() or (faces >= len(vertices)).any():
        raise MeshError("the part's mesh has non-finite vertices or bad indices")
    return solid(vertices, faces)


def solid(vertices: np.ndarray, faces: np.ndarray) -> Solid:
    keys = np.round(vertices / _MERGE_MM).astype(np.int64)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    merged_v = unique.astype(np.float64) * _MERGE_MM
    merged_f = inverse.reshape(-1)[faces]
    keep = (merged_f[:, 0] != merged_f[:, 1]) & (merged_f[:, 1] != merged_f[:, 2]) & (merged_f[:, 0] != merged_f[:, 2])
    merged_f = merged_f[keep]
    mesh = manifold3d.Mesh(vert_properties=merged_v.astype(np.float32), tri_verts=merged_f.astype(np.uint32))
    manifold = manifold3d.Manifold(mesh)
    if manifold.status() != manifold3d.Error.NoError:
        raise MeshError(f"the part is not a closed valid solid (manifold check: {manifold.status().name})")
    if manifold.is_empty() or manifold.volume() <= 0:
        raise MeshError("the part has no volume")
    pieces = len(manifold.decompose())
    if pieces != 1:
        raise MeshError(f"the part is {pieces} separate solids; expected one")
    return Solid(merged_v, merged_f, manifold)


def iou(a: Solid, b: Solid) -> float:
    """Volume of the intersection over volume of the union (exact on the meshes)."""
    inter = float((a.manifold ^ b.manifold).volume())
    union = a.volume + b.volume - inter
    return inter / union if union > 0 else 0.0


def _jaccard(a: manifold3d.Manifold, b: manifold3d.Manifold, floor: float = 0.0) -> float:
    """|a & b| + floor over |a | b| + floor (1 for two empty sets when floor > 0)."""
    inter = float((a ^ b).volume())
    union = float(a.volume()) + float(b.volume()) - inter
    return (inter + floor) / (union + floor) if union + floor > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class Agreement:
    """How far a candidate agrees with a reference, in place.

    envelope: the Jaccard index (IoU) of the two convex hulls.
    features: the Jaccard index of the two feature sets (hull minus solid),
      both numerator and denominator plus FEATURE_FLOOR x the reference
      hull's volume, so two convex parts agree (1) and features smaller than
      the floor count as mesh noise.
    credit: their product, in [0, 1] and 1 only for the same solid (a solid
      is its hull minus its features). An envelope alone (no features) earns
      floor / (reference features + floor), ~0 for any reference with
      features; for two convex parts it is their volume IoU.
    """

    envelope: float
    features: float

    @property
    def credit(self) -> float:
        return self.envelope * self.features


def agreement(candidate: Solid, reference: Solid) -> Agreement:
    """Envelope and feature agreement of `candidate` with `reference` (see Agreement)."""
    floor = FEATURE_FLOOR * float(reference.hull.volume())
    return Agreement(_jaccard(candidate.hull, reference.hull), _jaccard(candidate.features, reference.features, floor))


def surface_distance(a: Solid, b: Solid, samples: int = _SAMPLES, seed: int = 0) -> float:
    """Largest distance (mm) from points on either surface to the other.

    The points of a surface are `samples` drawn by area with a fixed seed (so
    a grade is deterministic) and the centroid of every one of its triangles
    (at most _CENTROIDS, evenly strided beyond): a feature whose walls are a
    small share of the area (a 4 mm hole through a bracket's upright, 0.3% of
    its surface) is missed by area sampling alone, never by its own triangles."""
    mesh_a = trimesh.Trimesh(a.vertices, a.faces, process=False)
    mesh_b = trimesh.Trimesh(b.vertices, b.faces, process=False)
    worst = 0.0
    for src, dst in ((mesh_a, mesh_b), (mesh_b, mesh_a)):
        points, _ = trimesh.sample.sample_surface(src, samples, seed=seed)
        centroids = src.triangles_center[:: -(-len(src.faces) // _CENTROIDS)]
        _, distance, _ = trimesh.proximity.closest_point(dst, np.concatenate([points, centroids]))
        worst = max(worst, float(np.max(distance)))
    return worst


# Views as (horizontal axis, vertical axis) of the projection.
VIEWS = {"top": (0, 1), "front": (0, 2), "side": (1, 2)}


def silhouette(s: Solid, view: str, lo: np.ndarray, hi: np.ndarray, size: int) -> np.ndarray:
    """Boolean size x size mask of the solid projected along the view's third
    axis, over the box [lo, hi] (mm); a pixel is set if its centre is covered."""
    u, v = VIEWS[view]
    centres_u = lo[u] + (np.arange(size) + 0.5) * (hi[u] - lo[u]) / size
    centres_v = lo[v] + (np.arange(size) + 0.5) * (hi[v] - lo[v]) / size
    pu, pv = np.meshgrid(centres_u, centres_v, indexing="xy")
    p = np.stack([pu.ravel(), pv.ravel()], axis=1)  # P x 2
    tri = s.vertices[s.faces][:, :, (u, v)]  # F x 3 x 2
    mask = np.zeros(len(p), dtype=bool)
    for start in range(0, len(tri), 2048):
        t = tri[start : start + 2048]
        a, b, c = t[:, 0][:, None], t[:, 1][:, None], t[:, 2][:, None]  # F x 1 x 2
        x = p[None]

        def cross(o: np.ndarray, e: np.ndarray) -> np.ndarray:
            return (e[..., 0] - o[..., 0]) * (x[..., 1] - o[..., 1]) - (e[..., 1] - o[..., 1]) * (x[..., 0] - o[..., 0])

        d1, d2, d3 = cross(a, b), cross(b, c), cross(c, a)
        inside = ((d1 >= 0) & (d2 >= 0) & (d3 >= 0)) | ((d1 <= 0) & (d2 <= 0) & (d3 <= 0))
        mask |= inside.any(axis=0)
    return mask.reshape(size, size)[::-1]  # row 0 at the top of the view


def silhouette_diff(candidate: Solid, reference: Solid, size: int = 24) -> dict[str, tuple[int, int]]:
    """Per view: (pixels set only in the candidate, pixels set only in the
    reference), both rasterised over the union of their bounding boxes."""
    lo = np.minimum(candidate.vertices.min(0), reference.vertices.min(0))
    hi = np.maximum(candidate.vertices.max(0), reference.vertices.max(0))
    hi = np.where(hi - lo > 1e-6, hi, lo + 1.0)
    out = {}
    for view in VIEWS:
        c, r = silhouette(candidate, view, lo, hi, size), silhouette(reference, view, lo, hi, size)
        out[view] = (int((c & ~r).sum()), int((r & ~c).sum()))
    return out


def translated(s: Solid, offset: np.ndarray) -> Solid:
    """The same solid moved by `offset` (mm)."""
    offset = np.asarray(offset, dtype=np.float64)
    return Solid(s.vertices + offset, s.faces, s.manifold.translate(offset.tolist()))


def moved(s: Solid, rotation: np.ndarray, offset: np.ndarray) -> Solid:
    """The same solid under x -> rotation_3x3 @ x + offset_3 (mm); `rotation` a proper rotation."""
    rotation, offset = np.asarray(rotation, dtype=np.float64), np.asarray(offset, dtype=np.float64)
    affine = np.concatenate([rotation, offset[:, None]], axis=1)
    return Solid(s.vertices @ rotation.T + offset, s.faces, s.manifold.transform(affine))


# ---- rigid alignment (public sets whose references sit in arbitrary poses) ----

# Principal second moments closer than this (relative) leave the axes in their
# plane undetermined: the search also turns about the third axis.
_DEGENERATE = 0.1
_TWIST_DEG = 3
_SPREAD = 1500
_COARSE_SAMPLES = 512
_FINE_SAMPLES = 2048
_DENSE_SAMPLES = 32768
_REFINED = 6          # best distinct coarse starts refined by ICP
_DISTINCT_DEG = 20
_JUDGED = 3           # of those, the closest after ICP judged by exact IoU
_ICP_STEPS = 40


def volume_moments(s: Solid) -> tuple[np.ndarray, np.ndarray]:
    """Centroid_3 (mm) and central second moment of volume_3x3 (mm2, per unit
    volume: the covariance of a point drawn uniformly in the solid), exact
    sums over the tetrahedra the faces span with a point."""
    origin = s.vertices.mean(0)
    tri = s.vertices[s.faces] - origin  # F x 3 x 3
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    vol = np.einsum("ij,ij->i", a, np.cross(b, c)) / 6.0  # F signed tetrahedron volumes
    total = vol.sum()
    centroid = (vol[:, None] * (a + b + c)).sum(0) / (4.0 * total)
    # Over a tetrahedron (0, a, b, c): integral of x x^T = vol / 20 (a a^T + b b^T + c c^T + s s^T), s = a + b + c.
    ssum = a + b + c
    outer = (np.einsum("fi,fj->fij", a, a) + np.einsum("fi,fj->fij", b, b) + np.einsum("fi,fj->fij", c, c)
             + np.einsum("fi,fj->fij", ssum, ssum))
    second = np.einsum("f,fij->ij", vol / 20.0, outer) / total
    return centroid + origin, second - np.outer(centroid, centroid)


def _axis_rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def _starting_rotations(cand: Solid, ref: Solid) -> list[np.ndarray]:
    """Rotations to try about the centroids, taking the candidate's principal
    axes of volume onto the reference's. Distinct moments: every proper signed
    permutation of the axes (24; 4 are right for a right part, the rest are
    cheap insurance for a wrong one). Two moments within _DEGENERATE (a disc,
    a square plate): the odd axis up or down, turned about it in _TWIST_DEG
    steps. All three close (a cube, a sphere): _SPREAD rotations spread
    evenly at random (fixed seed)."""
    lam, axes_r = np.linalg.eigh(volume_moments(ref)[1])
    axes_c = np.linalg.eigh(volume_moments(cand)[1])[1]
    close = [abs(lam[i] - lam[j]) <= _DEGENERATE * max(lam[i], lam[j]) for i, j in ((1, 2), (0, 2), (0, 1))]
    if sum(close) >= 2:
        quats = np.random.default_rng(0).normal(size=(_SPREAD, 4))
        return [_quaternion_rotation(q / np.linalg.norm(q)) for q in quats]
    frames = []
    for perm in itertools.permutations(range(3)):
        for signs in itertools.product((1.0, -1.0), repeat=3):
            flip = np.zeros((3, 3))
            flip[list(perm), range(3)] = signs
            if any(close) and perm[close.index(True)] != close.index(True):
                continue  # the odd axis goes onto the odd axis
            rotation = axes_r @ flip @ axes_c.T
            if np.linalg.det(rotation) > 0:  # proper only: a mirror image is another part
                frames.append(rotation)
    if not any(close):
        return frames
    k = close.index(True)  # the odd axis; in its plane the axes are arbitrary
    twists = [_axis_rotation(axes_r[:, k], np.radians(d)) for d in range(0, 360, _TWIST_DEG)]
    # Frames mapping the odd axis onto itself, one per direction (up, down); the twists cover the rest.
    ups = {}
    for rotation in frames:
        ups.setdefault(float(np.sign(axes_r[:, k] @ rotation @ axes_c[:, k])), rotation)
    return [twist @ rotation for rotation in ups.values() for twist in twists]


def _angle_deg(rotation: np.ndarray) -> float:
    """The angle of a rotation (degrees)."""
    return float(np.degrees(np.arccos(np.clip((np.trace(rotation) - 1) / 2, -1.0, 1.0))))


def _quaternion_rotation(q: np.ndarray) -> np.ndarray:
    w, x, y, z = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def _samples(s: Solid, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    mesh = trimesh.Trimesh(s.vertices, s.faces, process=False)
    points, index = trimesh.sample.sample_surface(mesh, count, seed=seed)
    return np.asarray(points), np.asarray(mesh.face_normals)[index]


def _icp(rotation: np.ndarray, offset: np.ndarray, cand: tuple, ref: tuple) -> tuple[np.ndarray, np.ndarray, float]:
    """Symmetric point-to-plane ICP from x -> rotation @ x + offset. `cand` and
    `ref` are each (sparse points, sparse normals, KD-tree of dense points,
    dense normals): each sparse point is matched to the other part's closest
    dense sample and held to that sample's tangent plane; dense targets keep
    the bias of matching samples rather than surfaces small. Returns the
    motion and the last step's mean closest-sample distance (mm)."""
    p, n_p, tree_c, dense_n_c = cand
    q, n_q, tree_r, dense_n_r = ref
    scale = float(np.abs(q).max())
    for _ in range(_ICP_STEPS):
        x = p @ rotation.T + offset
        d_fwd, i_fwd = tree_r.query(x)
        # The reference's points in the candidate's frame, matched there, moved back.
        d_back, i_back = tree_c.query((q - offset) @ rotation)
        y = tree_c.data[i_back] @ rotation.T + offset
        points = np.concatenate([x, y])
        targets = np.concatenate([tree_r.data[i_fwd], q])
        normals = np.concatenate([dense_n_r[i_fwd], dense_n_c[i_back] @ rotation.T])
        distance = np.concatenate([d_fwd, d_back])
        keep = distance <= max(3.0 * float(np.median(distance)), 1e-12)  # unmatched regions of a wrong part
        rows = np.concatenate([np.cross(points, normals), normals], axis=1)[keep]  # K x 6
        rhs = -np.einsum("ij,ij->i", points - targets, normals)[keep]
        normal_6x6 = rows.T @ rows
        step = np.linalg.solve(normal_6x6 + 1e-12 * np.trace(normal_6x6) * np.eye(6), rows.T @ rhs)
        angle = float(np.linalg.norm(step[:3]))
        turn = _axis_rotation(step[:3] / angle, angle) if angle > 0 else np.eye(3)
        rotation, offset = turn @ rotation, turn @ offset + step[3:]
        if angle < 1e-8 and np.linalg.norm(step[3:]) < 1e-8 * scale:
            break
    return rotation, offset, float(distance.mean())


def aligned(candidate: Solid, reference: Solid) -> Solid:
    """`candidate` moved by the proper rigid motion that best puts it on `reference`.

    Centroids matched and principal axes of volume matched (_starting_rotations:
    every sign and order of the axes, turns about an axis whose plane's moments
    tie, or an even spread when all three tie); the starts ranked by mean
    closest-point distance between _COARSE_SAMPLES surface samples each way;
    the best _REFINED starts at least _DISTINCT_DEG apart refined by symmetric
    point-to-plane ICP (_FINE_SAMPLES points against _DENSE_SAMPLES); of those,
    the _JUDGED closest kept by exact volume IoU. No scaling and no mirroring:
    a part the wrong size or handedness stays wrong. Samples are drawn with
    fixed seeds, so an alignment is deterministic. 0.4-4.6 s on a busy 2-core
    host for parts of 300-7,000 triangles (benchmarks/cad_public.py)."""
    # Work about the reference's centroid, so a turn barely moves the points it keeps in place.
    centroid_c, centroid_r = volume_moments(candidate)[0], volume_moments(reference)[0]
    coarse_c = _samples(candidate, _COARSE_SAMPLES, 1)[0]
    coarse_r = _samples(reference, _COARSE_SAMPLES, 2)[0] - centroid_r
    tree_r = cKDTree(coarse_r)
    ranked = []
    for rotation in _starting_rotations(candidate, reference):
        offset = -rotation @ centroid_c
        x = coarse_c @ rotation.T + offset
        ranked.append((tree_r.query(x)[0].mean() + cKDTree(x).query(coarse_r)[0].mean(), len(ranked), rotation, offset))
    ranked.sort(key=lambda r: (r[0], r[1]))
    sparse_c, dense_c = _samples(candidate, _FINE_SAMPLES, 3), _samples(candidate, _DENSE_SAMPLES, 5)
    sparse_r, dense_r = _samples(reference, _FINE_SAMPLES, 4), _samples(reference, _DENSE_SAMPLES, 6)
    fine_c = (sparse_c[0], sparse_c[1], cKDTree(dense_c[0]), dense_c[1])
    fine_r = (sparse_r[0] - centroid_r, sparse_r[1], cKDTree(dense_r[0] - centroid_r), dense_r[1])
    # Refine the best starts that differ by more than _DISTINCT_DEG: near a
    # symmetry (a ring turned over, its two holes trading places) the next
    # best starts are the best one turned a step, the same basin.
    chosen: list[tuple[np.ndarray, np.ndarray]] = []
    for _, _, rotation, offset in ranked:
        if all(_angle_deg(rotation @ other.T) > _DISTINCT_DEG for other, _ in chosen):
            chosen.append((rotation, offset))
            if len(chosen) == _REFINED:
                break
    refined = []
    for rotation, offset in chosen:
        rotation, offset, residual = _icp(rotation, offset, fine_c, fine_r)
        u, _, vt = np.linalg.svd(rotation)  # re-orthonormalise after the steps
        refined.append((residual, len(refined), u @ vt, offset))
    best = (-1.0, candidate)
    for _, _, rotation, offset in sorted(refined)[:_JUDGED]:
        placed = moved(candidate, rotation, offset + centroid_r)
        score = iou(placed, reference)
        if score > best[0]:
            best = (score, placed)
    return best[1]
