#!/usr/bin/env python3
"""Summarises alternating rounds of `ringpack bench --json` runs (scripts/gpu_check.sh).

Usage: scripts/ab_summary.py DIR PREFIX SIDE[=LABEL] ...

Reads DIR/PREFIX_SIDE_ROUND.json for every SIDE named (ROUND = 1, 2, ...) and prints, per
workload and direction, the median over rounds of each side's median ms and its ratio to the
first side's (< 1: faster than the first), with each side's round values. The sides are the
trees of an A/B (baseline, ours) or the kernel flag sets of BENCH_VARIANTS (0 = the defaults).
Exit status 1 when a side has no file.
"""
import glob
import json
import statistics
import sys


def load(directory, prefix, side):
    """{(workload, direction): [ms per round]} of one side's rounds, in round order."""
    times = {}
    paths = glob.glob(f"{directory}/{prefix}_{side}_*.json")
    rounds = sorted(paths, key=lambda p: int(p.rsplit("_", 1)[1].removesuffix(".json")))
    for path in rounds:
        with open(path, encoding="utf-8") as f:
            for result in json.load(f)["results"]:
                for direction in ("fwd", "bwd"):
                    ms = result.get(f"{direction}_ms")
                    if ms is not None:
                        times.setdefault((result["workload"], direction), []).append(ms)
    return times


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    directory, prefix, specs = argv[1], argv[2], argv[3:]
    sides = [spec.split("=", 1) if "=" in spec else (spec, spec) for spec in specs]
    times = {side: load(directory, prefix, side) for side, _ in sides}
    missing = [side for side, _ in sides if not times[side]]
    print("A/B: median ms over alternating rounds; (ratio to [0]; < 1: faster)")
    for i, (side, label) in enumerate(sides):
        print(f"  [{i}] {label}" + ("  (no runs)" if side in missing else ""))
    first = times[sides[0][0]]
    for key in sorted({key for t in times.values() for key in t}):
        base = statistics.median(first[key]) if key in first else float("nan")
        cells = []
        for i, (side, _) in enumerate(sides):
            rounds = times[side].get(key)
            if not rounds:
                cells.append(f"[{i}] -")
                continue
            median = statistics.median(rounds)
            ratio = "" if i == 0 else f" ({median / base:.3f})"
            spread = " ".join(f"{x:.3f}" for x in rounds)
            cells.append(f"[{i}] {median:.3f}{ratio} <{spread}>")
        print(f"  {key[0]:12s} {key[1]}: " + "  ".join(cells))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
