"""Task families. Importing this package registers every domain."""

from environments.families import (cad, cad_assembly, code, finance, humaneval, longctx, math,  # noqa: F401
                                   strings, terminal, tools)
from environments.families import reasoning_gym  # noqa: F401  (reasoning-gym generators, family "rg")
