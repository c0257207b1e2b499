#!/usr/bin/env python3
"""Where a kernel's warps wait: a summary of ncu's per-instruction stall samples.

Usage: scripts/ncu_stalls.py SASS_CSV [TOP]

SASS_CSV is `ncu --import REPORT --page source --csv --print-source sass` of a report taken with
the source counters (`--set full`, as `scripts/gpu_check.sh profile` does). Prints the share of
all warp samples per stall reason, the shares of two kinds of site where the Hopper kernels wait
(wgmma waits: WARPGROUP.DEPBAR; mbarrier waits: the branch of a SYNCS try-wait loop), and the
TOP (default 20) instructions by samples, each with its dominant stall reasons and, for an
mbarrier wait, the try-wait it loops on (the barrier's shared-memory operand names which
barrier). A warp waiting at a named barrier (BAR.SYNC) is sampled on the instruction after it,
with the reason "barrier".

Then the runs of consecutive instructions that executed equally often, each with its share of
the samples (those of at least 0.5%): how often a run executed says what it is per (per step of
a main loop, per work item, per partial tile, per CTA), so the shares tell what each of those
costs, e.g. a persistent kernel's item boundaries against its step loop.

The samples cover every warp, the producer's included: a producer waiting for a free stage is
idle, not a cost.
"""
import csv
import sys
from collections import Counter

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read(path):
    """(stall reason columns, rows as dicts) of an ncu source-page CSV (SASS view)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    # The first line names the kernel; the header is the first line with the samples column.
    start = next(i for i, row in enumerate(rows) if SAMPLES in row)
    header = rows[start]
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    data = [dict(zip(header, row)) for row in rows[start + 1:] if len(row) == len(header)]
    return reasons, data


def count(row, column):
    value = row.get(column, "")
    return int(float(value)) if value not in ("", "-") else 0


def opcode(row):
    """The instruction's opcode without its predicate, e.g. 'WARPGROUP.DEPBAR.LE'."""
    words = row["Source"].split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def summarise(reasons, data, top):
    total = sum(count(row, SAMPLES) for row in data)
    if total == 0:
        return ["no stall samples (was the report taken with the source counters?)"]
    lines = [f"{total} warp samples"]
    by_reason = Counter({r: sum(count(row, r) for row in data) for r in reasons})
    lines.append("stall reasons: " + ", ".join(
        f"{r.removeprefix('stall_')} {100 * n / total:.1f}%" for r, n in by_reason.most_common(8)))
    # An mbarrier wait: a branch on the predicate that a SYNCS try-wait a few instructions before
    # it wrote (the loop that polls the barrier until its phase completes).
    waits_on = {}
    for i, row in enumerate(data):
        words = row["Source"].split()
        if opcode(row) != "BRA" or not words[0].startswith("@!"):
            continue
        predicate = words[0][2:]
        for j in range(i - 1, max(-1, i - 10), -1):
            if "TRYWAIT" in data[j]["Source"] and f" {predicate}," in data[j]["Source"]:
                waits_on[i] = data[j]["Source"].strip()
                break
    kinds = Counter()
    for i, row in enumerate(data):
        if opcode(row).startswith("WARPGROUP.DEPBAR"):
            kinds["wgmma waits"] += count(row, SAMPLES)
        elif i in waits_on:
            kinds["mbarrier waits"] += count(row, SAMPLES)
    lines.append("sites: " + ", ".join(
        f"{kind} {100 * kinds[kind] / total:.1f}%" for kind in ("wgmma waits", "mbarrier waits")))
    ranked = sorted(range(len(data)), key=lambda i: -count(data[i], SAMPLES))[:top]
    for i in ranked:
        row = data[i]
        n = count(row, SAMPLES)
        main = [f"{r.removeprefix('stall_')} {count(row, r)}" for r in reasons
                if count(row, r) >= 0.2 * n and count(row, r) > 0]
        where = f"  (waits on: {waits_on[i]})" if i in waits_on else ""
        lines.append(f"  {row.get('Address', '?')[-6:]} {100 * n / total:5.1f}% "
                     f"{row['Source'].strip()[:64]:64s} {', '.join(main)}{where}")
    lines.extend(runs(data, total))
    return lines


def runs(data, total, least=0.005):
    """Lines for the runs of consecutive instructions with one execution count and at least
    `least` of the samples: rows, count, share, first instruction. None without the column."""
    if not data or EXECUTED not in data[0]:
        return []
    lines = ["runs of equal execution count (rows, executed, share of samples, first):"]
    start = 0
    for i in range(1, len(data) + 1):
        if i < len(data) and count(data[i], EXECUTED) == count(data[start], EXECUTED):
            continue
        n = sum(count(row, SAMPLES) for row in data[start:i])
        if n >= least * total:
            lines.append(f"  {start:5d}-{i - 1:<5d} x{count(data[start], EXECUTED):<10d} "
                         f"{100 * n / total:5.1f}%  {data[start]['Source'].strip()[:56]}")
        start = i
    return lines


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    reasons, data = read(argv[1])
    print("\n".join(summarise(reasons, data, int(argv[2]) if len(argv) == 3 else 20)))


if __name__ == "__main__":
    main(sys.argv)
