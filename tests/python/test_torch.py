"""ringpack.torch against an independent fp64 attention with an explicit document mask."""

import math

import pytest
import torch

import ringpack
import ringpack.torch as rt

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and ringpack.cuda_built() else [])


def reference(q, k, v, segment_ids, positions, causal=True, window=None, scale=None):
    """Plain fp64 softmax attention over [B, S, H, D] with the mask rule of docs/design.md §2."""
    heads_q, heads_kv, dim = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    qq = q.double().transpose(1, 2)
    kk = k.double().repeat_interleave(heads_q // heads_kv, 2).transpose(1, 2)
    vv = v.double().repeat_interleave(heads_q // heads_kv, 2).transpose(1, 2)
    sq, sk = segment_ids[:, :, None], segment_ids[:, None, :]
    pq, pk = positions[:, :, None].long(), positions[:, None, :].long()
    mask = (sq == sk) & (sq != 0)
    if causal:
        mask &= pk <= pq
    if window is not None:
        mask &= (pq - pk).abs() <= window if not causal else (pq - pk) <= window
    scores = (qq @ kk.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask[:, None], -math.inf)
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    return (probs @ vv).transpose(1, 2)


def layout(kind, batch, seq, device):
    """Adversarial rows: short documents, padding inside and at the end, one long document."""
    rows = []
    for b in range(batch):
        if kind == "short":
            row = [1 + i // 3 for i in range(seq)]
        elif kind == "padding":
            a, c = seq // 3, seq // 4
            row = [1] * a + [0] * 2 + [2] * c + [3] * (seq - a - c - 5) + [0] * 3
        else:
            row = [7 + b] * seq
        rows.append(row[:seq])
    return torch.tensor(rows, dtype=torch.int32, device=device)


def tolerance(dtype):
    return {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}[dtype]


def check(actual, expected, dtype, what):
    err = (actual.double() - expected).abs().max().item()
    scale = max(expected.abs().max().item(), 1e-3)
    assert err <= tolerance(dtype) * scale, f"{what}: max error {err:.3e} (scale {scale:.3e})"


def random_qkv(batch, seq, heads_q, heads_kv, dim, dtype, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    make = lambda h: torch.randn(batch, seq, h, dim, generator=gen).to(device, dtype)
    return make(heads_q), make(heads_kv), make(heads_kv)


def dtypes_for(device):
    return [torch.bfloat16, torch.float16] if device == "cuda" else [torch.float32, torch.bfloat16]


CASES = [
    # (layout, batch, seq, heads_q, heads_kv, causal, window)
    ("short", 1, 40, 2, 2, True, None),
    ("padding", 2, 64, 4, 2, True, None),
    ("single", 2, 48, 4, 1, False, None),
    ("padding", 1, 72, 2, 1, True, 5),
    ("short", 2, 33, 2, 2, False, 2),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
def test_forward_and_gradients_match_reference(device, case):
    kind, batch, seq, heads_q, heads_kv, causal, window = case
    dim = 64
    for dtype in dtypes_for(device):
        q, k, v = random_qkv(batch, seq, heads_q, heads_kv, dim, dtype, device)
        seg = layout(kind, batch, seq, device)
        pos = rt.derive_positions(seg)
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
        out = rt.attention(q, k, v, seg, causal=causal, window=window)
        expected = reference(q.detach(), k.detach(), v.detach(), seg, pos, causal, window)
        check(out, expected, dtype, f"out {dtype}")
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = reference(q64, k64, v64, seg, pos, causal, window)
        rq, rk, rv = torch.autograd.grad(ref, (q64, k64, v64), grad.double())
        for name, a, e in (("dq", dq, rq), ("dk", dk, rk), ("dv", dv, rv)):
            check(a, e, dtype, f"{name} {dtype}")


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_backward_matches_reference_and_repeats_bit_for_bit(device):
    """torch.use_deterministic_algorithms(True) selects the backend's deterministic backward (on
    CUDA the mma.sync kernels with dQ written without atomics): the gradients still match the
    reference, and two backward passes give the same bits."""
    dtype = dtypes_for(device)[0]
    q, k, v = random_qkv(2, 96, 8, 2, 64, dtype, device, seed=3)
    seg = layout("padding", 2, 96, device)
    pos = rt.derive_positions(seg)
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(4)).to(device, dtype)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = []
        for _ in range(2):
            leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
            out = rt.attention(*leaves, seg)
            runs.append(torch.autograd.grad(out, leaves, grad))
    finally:
        torch.use_deterministic_algorithms(previous)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    expected = torch.autograd.grad(reference(q64, k64, v64, seg, pos), (q64, k64, v64),
                                   grad.double())
    for name, first, second, want in zip(("dq", "dk", "dv"), runs[0], runs[1], expected):
        check(first, want, dtype, f"{name} {dtype} (deterministic)")
        assert torch.equal(first, second), f"{name}: two deterministic backward passes differ"


@pytest.mark.parametrize("device", DEVICES)
def test_packed_thd_layout_and_explicit_positions(device):
    dtype = dtypes_for(device)[0]
    q, k, v = random_qkv(1, 50, 4, 2, 64, dtype, device, seed=3)
    seg = layout("padding", 1, 50, device)
    pos = rt.derive_positions(seg)
    out_bshd = rt.attention(q, k, v, seg, pos)
    out_thd = rt.attention(q[0], k[0], v[0], seg[0], pos[0].long())
    assert out_thd.shape == q[0].shape
    torch.testing.assert_close(out_thd, out_bshd[0], rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs_and_scale(device):
    dtype = dtypes_for(device)[0]
    q, k, v = random_qkv(1, 32, 2, 2, 64, dtype, device, seed=4)
    seg = layout("short", 1, 32, device)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # same values, other strides
    out = rt.attention(qt, k, v, seg, scale=0.05)
    check(out, reference(q, k, v, seg, rt.derive_positions(seg), scale=0.05), dtype, "out")


def test_opcheck_forward_and_backward_ops():
    q, k, v = random_qkv(1, 24, 2, 1, 64, torch.float32, "cpu", seed=5)
    seg = layout("padding", 1, 24, "cpu")
    pos = rt.derive_positions(seg)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    torch.library.opcheck(torch.ops.ringpack.attention_fwd.default,
                          (q, k, v, seg, pos, True, -1, 0.0))
    out, lse = torch.ops.ringpack.attention_fwd(q, k, v, seg, pos, True, -1, 0.0)
    dout = torch.randn_like(out)
    args = (q.detach(), k.detach(), v.detach(), seg, pos, out.detach(), lse.detach(), dout, True,
            -1, 0.0, False)
    torch.library.opcheck(torch.ops.ringpack.attention_bwd.default, args)


def test_torch_compile_fullgraph_matches_eager():
    q, k, v = random_qkv(2, 40, 4, 2, 64, torch.float32, "cpu", seed=6)
    seg = layout("padding", 2, 40, "cpu")

    def loss(q, k, v):
        return (rt.attention(q, k, v, seg) ** 2).sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    grads = []
    for fn in (loss, compiled):
        args = [t.clone().requires_grad_() for t in (q, k, v)]
        value = fn(*args)
        grads.append((value, *torch.autograd.grad(value, args)))
    for eager, comp in zip(*grads):
        torch.testing.assert_close(comp, eager)


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs a GPU and the CUDA build")
def test_cuda_graph_capture_replays():
    q, k, v = random_qkv(1, 256, 4, 2, 128, torch.bfloat16, "cuda", seed=7)
    seg = layout("padding", 1, 256, "cuda")
    pos = rt.derive_positions(seg)
    expected = rt.attention(q, k, v, seg, pos)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        rt.attention(q, k, v, seg, pos)  # warm-up on the capture stream (backend creation)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = rt.attention(q, k, v, seg, pos)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, expected, rtol=0, atol=0)


# ---- errors: one exception of the right type, with the value and the fix -------------------


def test_errors_name_the_value_and_the_fix():
    q, k, v = random_qkv(1, 16, 4, 2, 64, torch.float32, "cpu")
    seg = torch.ones(1, 16, dtype=torch.int32)
    with pytest.raises(TypeError, match="dtype torch.int64"):
        rt.attention(q.long(), k, v, seg)
    with pytest.raises(TypeError, match="one dtype"):
        rt.attention(q, k.double(), v, seg)
    with pytest.raises(ValueError, match="multiple of the key/value heads"):
        rt.attention(q[:, :, :3], k, v, seg)
    with pytest.raises(ValueError, match="segment_ids has shape"):
        rt.attention(q, k, v, seg[:, :8])
    with pytest.raises(TypeError, match="pass integers"):
        rt.attention(q, k, v, seg.float())
    with pytest.raises(ValueError, match="window"):
        rt.attention(q, k, v, seg, window=-3)
    with pytest.raises(ValueError, match="layout"):
        rt.attention(q, k[0], v[0], seg)
    with pytest.raises(ValueError, match="unknown config key"):
        rt.attention(q, k, v, seg, config={"context_parallel_strategyy": "ring"})
    with pytest.raises(ValueError, match="cp_size"):
        rt.plan(seg, cp_size=0)


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs a GPU and the CUDA build")
def test_cuda_rejects_unsupported_head_dim_and_fp32():
    q, k, v = random_qkv(1, 16, 2, 2, 96, torch.bfloat16, "cuda")
    seg = torch.ones(1, 16, dtype=torch.int32, device="cuda")
    with pytest.raises(NotImplementedError, match="96"):
        rt.attention(q, k, v, seg)
    q, k, v = random_qkv(1, 16, 2, 2, 64, torch.float32, "cuda")
    with pytest.raises(NotImplementedError):
        rt.attention(q, k, v, seg)
    with pytest.raises(ValueError, match="one device"):
        rt.attention(q, k.cpu(), v, seg)


# ---- sharding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("reorder", ["contiguous", "dual_chunk_swap", "striped", "auto"])
def test_plan_shard_unshard_round_trip(reorder):
    seg = layout("padding", 2, 48, "cpu")
    plan = rt.plan(seg, cp_size=3 if reorder != "dual_chunk_swap" else 4, reorder=reorder)
    x = torch.randn(2, 48, 5)
    shards = [rt.shard(x, plan, r) for r in range(plan.cp_size)]
    assert all(s.shape == (2, 48 // plan.cp_size, 5) for s in shards)
    torch.testing.assert_close(rt.unshard(shards, plan), x, rtol=0, atol=0)
    assert plan.reorder != "auto"
    seg_r, pos_r = plan.shard_layout(1)
    torch.testing.assert_close(seg_r, rt.shard(seg, plan, 1))
