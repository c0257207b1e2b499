"""bench/peers.py's document split for the packed rows' flash peer, varlen_attn (CPU; the peers
themselves need a GPU and run in scripts/gpu_check.sh)."""

import pathlib
import sys

import pytest

pytest.importorskip("numpy")
pytest.importorskip("torch")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import peers  # noqa: E402  (bench/ is not a package)


def test_documents_in_row_order_without_padding():
    seg = [1, 1, 1, 2, 2, 0, 3, 0, 0]
    pos = [0, 1, 2, 0, 1, 0, 0, 0, 0]
    index, cu_seqlens, longest = peers.varlen_documents(seg, pos)
    assert index == [0, 1, 2, 3, 4, 6]
    assert cu_seqlens == [0, 3, 5, 6]
    assert longest == 3


def test_a_document_split_into_runs_is_refused():
    with pytest.raises(ValueError, match="split"):
        peers.varlen_documents([1, 1, 2, 1], [0, 1, 0, 2])


@pytest.mark.parametrize("pos", [[1, 2, 3], [0, 2, 3], [0, 1, 1]])
def test_positions_other_than_0_1_2_are_refused(pos):
    with pytest.raises(ValueError, match="positions"):
        peers.varlen_documents([4, 4, 4], pos)


def test_a_row_of_padding_is_refused():
    with pytest.raises(ValueError, match="no document"):
        peers.varlen_documents([0, 0], [0, 0])
