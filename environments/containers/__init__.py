"""Containers for terminal tasks: podman (engine), local base images (bases), task images (images).

No JAX and no daemon: every operation is one `podman` command. See docs/terminal_tasks.md.
"""
