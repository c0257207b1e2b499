#!/usr/bin/env python3
"""Summarises alternating rounds of `ringpack bench --json` runs (scripts/gpu_check.sh).

Usage: scripts/ab_summary.py DIR PREFIX SIDE[=LABEL] ...

Reads DIR/PREFIX_SIDE_ROUND.json for every SIDE named (ROUND = 1, 2, ...) and prints, per
workload and direction, the median over rounds of each side's median ms and its ratio to the
first side's (< 1: faster than the first), with each side's round values, then each side's
fastest repetition of any round and its ratio to the first side's ("min"): a row whose
repetitions fall into two modes (e.g. clocks that drop under a long dense run) can have round
medians that say which mode a round landed in more than which side is faster. The sides are the
trees of an A/B (baseline, ours) or the kernel flag sets of BENCH_VARIANTS (0 = the defaults).
Exit status 1 when a side has no file.
"""
import glob
import json
import statistics
import sys


def load(directory, prefix, side):
    """{(workload, direction): [(median ms, fastest ms) per round]} of one side's rounds, in
    round order (a file without the fastest repetition gives its median there)."""
    times = {}
    paths = glob.glob(f"{directory}/{prefix}_{side}_*.json")
    rounds = sorted(paths, key=lambda p: int(p.rsplit("_", 1)[1].removesuffix(".json")))
    for path in rounds:
        with open(path, encoding="utf-8") as f:
            for result in json.load(f)["results"]:
                for direction in ("fwd", "bwd"):
                    ms = result.get(f"{direction}_ms")
                    if ms is not None:
                        fastest = result.get(f"{direction}_ms_min", ms)
                        times.setdefault((result["workload"], direction), []).append((ms, fastest))
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
    nan = float("nan")
    for key in sorted({key for t in times.values() for key in t}):
        base = statistics.median(m for m, _ in first[key]) if key in first else nan
        base_min = min(f for _, f in first[key]) if key in first else nan
        cells = []
        for i, (side, _) in enumerate(sides):
            rounds = times[side].get(key)
            if not rounds:
                cells.append(f"[{i}] -")
                continue
            median = statistics.median(m for m, _ in rounds)
            fastest = min(f for _, f in rounds)
            ratio = "" if i == 0 else f" ({median / base:.3f})"
            min_ratio = "" if i == 0 else f" ({fastest / base_min:.3f})"
            spread = " ".join(f"{m:.3f}" for m, _ in rounds)
            cells.append(f"[{i}] {median:.3f}{ratio} <{spread}> min {fastest:.3f}{min_ratio}")
        print(f"  {key[0]:12s} {key[1]}: " + "  ".join(cells))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
