"""Task families. Importing this package registers every domain."""

from environments.families import code, csg, documents, longctx, math, strings, terminal, tools  # noqa: F401
