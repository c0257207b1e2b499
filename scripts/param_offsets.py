#!/usr/bin/env python3
"""Prints the byte offset of every field of the kernels' parameter structs (ForwardParams,
BackwardParams, with the fields of their base) in a source tree, one "Struct field offset" line
each plus "Struct sizeof N", for compare_sass.py --offsets.

It compiles a small program with the host compiler (CXX, default g++) against the tree's headers
and CUDA's cuda.h (CUDA_INCLUDE, default /usr/local/cuda/include); no GPU, no nvcc.

Usage: scripts/param_offsets.py [TREE] > offsets.txt   (TREE: default this checkout)"""

import os
import pathlib
import re
import subprocess
import sys
import tempfile

STRUCTS = {"ForwardParams": "src/cuda/forward/params.h",
           "BackwardParams": "src/cuda/backward/params.h"}
_FIELD = re.compile(r"^\s+[\w:<>\s\*]+?[\s\*](\w+);", re.M)


def fields(tree: pathlib.Path, struct: str, header: str) -> list[str]:
    """The struct's own fields, after its base's (a base named after the colon), in order."""
    text = (tree / header).read_text()
    match = re.search(r"struct %s\b\s*(?::\s*(\w+))?\s*\{(.*?)\n\};" % struct, text, re.S)
    if match is None:
        sys.exit(f"param_offsets.py: no struct {struct} in {tree / header}")
    base, body = match.group(1), match.group(2)
    names = _FIELD.findall(body)
    if base:
        base_header = next((p for p in tree.glob("src/cuda/*/*.h")
                            if re.search(r"struct %s\b" % base, p.read_text())), None)
        if base_header is None:
            sys.exit(f"param_offsets.py: no header of {tree} defines struct {base}")
        names = fields(tree, base, str(base_header.relative_to(tree))) + names
    return names


def main() -> int:
    tree = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    lines = ["#include <cstddef>", "#include <cstdio>"]
    lines += [f'#include "{h[len("src/"):]}"' for h in STRUCTS.values()]
    lines += ["using namespace ringpack::cuda;", "int main() {"]
    for struct, header in STRUCTS.items():
        for name in fields(tree, struct, header):
            lines.append(f'  std::printf("{struct} {name} %zu\\n", offsetof({struct}, {name}));')
        lines.append(f'  std::printf("{struct} sizeof %zu\\n", sizeof({struct}));')
    lines.append("}")
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = os.path.join(tmp, "offsets.cpp"), os.path.join(tmp, "offsets")
        pathlib.Path(source).write_text("\n".join(lines) + "\n")
        subprocess.run([os.environ.get("CXX", "g++"), "-std=c++20", "-Wno-invalid-offsetof",
                        f"-I{tree / 'src'}", f"-I{tree / 'include'}",
                        f"-I{os.environ.get('CUDA_INCLUDE', '/usr/local/cuda/include')}", source,
                        "-o", binary], check=True)
        sys.stdout.write(subprocess.run([binary], check=True, capture_output=True,
                                        text=True).stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
