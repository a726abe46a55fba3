"""Sandbox side of the CAD family: builds one build123d script and exports its mesh.

Imported once by each kernel worker before its first job (the worker's
"preload", environments/cad/runner.py), so a job pays ~50 ms, not the 2-4 s
of importing the OCC kernel. It runs inside the sandbox only, next to the
candidate's script, in the candidate's process: nothing it reports is
trusted. The host rebuilds every check from the mesh it returns
(environments/cad/geometry.py: watertight, one solid, volume, IoU, distance);
the kernel's own validity flag and volume are shown as log, never scored.

Only the standard library and build123d may be imported here.
"""

import array
import traceback

import build123d

# Kept when the worker loads this module, before any candidate runs: a script
# that patches build123d afterwards changes only its own job's forked copy.
_Shape = build123d.Shape
_BuildPart = build123d.BuildPart


def _error(stage, exc):
    """The kernel's error line: the exception and the script line it came from."""
    line = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == "<script>":
            line = f" (script line {frame.lineno})"
            break
    if isinstance(exc, SyntaxError) and exc.lineno:
        line = f" (script line {exc.lineno})"
    message = traceback.format_exception_only(type(exc), exc)[-1].strip()[:300]
    return {"built": False, "stage": stage, "error": message + line, "error_type": type(exc).__name__}


def _shape_of(value):
    if isinstance(value, _BuildPart):
        value = value.part
    if not isinstance(value, _Shape):
        raise TypeError(f"`result` is a {type(value).__name__}, expected a build123d Part (or BuildPart)")
    return value


def _mesh(shape, linear_mm, angular_rad, max_triangles):
    """One shape's report (see `build`); raises on a kernel failure."""
    shape = _shape_of(shape)
    solids = len(shape.solids())
    valid = bool(shape.is_valid)
    volume = float(shape.volume)
    points, faces = shape.tessellate(linear_mm, angular_rad)
    if len(faces) > max_triangles:
        raise ValueError(f"the part has {len(faces)} triangles, more than {max_triangles}")
    vertices = array.array("f", [c for p in points for c in (p.X, p.Y, p.Z)])
    triangles = array.array("I", [i for f in faces for i in f])
    return {"vertices": vertices.tobytes(), "triangles": triangles.tobytes(), "solids": solids, "valid": valid, "volume": volume}


def build_parts(script, linear_mm, angular_rad, max_triangles, max_parts=8):
    """As `build`, for an assembly: `result` is a list of parts, each reported
    as `build` reports one, under "parts"."""
    namespace = {"__name__": "__cad__"}
    try:
        exec(compile(script, "<script>", "exec"), namespace)
    except BaseException as e:
        return _error("script", e)
    value = namespace.get("result")
    if type(value) not in (list, tuple) or not 1 <= len(value) <= max_parts:
        return {"built": False, "stage": "result", "error": f"`result` must be a list of 1 to {max_parts} build123d parts", "error_type": "TypeError"}
    try:
        parts = [_mesh(shape, linear_mm, angular_rad, max_triangles // len(value)) for shape in value]
    except BaseException as e:
        return _error("export", e)
    return {"built": True, "parts": parts}


def build(script, linear_mm, angular_rad, max_triangles):
    """Runs `script`, takes its `result` and tessellates it.

    Returns {"built": True, "vertices": float32 bytes (x, y, z per vertex),
    "triangles": uint32 bytes (3 indices each), "solids", "valid", "volume"}
    or {"built": False, "stage", "error", "error_type"}. Faces are tessellated
    one by one; their shared edges give equal vertices, merged by the host.
    """
    namespace = {"__name__": "__cad__"}
    try:
        exec(compile(script, "<script>", "exec"), namespace)
    except BaseException as e:  # the script's own failure, reported as its error line
        return _error("script", e)
    if "result" not in namespace:
        return {"built": False, "stage": "result", "error": "the script defines no `result`", "error_type": "NameError"}
    try:
        return {"built": True, **_mesh(namespace["result"], linear_mm, angular_rad, max_triangles)}
    except BaseException as e:
        return _error("export", e)
