#!/usr/bin/env python3
"""Tile geometry of the Hopper kernels on the benchmark layouts (CPU only, numpy).

Reads the layouts written by `ringpack bench --layouts-only --layouts-out FILE` and prints, per
workload, under the causal document mask (docs/design.md §2 rule (1), no window):

Backward (query tiles of 64, key tiles of 128 split into two warpgroup halves of 64 keys;
backward/kernel_sm90.h):
  steps         (query tile, key tile) pairs with at least one visible pair: what a head walks;
  steps / CTA   steps per key tile that has any (the work a CTA amortises its prologue and
                dK/dV epilogue over, one query head per CTA);
  dead halves   warpgroup-steps whose 64 keys see none of the 64 queries (MMAs that skipping
                could save);
  efficiency    visible pairs / computed pairs at 64 x 128, and at 64 x 64;
  aligned       steps and efficiency when key and query tiles restart at each document's first
                token (what a kernel with per-document tiles would walk).

With --wave CTAS (and --head-dim, default 128): the backward's key tiles of one query head (of
128, of 64 at head_dim 256) in groups of CTAS, as a grid of CTAS resident CTAs takes them, in two
orders: heaviest first (most steps first, ties in row order: the tile plan's order,
tiles/tile_lists.cu, which the Hopper backward took until session 29) and row order (what it
takes now). Per group:
  query tiles   the query tiles its key tiles walk between them; for the largest group, what
                those rows hold, fp32 dq and bf16 Q and dO (MiB): what a wave keeps in L2 for
                its dQ adds and loads.
With --forward --wave TILES (--head-dim, --kv-heads, default 8): the forward's query tiles of 128
in groups of TILES, in the tile plan's heaviest-first order (what the Hopper forward took until
session 30) and in descending row order (what it takes now: each document's tiles heaviest
first). The forward runs a tile's query heads side by side (32 of them: 132 CTAs hold about 4
tiles). Per group:
  key tiles     the key tiles its query tiles walk between them; for the largest group, their K
                and V (bf16, every kv head, MiB): what a wave keeps in L2 for its loads.
With --forward --schedule CTAS (--heads-q, default 32; --item-steps, default 2.4): a model of
the persistent forward's tail. CTAS CTAs each take the next work item when they finish one (the
work counter), the query heads of a tile in turn; an item costs its key tiles plus ITEM_STEPS
steps (what an item's start, fill, drain and epilogue cost: about 2.4 steps by session 19's ncu,
docs/cuda_kernels.md). Per order (heaviest first, row order, descending row order):
  makespan      when the last CTA finishes, against heaviest first; and the bound, all the
                work spread evenly over the CTAs. Caches and memory are not in the model.

Forward (query and key tiles of 128; forward/kernel_sm90.h), with --forward:
  efficiency    visible pairs / computed pairs at 128 x 128, with each consumer warpgroup
                (64 query rows) skipping the key tiles of 128 it sees nothing of (64x128 per
                warpgroup), at 64 x 64, and with query tiles that restart at each document's
                first token (key tiles from the document's first token: what a kernel with
                per-document tiles would compute);
  partial       the share of visited tiles that pay the per-element mask; among them, the share
                that are one document's causal diagonal (both tiles consecutive tokens of one
                document: an offset compare would mask them, where the others need the
                per-element test); and among the 16-row warp slices of partial tiles, the share
                that see some but not all of its keys (what a per-warp mask test could not skip);
  key tiles     visited key tiles per visited query tile (what each query tile's fixed costs are
                spread over).

  python3 bench/tile_geometry.py out/layouts.json [--forward [--wave 4 | --schedule 132] |
                                                   --wave 132 --head-dim 256]
"""
import argparse
import collections
import heapq
import json

import numpy as np

QUERY_TILE = 64
KEY_HALF = 64  # keys per consumer warpgroup; a key tile is two halves


def visible(seg_q, pos_q, seg_k, pos_k):
    """Rule (1), causal, no window: [queries, keys] booleans."""
    return ((seg_q[:, None] == seg_k[None, :]) & (seg_q[:, None] > 0) &
            (pos_k[None, :] <= pos_q[:, None]))


