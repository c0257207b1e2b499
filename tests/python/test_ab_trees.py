"""scripts/ab_trees.sh with a stand-in CLI for this tree (no GPU, no build needed)."""

import json
import os
import pathlib
import subprocess

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "ab_trees.sh"

# A stand-in for `ringpack bench --json F`: its side's times, read from a file beside it, and
# a log of the order of the calls.
FAKE_CLI = """#!/usr/bin/env bash
[[ $1 == --version ]] && { echo "ringpack stand-in"; exit 0; }
out=""
while [[ $# -gt 0 ]]; do [[ $1 == --json ]] && out=$2; shift; done
echo "$out" >> "$(dirname "$0")/calls.log"
cp "$(dirname "$0")/result.json" "$out"
"""


def run(tmp_path, sides, rounds="2"):
    env = dict(os.environ, OUT=str(tmp_path / "out"), BUILD_DIR=str(tmp_path / "build"),
               SIDES=sides, AB_ROUNDS=rounds)
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          check=False)


def make_cli(tmp_path, fwd_ms, bwd_ms):
    build = tmp_path / "build"
    build.mkdir()
    cli = build / "ringpack"
    cli.write_text(FAKE_CLI, encoding="utf-8")
    cli.chmod(0o755)
    result = {"results": [{"workload": "packed-16k", "fwd_ms": fwd_ms, "bwd_ms": bwd_ms}]}
    (build / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return build


def test_alternates_the_sides_and_summarises_every_round(tmp_path):
    build = make_cli(tmp_path, 0.5, 1.5)
    proc = run(tmp_path, "first=. second=.")
    assert proc.returncode == 0, proc.stderr
    calls = [pathlib.Path(line).name for line in
             (build / "calls.log").read_text(encoding="utf-8").split()]
    assert calls == ["trees_first_1.json", "trees_second_1.json",
                     "trees_first_2.json", "trees_second_2.json"]
    lines = proc.stdout.splitlines()
    assert "  [0] first" in lines and "  [1] second" in lines
    bwd = next(line for line in lines if "bwd:" in line)
    assert "[0] 1.500" in bwd and "[1] 1.500 (1.000)" in bwd
    summary = (tmp_path / "out" / "summary.txt").read_text(encoding="utf-8")
    assert "packed-16k" in summary
    assert "first: ringpack stand-in (.)" in summary and "second: ringpack stand-in (.)" in summary


def test_rejects_a_side_without_a_directory(tmp_path):
    make_cli(tmp_path, 0.5, 1.5)
    proc = run(tmp_path, "first=. second")
    assert proc.returncode == 2
    assert "bad side 'second'" in proc.stderr
    proc = run(tmp_path, "")
    assert proc.returncode == 2
    assert "SIDES is empty" in proc.stderr
