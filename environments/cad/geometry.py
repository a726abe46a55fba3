"""Host side of CAD grading: checks and compares meshes the kernel returned.

Nothing the sandbox reports is trusted: the mesh is rebuilt here from its raw
arrays, vertices shared by adjacent faces are merged, and manifold3d decides
whether it is one closed, valid solid (its own status check; a mesh with a
hole, a flipped or dangling face fails). Volume IoU is manifold3d's exact
intersection of the two meshes; the surface distance is trimesh's
point-to-surface distance (rtree) from points sampled on each surface to the
other, both ways. Silhouettes (top, front, side) are rasterised here too.
"""

from __future__ import annotations

import dataclasses

import manifold3d
import numpy as np
import trimesh

# Vertex coordinates equal to this many mm are one vertex (float32 export of
# the same kernel vertex is bit-equal; this also absorbs rounding).
_MERGE_MM = 1e-4
_SAMPLES = 256


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


def surface_distance(a: Solid, b: Solid, samples: int = _SAMPLES, seed: int = 0) -> float:
    """Largest distance (mm) from `samples` points on either surface to the other.

    Points are drawn with a fixed seed, so a grade is deterministic."""
    mesh_a = trimesh.Trimesh(a.vertices, a.faces, process=False)
    mesh_b = trimesh.Trimesh(b.vertices, b.faces, process=False)
    worst = 0.0
    for src, dst in ((mesh_a, mesh_b), (mesh_b, mesh_a)):
        points, _ = trimesh.sample.sample_surface(src, samples, seed=seed)
        _, distance, _ = trimesh.proximity.closest_point(dst, points)
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
