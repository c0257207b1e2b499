#!/usr/bin/env python3
"""Compares the SASS of every kernel in two builds of libringpack.a (or two object files).

A change meant to move or rename code without changing what runs (a restructure, an enum in
place of a literal) proves it here without a GPU: identical SASS for every (architecture,
kernel) means identical behaviour and speed. Kernel names in anonymous namespaces carry a hash
of their file's path, which is normalised away.

Usage: scripts/compare_sass.py BEFORE.a AFTER.a   (cuobjdump from PATH, or CUOBJDUMP=...)
Exit status 0 when every kernel's SASS is identical, 1 otherwise (the differences are listed)."""

import difflib
import os
import re
import shutil
import subprocess
import sys

_ANONYMOUS = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}")
_SKIP = ("....", "member ", "Fatbin ", "=====")


def cuobjdump() -> str:
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        sys.exit("compare_sass.py: cuobjdump not found; put the CUDA toolkit's bin on PATH or set "
                 "CUOBJDUMP=/path/to/cuobjdump")
    return tool


def kernels(path: str) -> dict:
    """(arch, kernel name) -> SASS text, with anonymous-namespace hashes normalised."""
    text = subprocess.run([cuobjdump(), "-sass", path], capture_output=True, text=True,
                          check=True).stdout
    result, arch, name, body = {}, None, None, []

    def flush():
        if name is None:
            return
        key, sass = (arch, _ANONYMOUS.sub("_GLOBAL__N_", name)), "\n".join(body)
        sass = _ANONYMOUS.sub("_GLOBAL__N_", sass)
        if result.get(key, sass) != sass:
            sys.exit(f"compare_sass.py: {path} has {key} twice with different SASS")
        result[key] = sass

    for line in text.split("\n"):
        stripped = line.strip()
        if match := re.match(r"arch = (\S+)", stripped):
            flush()
            arch, name, body = match.group(1), None, []
        elif match := re.match(r"Function : (\S+)", stripped):
            flush()
            name, body = match.group(1), []
        elif name is not None and stripped and not stripped.startswith(_SKIP):
            body.append(stripped)
    flush()
    return result


def main() -> int:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    before, after = kernels(sys.argv[1]), kernels(sys.argv[2])
    only_before = sorted(set(before) - set(after))
    only_after = sorted(set(after) - set(before))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    lines = sum(v.count("\n") + 1 for v in before.values())
    print(f"compare_sass.py: {len(before)} kernels before, {len(after)} after, {lines} SASS lines; "
          f"only before {len(only_before)}, only after {len(only_after)}, changed {len(changed)}")
    for key in only_before:
        print(f"  only before: {key}")
    for key in only_after:
        print(f"  only after:  {key}")
    for key in changed:
        print(f"  changed:     {key}")
        diff = difflib.unified_diff(before[key].split("\n"), after[key].split("\n"), lineterm="",
                                    n=0)
        print("\n".join(list(diff)[2:14]))
    return 1 if only_before or only_after or changed else 0


if __name__ == "__main__":
    sys.exit(main())
