"""Lists the registered domains, or builds terminal task images.

    python -m environments [substring ...]     one line per domain: id, family, difficulty, tags;
                                               arguments keep the ids containing every one of them
    python -m environments build PATH [...]    builds the image of each task folder (PATH is a task
                                               folder or a folder of them; cached by content), with a
                                               progress bar and one line per failed build;
                                               --validate also runs each reference and do-nothing answer;
                                               --solution-packages also bakes in what each reference
                                               solution installs (apt, pip, uv: episodes have no network);
                                               each warning (what a stand-in changed) follows its task's line
    python -m environments bases               what stands in here for each public base image name, and
                                               why a fallback does where the distribution's archive cannot
"""

import collections
import os
import sys
import time


def _bar(done: int, total: int, width: int = 24) -> str:
    filled = width * done // max(1, total)
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def build(argv: list[str]) -> int:
    from environments import terminal_tasks
    from environments.containers import engine

    validate = "--validate" in argv
    solution_packages = "--solution-packages" in argv
    roots = [a for a in argv if a not in ("--validate", "--solution-packages")]
    if not roots:
        print("usage: python -m environments build PATH [PATH ...] [--validate] [--solution-packages]", file=sys.stderr)
        return 2
    why = engine.available()
    if why:
        print(f"cannot build: {why}", file=sys.stderr)
        return 2
    paths = []
    for root in roots:
        if not os.path.isdir(root):
            print(f"no such folder: {root}", file=sys.stderr)
            return 2
        if any(os.path.exists(os.path.join(root, n)) for n in ("tests", "steps", "task.toml")):
            paths.append(root)
        else:
            paths += sorted(os.path.join(root, d) for d in os.listdir(root)
                            if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))
    failed = 0
    start = time.monotonic()
    for i, path in enumerate(paths, 1):
        name = os.path.basename(path.rstrip("/"))
        print(f"\r{_bar(i - 1, len(paths))} building {name} ...".ljust(90), end="", file=sys.stderr, flush=True)
        try:
            folder = terminal_tasks.load_task_folder(path, solution_packages)
        except terminal_tasks.TaskFolderError as e:
            failed += 1
            print(f"\rFAILED {name}: {e}".ljust(90), file=sys.stderr)
            continue
        built = terminal_tasks.build_task(folder)
        if built.error is not None:
            failed += 1
            print(f"\rFAILED {name}: {built.error} (log: {built.log_path})".ljust(90), file=sys.stderr)
            continue
        note = "cached" if built.cached else f"built in {built.seconds:.1f}s"
        if validate:
            why = terminal_tasks.validate_task(terminal_tasks.TerminalTaskDomain(folder))
            if why is not None:
                failed += 1
                print(f"\rINVALID {name}: {why}".ljust(90), file=sys.stderr)
                continue
            note += ", validated"
        print(f"\r{name}: {built.tag} ({note})".ljust(90), file=sys.stderr)
        for w in built.warnings:
            print(f"  warning: {w}", file=sys.stderr)
    print(f"\r{_bar(len(paths), len(paths))} {len(paths) - failed} ready, {failed} failed, "
          f"{time.monotonic() - start:.0f}s".ljust(90), file=sys.stderr)
    return 1 if failed else 0


def bases() -> int:
    from environments.containers import bases as bases_mod

    rows = bases_mod.table()
    width = max(len(names) for names, _ in rows)
    for names, stand_in in rows:
        print(f"{names:{width}s}  {stand_in}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"]:
        return build(argv[1:])
    if argv == ["bases"]:
        return bases()
    import environments  # noqa: F401  (registers the domains)
    from environments import registry

    specs = [s for s in registry.list_domains() if all(a in s.id for a in argv)]
    for s in specs:
        print(f"{s.id:48s} {s.family:10s} {s.difficulty:7s} {','.join(s.tags)}")
    by_family = collections.Counter(s.family for s in specs)
    print(f"{len(specs)} domains" + (f" matching {argv}" if argv else "") + ": "
          + ", ".join(f"{f} {n}" for f, n in sorted(by_family.items())), file=sys.stderr)
    return 0 if specs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