def documents(seg):
    """(first token, end) of each document of a row, padding (segment 0) left out."""
    starts = np.r_[0, np.flatnonzero(np.diff(seg)) + 1]
    ends = np.r_[starts[1:], len(seg)]
    return [(first, end) for first, end in zip(starts, ends) if seg[first] != 0]


def visible_counts(seg, pos):
    """Visible pairs per (query tile, key half)."""
    n = len(seg)
    num_q = -(-n // QUERY_TILE)
    num_k = 2 * -(-n // (2 * KEY_HALF))
    counts = np.zeros((num_q, num_k), dtype=np.int64)
    for qt in range(num_q):
        rows = slice(qt * QUERY_TILE, min(n, (qt + 1) * QUERY_TILE))
        for kh in range(num_k):
            keys = slice(kh * KEY_HALF, min(n, (kh + 1) * KEY_HALF))
            counts[qt, kh] = visible(seg[rows], pos[rows], seg[keys], pos[keys]).sum()
    return counts


def visited_blocks(counts):
    """[64 query rows, key tile of 128] booleans from visible_counts: the blocks with a visible
    pair (the backward's steps; the forward's per-warpgroup blocks)."""
    return counts.reshape(counts.shape[0], -1, 2).sum(axis=2) > 0


def backward_geometry(name, seg, pos):
    counts = visible_counts(seg, pos)
    halves = counts.reshape(counts.shape[0], -1, 2)
    visited = visited_blocks(counts)
    steps = int(visited.sum())
    key_tiles = int(visited.any(axis=0).sum())
    dead = int(((halves == 0) & visited[:, :, None]).sum())
    pairs = int(counts.sum())
    eff_128 = pairs / (steps * QUERY_TILE * 2 * KEY_HALF)
    eff_64 = pairs / (int((counts > 0).sum()) * QUERY_TILE * KEY_HALF)
    aligned_steps, aligned_key_tiles = document_aligned_steps(seg)
    print(f"{name}: steps {steps}, steps / CTA {steps / key_tiles:.1f}, "
          f"dead halves {dead} of {2 * steps} ({dead / (2 * steps):.1%}), "
          f"efficiency 64x128 {eff_128:.1%}, 64x64 {eff_64:.1%}; aligned {aligned_steps} steps "
          f"over {aligned_key_tiles} key tiles, efficiency "
          f"{pairs / (aligned_steps * QUERY_TILE * 2 * KEY_HALF):.1%}")


def key_tile_walks(seg, pos, head_dim):
    """[query tile, key tile] booleans: the steps of each key tile's walk (key tiles of 128, of
    64 at head_dim 256)."""
    counts = visible_counts(seg, pos)
    return counts > 0 if head_dim == 256 else visited_blocks(counts)


def ordered_tiles(steps, order):
    """The tiles' indices in `order`: "heaviest" (most steps first, ties in row order), "rows",
    or "descending" (row order from the last tile)."""
    if order == "heaviest":
        return np.argsort(-steps, kind="stable")
    rows = np.arange(len(steps))
    if order not in ("rows", "descending"):
        raise ValueError(f"unknown order {order!r}")
    return rows if order == "rows" else rows[::-1]


def tile_groups(walks, size, order):
    """[(steps of each tile of the group, tiles of the other side they walk between them)] for
    the tiles with steps (walks: one column per tile's walk, key_tile_walks or query_tile_walks),
    taken in `order` (ordered_tiles) in groups of `size`."""
    steps = walks.sum(axis=0)
    tiles = ordered_tiles(steps, order)
    tiles = tiles[steps[tiles] > 0]
    return [(steps[group], int(walks[:, group].any(axis=1).sum()))
            for group in (tiles[i:i + size] for i in range(0, len(tiles), size))]


def walked_by_order(walks, size, orders):
    """{order: [the other side's tiles each group walks]} for the orders of tile_groups."""
    return {order: [n for _, n in tile_groups(walks, size, order)] for order in orders}


def first_groups(walked):
    """The first 8 counts of walked_by_order as text."""
    return " ".join(str(n) for n in walked[:8]) + (" ..." if len(walked) > 8 else "")


def wave_footprints(name, seg, pos, head_dim, ctas):
    mib = 1 << 20
    walks = key_tile_walks(seg, pos, head_dim)  # the costly part: once for both orders
    for order, walked in walked_by_order(walks, ctas, ("heaviest", "rows")).items():
        rows = max(walked) * QUERY_TILE
        print(f"{name} {order}: groups of {ctas} key tiles walk {first_groups(walked)} query "
              f"tiles; the largest holds dq {rows * head_dim * 4 / mib:.1f} MiB, Q and dO "
              f"{rows * head_dim * 2 * 2 / mib:.1f} MiB")


def query_tile_walks(seg, pos):
    """[key tile, query tile] booleans, tiles of 128: the forward's steps, one column per query
    tile's walk (the layout tile_groups groups columns of)."""
    counts = visible_counts(seg, pos)
    if counts.shape[0] % 2:  # an odd number of query tiles of 64: the last 128 is half empty
        counts = np.pad(counts, ((0, 1), (0, 0)))
    quads = counts.reshape(counts.shape[0] // 2, 2, counts.shape[1] // 2, 2)
    return (quads.sum(axis=(1, 3)) > 0).T


def forward_wave_footprints(name, seg, pos, head_dim, tiles, kv_heads):
    mib = 1 << 20
    walks = query_tile_walks(seg, pos)
    for order, walked in walked_by_order(walks, tiles, ("heaviest", "descending")).items():
        kv = max(walked) * 2 * KEY_HALF * head_dim * 2 * 2 * kv_heads
        print(f"{name} {order}: groups of {tiles} query tiles walk {first_groups(walked)} key "
              f"tiles; the largest holds K and V of {kv_heads} kv heads, {kv / mib:.1f} MiB")


def greedy_makespan(costs, workers):
    """When the last of `workers` finishes, each taking the next of `costs` (in order) as soon
    as it is free."""
    free = [0.0] * workers
    for cost in costs:
        heapq.heappush(free, heapq.heappop(free) + cost)
    return max(free)


def forward_makespans(seg, pos, heads, ctas, item_steps):
    """{order: makespan} of the persistent forward's items (every query tile, `heads` heads of
    a tile in turn) on `ctas` CTAs, and the even-spread bound, in steps."""
    steps = query_tile_walks(seg, pos).sum(axis=0)
    spans = {order: greedy_makespan(np.repeat(steps[ordered_tiles(steps, order)], heads) +
                                    item_steps, ctas)
             for order in ("heaviest", "rows", "descending")}
    spans["even"] = heads * (steps.sum() + item_steps * len(steps)) / ctas
    return spans


def forward_schedule_tails(name, seg, pos, heads, ctas, item_steps):
    spans = forward_makespans(seg, pos, heads, ctas, item_steps)
    base = spans["heaviest"]
    print(f"{name}: {ctas} CTAs, {heads} heads a tile, {item_steps:g} steps an item: makespan "
          f"against heaviest first: rows {spans['rows'] / base:.3f}, descending "
          f"{spans['descending'] / base:.3f} (even spread {spans['even'] / base:.3f})")


def document_aligned_steps(seg):
    """(steps, key tiles) of the backward when key tiles of 128 and query tiles of 64 restart at
    each document's first token: key tile j of a document is walked by the document's query
    tiles from row 128 j on (causal; padding: no tiles)."""
    steps = key_tiles = 0
    for first, end in documents(seg):
        length = end - first
        query_tiles = -(-length // QUERY_TILE)
        for k0 in range(0, length, 2 * KEY_HALF):
            key_tiles += 1
            steps += query_tiles - k0 // QUERY_TILE
    return steps, key_tiles


def one_document_diagonal(seg_q, pos_q, seg_k, pos_k):
    """True when a query tile and a key tile are both consecutive tokens of one document (no
    padding): a partial tile of such a pair is the causal diagonal."""
    ids = np.concatenate([seg_q, seg_k])
    return bool(ids[0] != 0 and (ids == ids[0]).all() and (np.diff(pos_q) == 1).all()
                and (np.diff(pos_k) == 1).all())


# What square tiles of one size compute on a row (computed_pairs).
TileCounts = collections.namedtuple(
    "TileCounts",
    "computed visited partial slices mixed_slices query_tiles diagonal")


def computed_pairs(seg, pos, tile):
    """TileCounts of square tiles of `tile` that visit every tile pair with a visible pair: the
    pairs computed, the visited and partial tile counts, the 16-row warp slices of partial tiles
    and those that see some but not all of the tile's keys, the query tiles with a visited tile,
    and the partial tiles that are one document's diagonal."""
    n = len(seg)
    computed = visited = partial = slices = mixed_slices = diagonal = 0
    query_tiles = 0
    for a in range(0, n, tile):
        visited_here = 0
        for k in range(0, min(n, a + tile), tile):
            v = visible(seg[a:a + tile], pos[a:a + tile], seg[k:k + tile], pos[k:k + tile])
            if not v.any():
                continue
            visited_here += 1
            computed += tile * tile
            if v.all():
                continue
            partial += 1
            diagonal += one_document_diagonal(seg[a:a + tile], pos[a:a + tile],
                                              seg[k:k + tile], pos[k:k + tile])
            for r in range(0, v.shape[0], 16):
                slices += 1
                mixed_slices += not v[r:r + 16].all()
        visited += visited_here
        query_tiles += visited_here > 0
    return TileCounts(computed, visited, partial, slices, mixed_slices, query_tiles, diagonal)


def document_aligned_pairs(seg, tile):
    """Pairs computed when query tiles restart at each document's first token and each query
    tile's key tiles run from that first token (padding: no tiles)."""
    computed = 0
    for first, end in documents(seg):
        for a in range(first, end, tile):
            b = min(end, a + tile)
            computed += tile * tile * -(-(b - first) // tile)
    return computed


def warpgroup_pairs(seg, pos):
    """Pairs computed when each 64-row half of a 128-row query tile visits only the key tiles
    of 128 it sees something of: the blocks the backward steps through."""
    return int(visited_blocks(visible_counts(seg, pos)).sum()) * QUERY_TILE * 2 * KEY_HALF


def forward_geometry(name, seg, pos, pairs):
    t = computed_pairs(seg, pos, 128)
    c64 = computed_pairs(seg, pos, 64).computed
    per_warpgroup = warpgroup_pairs(seg, pos)
    aligned = document_aligned_pairs(seg, 128)
    print(f"{name}: efficiency 128x128 {pairs / t.computed:.1%}, "
          f"per warpgroup 64x128 {pairs / per_warpgroup:.1%}, 64x64 {pairs / c64:.1%}, "
          f"document-aligned 128x128 {pairs / aligned:.1%}; partial {t.partial / t.visited:.1%} "
          f"of {t.visited} visited tiles ({t.diagonal / max(t.partial, 1):.1%} of them one "
          f"document's diagonal), {t.mixed_slices / max(t.slices, 1):.1%} of their warp slices "
          f"mixed; key tiles per query tile {t.visited / t.query_tiles:.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layouts", help="JSON from ringpack bench --layouts-only --layouts-out")
    parser.add_argument("--forward", action="store_true", help="the forward's geometry")
    parser.add_argument("--wave", type=int, metavar="CTAS",
                        help="what groups of CTAS key tiles of the backward walk (with "
                             "--forward: groups of CTAS query tiles of the forward)")
    parser.add_argument("--head-dim", type=int, default=128, choices=(64, 128, 256))
    parser.add_argument("--kv-heads", type=int, default=8,
                        help="kv heads whose K and V a forward wave holds (default 8)")
    parser.add_argument("--schedule", type=int, metavar="CTAS",
                        help="with --forward: the persistent forward's makespan on CTAS CTAs")
    parser.add_argument("--heads-q", type=int, default=32, help="query heads (--schedule)")
    parser.add_argument("--item-steps", type=float, default=2.4,
                        help="steps an item costs besides its key tiles (--schedule)")
    args = parser.parse_args()
    with open(args.layouts) as f:
        layouts = json.load(f)
    for workload in layouts["workloads"]:
        seg = np.array(workload["segment_ids"])
        pos = np.array(workload["positions"])
        if args.forward and args.schedule:
            forward_schedule_tails(workload["name"], seg, pos, args.heads_q, args.schedule,
                                   args.item_steps)
        elif args.forward and args.wave:
            forward_wave_footprints(workload["name"], seg, pos, args.head_dim, args.wave,
                                    args.kv_heads)
        elif args.forward:
            forward_geometry(workload["name"], seg, pos, int(workload["pairs"]))
        elif args.wave:
            wave_footprints(workload["name"], seg, pos, args.head_dim, args.wave)
        else:
            backward_geometry(workload["name"], seg, pos)


if __name__ == "__main__":
    main()
