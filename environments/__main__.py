"""Lists the registered domains: ``python -m environments [substring ...]``.

One line per domain: id, family, difficulty, tags. Arguments keep the domains
whose id contains every one of them (``python -m environments rg- easy``).
"""

import collections
import sys

import environments  # noqa: F401  (registers the domains)
from environments import registry


def main(argv: list[str]) -> int:
    specs = [s for s in registry.list_domains() if all(a in s.id for a in argv)]
    for s in specs:
        print(f"{s.id:48s} {s.family:10s} {s.difficulty:7s} {','.join(s.tags)}")
    by_family = collections.Counter(s.family for s in specs)
    print(f"{len(specs)} domains" + (f" matching {argv}" if argv else "") + ": "
          + ", ".join(f"{f} {n}" for f, n in sorted(by_family.items())), file=sys.stderr)
    return 0 if specs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
