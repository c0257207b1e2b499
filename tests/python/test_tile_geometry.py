"""bench/tile_geometry.py's counts on small layouts (CPU, numpy)."""

import pathlib
import sys

import pytest

np = pytest.importorskip("numpy")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import tile_geometry  # noqa: E402  (bench/ is not a package)


def test_per_warpgroup_pairs_of_one_causal_document():
    # 256 tokens, one document: 64-row block r sees key tile k (of 128) iff 128 k <= 64 r + 63,
    # so rows 0-127 visit key tile 0 and rows 128-255 key tiles 0 and 1: six 64 x 128 blocks.
    seg = np.ones(256, dtype=np.int64)
    pos = np.arange(256)
    assert tile_geometry.warpgroup_pairs(seg, pos) == 6 * 64 * 128


def test_per_warpgroup_pairs_match_a_direct_count():
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 90, size=12)
    seg = np.concatenate([np.full(n, i + 1) for i, n in enumerate(lengths)])
    seg = np.concatenate([seg, np.zeros(-len(seg) % 128 + 37, dtype=np.int64)])  # padding
    pos = np.concatenate([np.arange(n) for n in lengths] + [np.zeros(len(seg) - lengths.sum())])
    seen = tile_geometry.visible(seg, pos, seg, pos)
    direct = sum(64 * 128 for r in range(0, len(seg), 64) for k in range(0, len(seg), 128)
                 if seen[r:r + 64, k:k + 128].any())
    assert tile_geometry.warpgroup_pairs(seg, pos) == direct
    # Between the square tiles: no more than 128 x 128 computes, no less than 64 x 64.
    assert tile_geometry.computed_pairs(seg, pos, 64).computed <= direct
    assert direct <= tile_geometry.computed_pairs(seg, pos, 128).computed


def test_document_aligned_steps_by_hand():
    # Documents of 100 and 156 tokens: the first has one key tile walked by its 2 query tiles;
    # the second has key tile 0 (its 3 query tiles) and key tile 1 (rows 128-155: 1 query tile).
    seg = np.r_[np.full(100, 1), np.full(156, 2), np.zeros(20, dtype=np.int64)]
    assert tile_geometry.document_aligned_steps(seg) == (6, 3)
    # One document of 256: 4 + 2 steps, as the row-aligned tiles walk it.
    assert tile_geometry.document_aligned_steps(np.ones(256, dtype=np.int64)) == (6, 2)


def test_partial_tiles_that_are_one_documents_diagonal():
    # One document of 256: tiles (0, 0) and (1, 1) are partial, both its diagonal; (1, 0) full.
    seg = np.ones(256, dtype=np.int64)
    pos = np.arange(256)
    t = tile_geometry.computed_pairs(seg, pos, 128)
    assert (t.visited, t.partial, t.diagonal) == (3, 2, 2)
    # Documents of 100 and 156: tile (0, 0) holds both (not a diagonal), (1, 1) is the second's
    # diagonal, (1, 0) holds both documents' keys (partial, not a diagonal).
    seg = np.r_[np.full(100, 1), np.full(156, 2)]
    pos = np.r_[np.arange(100), np.arange(156)]
    t = tile_geometry.computed_pairs(seg, pos, 128)
    assert (t.visited, t.partial, t.diagonal) == (3, 3, 1)


def test_tile_groups_of_key_tiles_by_hand():
    # Documents of 256 and 128 tokens. Key tiles of 64 (head_dim 256): the first document's walk
    # 4, 3, 2, 1 query tiles, the second's 2, 1.
    seg = np.r_[np.full(256, 1), np.full(128, 2)]
    pos = np.r_[np.arange(256), np.arange(128)]

    def groups(head_dim, ctas, order):
        walks = tile_geometry.key_tile_walks(seg, pos, head_dim)
        return [(list(steps), query_tiles) for steps, query_tiles in
                tile_geometry.tile_groups(walks, ctas, order)]

    # Heaviest first, ties in row order: key tiles 0, 1 | 2, 4 | 3, 5.
    assert groups(256, 2, "heaviest") == [([4, 3], 4), ([2, 2], 4), ([1, 1], 2)]
    # Row order: 0, 1 | 2, 3 | 4, 5; the pairs of one document share their query tiles.
    assert groups(256, 2, "rows") == [([4, 3], 4), ([2, 1], 2), ([2, 1], 2)]
    # Key tiles of 128 (head_dim 128): 4 and 2 steps in the first document, 2 in the second.
    assert groups(128, 2, "heaviest") == [([4, 2], 4), ([2], 2)]
    assert groups(128, 3, "rows") == [([4, 2, 2], 6)]


def test_query_tile_groups_by_hand():
    # Two documents of 256 tokens; query and key tiles of 128. Query tiles 0 and 2 walk their
    # document's first key tile, 1 and 3 its first two.
    seg = np.r_[np.full(256, 1), np.full(256, 2)]
    pos = np.r_[np.arange(256), np.arange(256)]
    walks = tile_geometry.query_tile_walks(seg, pos)
    assert walks.astype(int).tolist() == [[1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 1]]

    def groups(order):
        return [(list(steps), key_tiles) for steps, key_tiles in
                tile_geometry.tile_groups(walks, 2, order)]

    # Heaviest first, ties in row order: query tiles 1, 3 | 0, 2: both documents' key tiles.
    assert groups("heaviest") == [([2, 2], 4), ([1, 1], 2)]
    # Row order: 0, 1 | 2, 3: one document a group.
    assert groups("rows") == [([1, 2], 2), ([1, 2], 2)]
    # Descending row order: 3, 2 | 1, 0: one document a group, its heaviest tile first.
    assert groups("descending") == [([2, 1], 2), ([2, 1], 2)]


def test_query_tile_walks_odd_query_tiles():
    # 192 tokens: three query tiles of 64, so the second query tile of 128 is half empty.
    seg = np.full(192, 1)
    pos = np.arange(192)
    assert tile_geometry.query_tile_walks(seg, pos).astype(int).tolist() == [[1, 1], [0, 1]]


def test_greedy_makespan_by_hand():
    # Two workers: 1 | 1, then the first free takes 3: 4. Longest first: 3 | 1 + 1: 3.
    assert tile_geometry.greedy_makespan([1, 1, 3], 2) == 4
    assert tile_geometry.greedy_makespan([3, 1, 1], 2) == 3


def test_forward_makespans_by_hand():
    # One document of 512 tokens: query tiles of 128 walk 1, 2, 3, 4 key tiles. Two CTAs, one
    # head, no cost besides the key tiles. Heaviest first and descending: 4 | 3, 3 + 2, 4 + 1: 5.
    # Row order: 1 | 2, 1 + 3, 2 + 4: 6. Evenly spread: 10 / 2.
    seg = np.full(512, 1)
    pos = np.arange(512)
    spans = tile_geometry.forward_makespans(seg, pos, heads=1, ctas=2, item_steps=0)
    assert spans == {"heaviest": 5, "rows": 6, "descending": 5, "even": 5}
    # One step an item besides: rows 2 | 3, 2 + 4, 3 + 5: 8; even (10 + 4) / 2.
    spans = tile_geometry.forward_makespans(seg, pos, heads=1, ctas=2, item_steps=1)
    assert (spans["rows"], spans["even"]) == (8, 7)
