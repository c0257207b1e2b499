#!/usr/bin/env python3
"""Compares the SASS of every kernel in two builds of libringpack.a (or two object files).

A change meant to move or rename code without changing what runs (a restructure, an enum in
place of a literal) proves it here without a GPU: identical SASS for every (architecture,
kernel) means identical behaviour and speed. Kernel names in anonymous namespaces carry a hash
of their file's path, which is normalised away.

Usage: scripts/compare_sass.py [--offsets BEFORE.txt AFTER.txt [--rename OLD=NEW ...]]
                              [--kernel-rename REGEX=REPLACEMENT ...] BEFORE.a AFTER.a
(cuobjdump from PATH, or CUOBJDUMP=...). Exit status 0 when every kernel's SASS is identical, 1
otherwise (the differences are listed).

--offsets, for a change of the parameter structs' layout (fields moved, renamed, or moved into a
base): the files are scripts/param_offsets.py's output for the two trees. Every read of a
kernel's parameter bank, c[0x0][start + offset], in BEFORE is rewritten to the offset the same
field has in AFTER (a field renamed is given as --rename OLD=NEW, one removed as --rename
OLD=-: a read of it then differs), and the instruction encodings are dropped. Identical SASS then proves the same instructions reading the same fields.

--kernel-rename, for a kernel whose (mangled) name changed, e.g. a template parameter added: the
regular expression is replaced in BEFORE's kernel names (re.sub) before they are matched with
AFTER's; kernels only AFTER has are then listed, and do not fail the comparison alone when every
kernel of BEFORE has its counterpart (a new kernel beside the old ones)."""

import difflib
import os
import re
import shutil
import subprocess
import sys

_ANONYMOUS = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}")
_SKIP = ("....", "member ", "Fatbin ", "=====")
_PARAM = re.compile(r"c\[0x0\]\[(0x[0-9a-f]+)\]")
_ENCODING = re.compile(r"\s*/\* 0x[0-9a-f]{16} \*/")
# Where the kernel parameters start in constant bank 0, per architecture.
_PARAM_START = {"sm_80": 0x160, "sm_86": 0x160, "sm_89": 0x160, "sm_90": 0x210, "sm_90a": 0x210}
_STRUCTS = ("ForwardParams", "BackwardParams")


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


def read_offsets(path: str) -> dict:
    """{struct: ({field: offset}, sizeof)} from scripts/param_offsets.py's output."""
    result = {}
    for line in open(path):
        struct, field, offset = line.split()
        fields, size = result.get(struct, ({}, 0))
        if field == "sizeof":
            size = int(offset)
        else:
            fields[field] = int(offset)
        result[struct] = (fields, size)
    return result


def offset_map(old: tuple, new: tuple, rename: dict) -> tuple:
    """(byte map old -> new over every field, old size, new size) of one struct."""
    (old_fields, old_size), (new_fields, new_size) = old, new
    ordered = sorted(old_fields.items(), key=lambda item: item[1])
    byte_map = {}
    for i, (name, offset) in enumerate(ordered):
        end = ordered[i + 1][1] if i + 1 < len(ordered) else old_size
        if rename.get(name) == "-":
            continue  # removed: a read of it in BEFORE matches nothing in AFTER
        target = new_fields.get(rename.get(name, name))
        if target is None:
            sys.exit(f"compare_sass.py: field {name} has no counterpart after; pass --rename "
                     f"{name}=NEW, or {name}=- for a field removed")
        for b in range(end - offset):
            byte_map[offset + b] = target + b
    return byte_map, old_size, new_size


def translate(sass: str, arch: str, name: str, maps: dict) -> str:
    """BEFORE's parameter reads at AFTER's offsets; encodings dropped."""
    struct = next((s for s in _STRUCTS if f"{len(s)}{s}" in name), None)
    if struct is None:
        return _ENCODING.sub("", sass)
    if arch not in _PARAM_START:
        sys.exit(f"compare_sass.py: no parameter-bank start known for {arch}")
    start = _PARAM_START[arch]
    byte_map, old_size, new_size = maps[struct]
    old_end, new_end = (-(-old_size // 64) * 64), (-(-new_size // 64) * 64)  # next param: 64-aligned

    def rewrite(match):
        offset = int(match.group(1), 16) - start
        if 0 <= offset < old_size:
            if offset not in byte_map:
                return f"c[0x0][removed field at {hex(offset)}]"
            offset = byte_map[offset]
        elif offset >= old_end:
            offset += new_end - old_end
        return f"c[0x0][{hex(offset + start)}]"

    return _PARAM.sub(rewrite, _ENCODING.sub("", sass))


def main() -> int:
    args, rename, offsets, kernel_renames = sys.argv[1:], {}, None, []
    while args and args[0].startswith("--"):
        if args[0] == "--offsets" and len(args) >= 3:
            offsets, args = (read_offsets(args[1]), read_offsets(args[2])), args[3:]
        elif args[0] == "--rename" and len(args) >= 2 and "=" in args[1]:
            old, new = args[1].split("=", 1)
            rename[old], args = new, args[2:]
        elif args[0] == "--kernel-rename" and len(args) >= 2 and "=" in args[1]:
            kernel_renames.append(tuple(args[1].split("=", 1)))
            args = args[2:]
        else:
            sys.exit(__doc__)
    if len(args) != 2:
        sys.exit(__doc__)
    before, after = kernels(args[0]), kernels(args[1])
    for pattern, replacement in kernel_renames:
        before = {(arch, re.sub(pattern, replacement, name)): sass
                  for (arch, name), sass in before.items()}
    if offsets is not None:
        maps = {s: offset_map(offsets[0][s], offsets[1][s], rename) for s in _STRUCTS}
        before = {k: translate(v, k[0], k[1], maps) for k, v in before.items()}
        after = {k: _ENCODING.sub("", v) for k, v in after.items()}
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
    new_kernels_allowed = bool(kernel_renames)
    return 1 if only_before or (only_after and not new_kernels_allowed) or changed else 0


if __name__ == "__main__":
    sys.exit(main())
