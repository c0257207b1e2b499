#!/usr/bin/env python3
"""Tile geometry of the Hopper backward on the benchmark layouts (CPU only, numpy).

Reads the layouts written by `ringpack bench --layouts-only --layouts-out FILE` and prints, per
workload, for query tiles of 64 and key tiles of 128 split into two warpgroup halves of 64 keys
(backward/kernel_sm90.h), under the causal document mask (docs/design.md §2 rule (1), no window):
  steps         (query tile, key tile) pairs with at least one visible pair: what a head walks;
  steps / CTA   steps per key tile that has any (the work a CTA amortises its prologue and
                dK/dV epilogue over, one query head per CTA);
  dead halves   warpgroup-steps whose 64 keys see none of the 64 queries (MMAs that skipping
                could save);
  efficiency    visible pairs / computed pairs at 64 x 128, and at 64 x 64.

  python3 bench/tile_geometry.py out/layouts.json
"""
import argparse
import json

import numpy as np

QUERY_TILE = 64
KEY_HALF = 64  # keys per consumer warpgroup; a key tile is two halves


def visible_counts(seg, pos):
    """Visible pairs per (query tile, key half)."""
    n = len(seg)
    num_q = -(-n // QUERY_TILE)
    num_k = 2 * -(-n // (2 * KEY_HALF))
    counts = np.zeros((num_q, num_k), dtype=np.int64)
    for qt in range(num_q):
        rows = slice(qt * QUERY_TILE, min(n, (qt + 1) * QUERY_TILE))
        seg_q, pos_q = seg[rows][:, None], pos[rows][:, None]
        for kh in range(num_k):
            keys = slice(kh * KEY_HALF, min(n, (kh + 1) * KEY_HALF))
            visible = (seg_q == seg[keys][None, :]) & (seg_q > 0) & (pos[keys][None, :] <= pos_q)
            counts[qt, kh] = visible.sum()
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layouts", help="JSON from ringpack bench --layouts-only --layouts-out")
    args = parser.parse_args()
    with open(args.layouts) as f:
        layouts = json.load(f)
    for workload in layouts["workloads"]:
        counts = visible_counts(np.array(workload["segment_ids"]), np.array(workload["positions"]))
        halves = counts.reshape(counts.shape[0], -1, 2)
        visited = halves.sum(axis=2) > 0
        steps = int(visited.sum())
        key_tiles = int(visited.any(axis=0).sum())
        dead = int(((halves == 0) & visited[:, :, None]).sum())
        pairs = int(counts.sum())
        eff_128 = pairs / (steps * QUERY_TILE * 2 * KEY_HALF)
        eff_64 = pairs / (int((counts > 0).sum()) * QUERY_TILE * KEY_HALF)
        print(f"{workload['name']}: steps {steps}, steps / CTA {steps / key_tiles:.1f}, "
              f"dead halves {dead} of {2 * steps} ({dead / (2 * steps):.1%}), "
              f"efficiency 64x128 {eff_128:.1%}, 64x64 {eff_64:.1%}")


if __name__ == "__main__":
    main()
