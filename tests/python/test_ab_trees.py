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


# A stand-in for cmake: logs its arguments; `--build DIR` puts the stand-in CLI and its result
# into DIR, as building ringpack_cli would.
FAKE_CMAKE = """#!/usr/bin/env bash
echo "$*" >> "$CMAKE_LOG"
if [[ $1 == --build ]]; then
  cp "$STAND_IN/ringpack" "$STAND_IN/result.json" "$2"/
fi
"""


def test_builds_this_tree_only_where_its_build_dir_has_no_cli(tmp_path):
    stand_in = make_cli(tmp_path, 0.5, 1.5)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cmake").write_text(FAKE_CMAKE, encoding="utf-8")
    (bin_dir / "cmake").chmod(0o755)
    log = tmp_path / "cmake.log"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    env = dict(os.environ, OUT=str(tmp_path / "out"), BUILD_DIR=str(fresh), SIDES="only=.",
               AB_ROUNDS="1", PATH=f"{bin_dir}:{os.environ['PATH']}", CMAKE_LOG=str(log),
               STAND_IN=str(stand_in))

    def run_script():
        return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                              check=False)

    proc = run_script()
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text(encoding="utf-8").splitlines()
    assert len(calls) == 2
    assert calls[0].startswith(f"--preset cuda-hopper -B {fresh} ")
    assert calls[1].startswith(f"--build {fresh} ") and "ringpack_cli" in calls[1]
    assert (tmp_path / "out" / "trees_only_1.json").exists()

    log.unlink()  # the CLI is there now: no second build
    proc = run_script()
    assert proc.returncode == 0, proc.stderr
    assert not log.exists()
