"""scripts/ab_summary.py on hand-made `ringpack bench --json` rounds (no GPU needed)."""

import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "ab_summary.py"


def write_round(directory, side, number, fwd_ms, fwd_min=None):
    result = {"workload": "dense-16k", "impl": "ringpack", "fwd_ms": fwd_ms}
    if fwd_min is not None:
        result["fwd_ms_min"] = fwd_min
    path = directory / f"trees_{side}_{number}.json"
    path.write_text(json.dumps({"results": [result]}), encoding="utf-8")


def summarise(directory, *sides):
    return subprocess.run([sys.executable, str(SCRIPT), str(directory), "trees", *sides],
                          capture_output=True, text=True, check=False)


def test_medians_of_rounds_and_fastest_repetitions_with_their_ratios(tmp_path):
    # Side a: rounds in two modes (3.1 and 3.5 ms); side b: always 3.3, never faster than 3.25.
    for number, (median, fastest) in enumerate([(3.5, 3.1), (3.1, 3.0), (3.5, 3.4)], start=1):
        write_round(tmp_path, "a", number, median, fastest)
    for number in (1, 2, 3):
        write_round(tmp_path, "b", number, 3.3, 3.25)
    result = summarise(tmp_path, "a=base", "b=exp")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1:3] == ["  [0] base", "  [1] exp"]
    row = lines[3]
    assert row.startswith("  dense-16k    fwd: ")
    # The round medians say b is faster (3.3 / 3.5); the fastest repetitions, that a is.
    assert "[0] 3.500 <3.500 3.100 3.500> min 3.000" in row
    assert "[1] 3.300 (0.943) <3.300 3.300 3.300> min 3.250 (1.083)" in row


def test_a_round_without_its_fastest_repetition_counts_its_median(tmp_path):
    write_round(tmp_path, "a", 1, 2.0)
    write_round(tmp_path, "b", 1, 1.0, 0.5)
    result = summarise(tmp_path, "a", "b")
    assert result.returncode == 0, result.stderr
    assert "[0] 2.000 <2.000> min 2.000  [1] 1.000 (0.500) <1.000> min 0.500 (0.250)" in (
        result.stdout)


def test_a_side_without_rounds_fails(tmp_path):
    write_round(tmp_path, "a", 1, 2.0)
    result = summarise(tmp_path, "a", "missing")
    assert result.returncode == 1
    assert "[1] missing  (no runs)" in result.stdout
