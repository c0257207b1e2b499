"""ringpack.torch with cp_group: real processes over torch.distributed (gloo on CPU, NCCL on a GPU),
each rank with its shard; the unsharded outputs and gradients must equal the single-device op's."""

import gc
import os
import socket
import tempfile
import weakref

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import ringpack
import ringpack.torch as rt


def _row(seq):
    """Two rows: short documents (shorter than cp), padding inside and at the end."""
    a = [1 + i // 2 for i in range(seq // 3)]
    b = [50] * (seq // 3) + [0] * 3
    c = [60] * (seq - len(a) - len(b) - 2) + [0] * 2
    return [a + b + c, [70 + i // 17 for i in range(seq)]]


def _destroy_and_check_released():
    """destroy_process_group must really destroy the group: ringpack keeps no reference to it (a
    gloo group that outlives it aborts the process at interpreter exit)."""
    group = weakref.ref(dist.group.WORLD)
    dist.destroy_process_group()
    gc.collect()
    assert group() is None, "the process group outlived destroy_process_group"


def _worker(rank, world, init_file, device_type, strategy, reorder, result_dir):
    if device_type == "cuda":
        # One GPU shared by every rank: NCCL needs a different host id per process.
        os.environ["NCCL_HOSTID"] = f"ringpack-test-{rank}"
        torch.cuda.set_device(0)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        _check_cp(rank, world, device_type, strategy, reorder, result_dir)
    except BaseException:
        dist.destroy_process_group()
        raise
    _destroy_and_check_released()


def _check_cp(rank, world, device_type, strategy, reorder, result_dir):
    device = torch.device(device_type)
    dtype = torch.float32 if device_type == "cpu" else torch.bfloat16
    seq = 2 * world * 12
    seg = torch.tensor(_row(seq), dtype=torch.int32)
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(2, seq, 4, 64, generator=gen).to(dtype)
    k = torch.randn(2, seq, 2, 64, generator=gen).to(dtype)
    v = torch.randn(2, seq, 2, 64, generator=gen).to(dtype)
    dout = torch.randn(2, seq, 4, 64, generator=gen).to(dtype)
    plan = rt.plan(seg, cp_size=world, reorder=reorder, strategy=strategy)
    shard = lambda x: rt.shard(x, plan, rank).to(device).requires_grad_(x.is_floating_point())
    qs, ks, vs = shard(q), shard(k), shard(v)
    seg_r, pos_r = plan.shard_layout(rank, device)
    group = dist.group.WORLD
    out = rt.attention(qs, ks, vs, seg_r, pos_r, cp_group=group, strategy=strategy, plan=plan)
    grads = torch.autograd.grad(out, (qs, ks, vs), rt.shard(dout, plan, rank).to(device))
    gathered = [rt.unshard(t.detach().cpu(), plan, group=group) for t in (out, *grads)]
    if rank == 0:
        qf, kf, vf = (t.to(device).requires_grad_() for t in (q, k, v))
        expected = rt.attention(qf, kf, vf, seg.to(device))
        expected_grads = torch.autograd.grad(expected, (qf, kf, vf), dout.to(device))
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        names = ("out", "dq", "dk", "dv")
        for name, got, want in zip(names, gathered, (expected, *expected_grads)):
            err = (got.float() - want.detach().cpu().float()).abs().max().item()
            scale = want.abs().max().item()
            assert err <= tol * max(scale, 1.0), f"{name}: error {err} (scale {scale})"
        open(os.path.join(result_dir, "ok"), "w").close()


def _mismatch_worker(rank, world, init_file, result_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    seq = 8 if rank == 0 else 12  # rank 1 passes a shard of another length
    q = torch.randn(1, seq, 2, 16)
    seg = torch.ones(1, seq, dtype=torch.int32)
    pos = torch.arange(seq, dtype=torch.int32)[None]
    try:
        rt.attention(q, q, q, seg, pos, cp_group=dist.group.WORLD)
    except ValueError as error:
        assert "every rank must pass its shard" in str(error), str(error)
        open(os.path.join(result_dir, f"raised{rank}"), "w").close()
    except BaseException:
        dist.destroy_process_group()
        raise
    _destroy_and_check_released()


def test_cp_ranks_with_different_shards_all_raise():
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_mismatch_worker, args=(2, os.path.join(tmp, "init"), tmp), nprocs=2, join=True)
        assert {"raised0", "raised1"} <= set(os.listdir(tmp)), "a rank did not raise"


def _run(world, device_type, strategy, reorder):
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        mp.spawn(_worker, args=(world, init_file, device_type, strategy, reorder, tmp),
                 nprocs=world, join=True)
        assert os.path.exists(os.path.join(tmp, "ok")), "rank 0 did not finish its checks"


@pytest.mark.parametrize("world,strategy,reorder", [
    (2, "ring", "dual_chunk_swap"),
    (3, "ring", "striped"),
    (3, "all_gather", "auto"),
    (4, "ring", "contiguous"),
])
def test_cp_over_gloo_matches_single_device(world, strategy, reorder):
    _run(world, "cpu", strategy, reorder)


@pytest.mark.skipif(not (torch.cuda.is_available() and ringpack.cuda_built()),
                    reason="needs a GPU and the CUDA build")
@pytest.mark.parametrize("world,strategy", [(2, "ring"), (2, "all_gather"), (4, "ring")])
def test_cp_over_nccl_matches_single_device(world, strategy):
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_IB_DISABLE", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    _run(world, "cuda", strategy, "auto")


def test_cp_group_destroyed_and_created_again():
    """torch reuses a group's name after destroy_process_group: the new group gets fresh state,
    and the old group is not kept alive by ringpack."""
    seg = torch.tensor([[1] * 5 + [2] * 7], dtype=torch.int32)
    q = torch.randn(1, 12, 2, 16)
    plan = rt.plan(seg, cp_size=1)
    seg_r, pos_r = plan.shard_layout(0, torch.device("cpu"))
    expected = rt.attention(q, q, q, seg)
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(2):
            dist.init_process_group("gloo", init_method=f"file://{tmp}/init{attempt}", rank=0,
                                    world_size=1)
            try:
                out = rt.attention(q, q, q, seg_r, pos_r, cp_group=dist.group.WORLD, plan=plan)
                torch.testing.assert_close(out, expected)
            except BaseException:
                dist.destroy_process_group()
                raise
            _destroy_and_check_released()
