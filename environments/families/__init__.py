"""Task families. Importing this package registers every domain."""

from environments.families import code, math, strings  # noqa: F401
