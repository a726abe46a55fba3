"""The CAD family's machinery (the domains are environments/families/cad.py and cad_assembly.py).

cad_kernel.py  sandbox side: runs a build123d script, exports its mesh (imported by kernel workers)
runner.py      host side: the kernel worker pool and `build(script)` -> BuildOutcome
geometry.py    host side: mesh checks (manifold3d), volume IoU, surface distance (trimesh), silhouettes
parts.py       generated parametric parts: description + reference build123d script
cadprompt.py   the public CADPrompt set, graded against its published STL meshes
"""
