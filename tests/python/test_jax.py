"""ringpack.jax on the CPU backend: the op against a plain-JAX softmax attention with an explicit
document mask (forward and gradients), the context-parallel ring and all-gather under shard_map
over 2, 3 and 4 CPU devices for every reorder, and the errors (docs/python.md).

The CPU devices are made here, before jax starts its backends: 8 of them
(jax_num_cpu_devices). On a CUDA machine the same tests run on the CPU devices; set
RINGPACK_JAX_PLATFORM=cuda to run the single-device tests on the GPU instead (the shard_map tests
then need as many GPUs as cp, else they are reported as failures, not skipped).
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

NUM_CPU_DEVICES = 8
try:
    jax.config.update("jax_num_cpu_devices", NUM_CPU_DEVICES)
except Exception:  # noqa: BLE001 - backends already started (another test module used jax)
    pass
jax.config.update("jax_default_matmul_precision", "highest")

import ringpack  # noqa: E402
import ringpack.jax as rj  # noqa: E402
from ringpack import _native  # noqa: E402

PLATFORM = os.environ.get("RINGPACK_JAX_PLATFORM", "cpu")
if PLATFORM not in ("cpu", "cuda"):
    raise ValueError(f"RINGPACK_JAX_PLATFORM={PLATFORM!r}: use cpu or cuda")
CUDA = PLATFORM == "cuda"
P = jax.sharding.PartitionSpec
# Everything not placed explicitly runs on PLATFORM (jit of uncommitted arrays included).
jax.config.update("jax_default_device", jax.devices(PLATFORM)[0])

# Two rows of 24 tokens: documents of 5, 3, 9 and 2 tokens (3 and 2 are shorter than cp = 4 for
# most reorders' shards), padding (segment id 0) inside a row and at its end; a row with a
# one-token document, a long one and padding at the end.
SEGMENTS = np.array([
    [1] * 5 + [2] * 3 + [0] * 2 + [3] * 9 + [4] * 2 + [0] * 3,
    [7] * 1 + [8] * 15 + [9] * 6 + [0] * 2,
], np.int32)
B, S = SEGMENTS.shape
HQ, HKV = 4, 2
# The CUDA kernels serve bf16/fp16 and head_dim 64, 128, 256; the CPU backend any of them.
D = 64 if CUDA else 16
DTYPES = [jnp.bfloat16, jnp.float16] if CUDA else [jnp.float32, jnp.bfloat16]
DTYPE_IDS = [jnp.dtype(t).name for t in DTYPES]
F = DTYPES[0]  # the dtype of the tests that are not about dtypes


def device():
    return jax.devices(PLATFORM)[0]


def tolerance(dtype) -> float:
    return 2e-5 if jnp.dtype(dtype) == jnp.float32 else 3e-2


def assert_close(actual, expected, dtype, what=""):
    actual = np.asarray(jnp.asarray(actual, jnp.float32))
    expected = np.asarray(jnp.asarray(expected, jnp.float32))
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    scale = max(1.0, float(np.max(np.abs(expected))))
    err = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    assert err <= tolerance(dtype) * scale, f"{what}: max error {err} (scale {scale})"


# ---- the independent reference ------------------------------------------------------------


def reference_attention(q, k, v, seg, pos, causal=True, window=None, scale=None):
    """softmax(scale q k^T + mask) v in fp32 with an explicit [B, Sq, Sk] document mask; rows that
    see nothing give 0."""
    q, k, v = (x.astype(jnp.float32) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k = jnp.repeat(k, group, axis=2)
    v = jnp.repeat(v, group, axis=2)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    mask = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0)
    dist = pos[:, :, None] - pos[:, None, :]
    if causal:
        mask &= dist >= 0
    if window is not None:
        mask &= (dist <= window) if causal else (jnp.abs(dist) <= window)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision="highest") * scale
    scores = jnp.where(mask[:, None], scores, -jnp.inf)
    peak = jnp.max(scores, axis=-1, keepdims=True)
    peak = jnp.where(jnp.isfinite(peak), peak, 0.0)
    weights = jnp.where(mask[:, None], jnp.exp(scores - peak), 0.0)
    total = jnp.sum(weights, axis=-1, keepdims=True)
    probs = weights / jnp.where(total > 0, total, 1.0)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v, precision="highest")


def inputs(dtype, seed=0, hq=HQ, hkv=HKV, d=D, place=True):
    """q, k, v and the loss weights; on PLATFORM's first device, or (place=False) uncommitted
    on the default device, free for jit to lay out over a mesh."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = jax.random.normal(keys[0], (B, S, hq, d), jnp.float32).astype(dtype)
    k = jax.random.normal(keys[1], (B, S, hkv, d), jnp.float32).astype(dtype)
    v = jax.random.normal(keys[2], (B, S, hkv, d), jnp.float32).astype(dtype)
    w = jax.random.normal(keys[3], (B, S, hq, d), jnp.float32)  # weights of the loss
    if not place:
        return [q, k, v, w]
    return [jax.device_put(x, device()) for x in (q, k, v, w)]


def derived_positions():
    return jnp.asarray(rj.plan(SEGMENTS, cp_size=1).positions)


def loss_of(fn, w):
    return lambda q, k, v: jnp.sum(fn(q, k, v).astype(jnp.float32) * w)


def reference_and_grads(q, k, v, w, causal, window, scale=None):
    seg, pos = jnp.asarray(SEGMENTS), derived_positions()
    fn = functools.partial(reference_attention, seg=seg, pos=pos, causal=causal, window=window,
                           scale=scale)
    # The reference differentiates with respect to the inputs as given (upcast inside).
    out = fn(q, k, v)
    grads = jax.grad(loss_of(fn, w), argnums=(0, 1, 2))(q, k, v)
    return out, grads


# ---- the single-device op ------------------------------------------------------------------

MASKS = [
    pytest.param(True, None, id="causal"),
    pytest.param(False, None, id="noncausal"),
    pytest.param(True, 3, id="causal-window3"),
    pytest.param(False, 2, id="noncausal-window2"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("causal,window", MASKS)
def test_attention_matches_reference(dtype, causal, window):
    q, k, v, w = inputs(dtype)
    seg = jnp.asarray(SEGMENTS)
    fn = jax.jit(functools.partial(rj.attention, segment_ids=seg, causal=causal, window=window))
    out = fn(q, k, v)
    assert out.dtype == jnp.dtype(dtype) and out.shape == q.shape
    ref, ref_grads = reference_and_grads(q, k, v, w, causal, window)
    assert_close(out, ref, dtype, "out")
    grads = jax.jit(jax.grad(loss_of(fn, w), argnums=(0, 1, 2)))(q, k, v)
    for name, g, r, x in zip("qkv", grads, ref_grads, (q, k, v)):
        assert g.dtype == x.dtype and g.shape == x.shape
        assert_close(g, r, dtype, f"d{name}")


def test_attention_padding_rows_are_zero_with_zero_gradients():
    q, k, v, w = inputs(F)
    seg = jnp.asarray(SEGMENTS)
    out = rj.attention(q, k, v, seg)
    pad = SEGMENTS == 0
    assert np.all(np.asarray(out)[pad] == 0)
    dq, dk, dv = jax.grad(loss_of(lambda q, k, v: rj.attention(q, k, v, seg), w),
                          argnums=(0, 1, 2))(q, k, v)
    for g in (dq, dk, dv):
        assert np.all(np.asarray(g)[pad] == 0)
        assert np.all(np.isfinite(np.asarray(g)))


def test_attention_scale_and_explicit_positions():
    q, k, v, w = inputs(F, seed=1)
    seg = jnp.asarray(SEGMENTS)
    # Positions with gaps keep the order within each document; the mask reads them as given.
    pos = derived_positions() * 2 + 1
    out = rj.attention(q, k, v, seg, pos, causal=True, window=4, scale=0.3)
    ref = reference_attention(q, k, v, seg, pos, causal=True, window=4, scale=0.3)
    assert_close(out, ref, F, "out")


def test_attention_mha_and_mqa():
    for hq, hkv in ((2, 2), (4, 1)):
        q, k, v, w = inputs(F, seed=2, hq=hq, hkv=hkv)
        seg = jnp.asarray(SEGMENTS)
        out = rj.attention(q, k, v, seg)
        assert_close(out, reference_attention(q, k, v, seg, derived_positions()), F,
                     f"out hq={hq} hkv={hkv}")


def test_attention_thd_layout_matches_bshd():
    q, k, v, w = inputs(F, seed=3)
    seg = jnp.asarray(SEGMENTS)
    thd = rj.attention(q[1], k[1], v[1], seg[1])
    bshd = rj.attention(q[1:], k[1:], v[1:], seg[1:])
    assert thd.shape == (S, HQ, D)
    assert_close(thd, bshd[0], F, "out")
    g_thd = jax.grad(lambda q: jnp.sum(rj.attention(q, k[1], v[1], seg[1]) * w[1]))(q[1])
    g_bshd = jax.grad(lambda q: jnp.sum(rj.attention(q, k[1:], v[1:], seg[1:]) * w[1:]))(q[1:])
    assert_close(g_thd, g_bshd[0], F, "dq")


def test_attention_under_vmap():
    q, k, v, w = inputs(F, seed=4)
    seg = jnp.asarray(SEGMENTS)
    stacked = [jnp.stack([x, 2 * x]) for x in (q, k, v)]
    out = jax.vmap(lambda q, k, v: rj.attention(q, k, v, seg))(*stacked)
    for i in range(2):
        assert_close(out[i], rj.attention(*(x[i] for x in stacked), seg), F, f"out {i}")


def test_derive_positions_matches_the_library():
    np.testing.assert_array_equal(np.asarray(rj.derive_positions(jnp.asarray(SEGMENTS))),
                                  rj.plan(SEGMENTS, cp_size=1).positions)


# ---- context parallelism under shard_map -----------------------------------------------------


def cp_mesh(cp):
    devices = jax.devices(PLATFORM)
    assert len(devices) >= cp, (
        f"{len(devices)} {PLATFORM} devices for cp = {cp}: on the CPU run the jax tests in a "
        f"fresh process (jax_num_cpu_devices = {NUM_CPU_DEVICES} must be set before jax "
        "starts); on CUDA use a machine with 4 GPUs")
    return jax.sharding.Mesh(np.array(devices[:cp]), ("cp",),
                             axis_types=(jax.sharding.AxisType.Auto,))


def cp_run(q, k, v, *, cp, reorder, strategy, causal=True, window=None, use_config=False):
    """The documented pattern: plan, shard, ring_attention inside shard_map (jit), unshard."""
    p = rj.plan(SEGMENTS, cp_size=cp, reorder=reorder, strategy=strategy, causal=causal,
                window=window, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, dtype=q.dtype)
    assert reorder == "auto" or p.label.partition(":")[0] == reorder
    spec = P(None, "cp")
    if use_config:
        body = functools.partial(rj.attention, axis_name="cp", causal=causal, window=window,
                                 config={"context_parallel_strategy": strategy})
    else:
        body = functools.partial(rj.ring_attention, axis_name="cp", causal=causal, window=window,
                                 strategy=strategy)
    mapped = jax.shard_map(body, mesh=cp_mesh(cp), in_specs=(spec,) * 5, out_specs=spec)
    seg, pos = jnp.asarray(rj.shard(p.segment_ids, p)), jnp.asarray(rj.shard(p.positions, p))

    def run(q, k, v):
        return rj.unshard(mapped(rj.shard(q, p), rj.shard(k, p), rj.shard(v, p), seg, pos), p)

    return run


REORDERS = ["contiguous", "dual_chunk_swap", "striped", "auto"]


@pytest.mark.parametrize("strategy", ["ring", "all_gather"])
@pytest.mark.parametrize("reorder", REORDERS)
@pytest.mark.parametrize("cp", [2, 3, 4])
def test_cp_matches_single_device_and_reference(cp, reorder, strategy):
    q, k, v, w = inputs(F, seed=5, place=False)
    run = cp_run(q, k, v, cp=cp, reorder=reorder, strategy=strategy)
    def loss(q, k, v):
        out = run(q, k, v)
        return jnp.sum(out * w), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    seg = jnp.asarray(SEGMENTS)
    single = rj.attention(q, k, v, seg)
    single_grads = jax.grad(loss_of(lambda q, k, v: rj.attention(q, k, v, seg), w),
                            argnums=(0, 1, 2))(q, k, v)
    ref, ref_grads = reference_and_grads(q, k, v, w, True, None)
    assert_close(out, single, F, "out vs single device")
    assert_close(out, ref, F, "out vs reference")
    for name, g, s1, r in zip("qkv", grads, single_grads, ref_grads):
        assert_close(g, s1, F, f"d{name} vs single device")
        assert_close(g, r, F, f"d{name} vs reference")


@pytest.mark.parametrize("strategy", ["ring", "all_gather"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("causal,window", MASKS[1:])
def test_cp_masks_and_dtypes(strategy, dtype, causal, window):
    q, k, v, w = inputs(dtype, seed=6, place=False)
    run = cp_run(q, k, v, cp=3, reorder="striped", strategy=strategy, causal=causal,
                 window=window, use_config=True)
    out = jax.jit(run)(q, k, v)
    assert out.dtype == jnp.dtype(dtype)
    grads = jax.jit(jax.grad(loss_of(run, w), argnums=(0, 1, 2)))(q, k, v)
    ref, ref_grads = reference_and_grads(q, k, v, w, causal, window)
    assert_close(out, ref, dtype, "out")
    for name, g, r in zip("qkv", grads, ref_grads):
        assert g.dtype == jnp.dtype(dtype)
        assert_close(g, r, dtype, f"d{name}")


def test_context_parallel_attention_with_a_default_mesh():
    # jax.make_mesh gives explicit axes; the helper runs on them too.
    q, k, v, w = inputs(F, seed=7, place=False)
    mesh = jax.make_mesh((4,), ("cp",), devices=jax.devices(PLATFORM)[:4])
    seg = jnp.asarray(SEGMENTS)
    fn = functools.partial(rj.context_parallel_attention, segment_ids=SEGMENTS, mesh=mesh,
                           axis_name="cp", config={"context_parallel_load_balance": True,
                                                   "context_parallel_reorder_strategy": "striped",
                                                   "packing": True})
    out = fn(q, k, v)
    assert_close(out, rj.attention(q, k, v, seg), F, "out")
    grads = jax.grad(loss_of(fn, w), argnums=(0, 1, 2))(q, k, v)
    ref_grads = jax.grad(loss_of(lambda q, k, v: rj.attention(q, k, v, seg), w),
                         argnums=(0, 1, 2))(q, k, v)
    for name, g, r in zip("qkv", grads, ref_grads):
        assert_close(g, r, F, f"d{name}")


def test_shard_and_unshard_round_trip():
    p = rj.plan(SEGMENTS, cp_size=4, reorder="dual_chunk_swap")
    x = np.arange(B * S * 3).reshape(B, S, 3)
    shards = [rj.shard(x, p, rank=r) for r in range(4)]
    assert all(s.shape == (B, S // 4, 3) for s in shards)
    np.testing.assert_array_equal(rj.unshard(shards, p), x)
    np.testing.assert_array_equal(np.asarray(rj.unshard(rj.shard(jnp.asarray(x), p), p)), x)
    np.testing.assert_array_equal(np.concatenate(shards, axis=1), rj.shard(x, p))
    assert len(p.step_visible) == 4 and all(len(r) == 4 for r in p.step_visible)


# ---- configuration -------------------------------------------------------------------------


def test_resolve_config_names():
    from ringpack.config import resolve_config
    assert resolve_config(None) == {"strategy": "ring", "reorder": "auto", "packing": None}
    assert resolve_config({"context_parallel_strategy": "all_gather",
                           "context_parallel_reorder_strategy": "dual_chunk_swap",
                           "packing": False, "seq_len": 4096})["strategy"] == "all_gather"
    assert resolve_config({"context_parallel_load_balance": False})["reorder"] == "contiguous"
    assert resolve_config({"context_parallel_load_balance": False},
                          reorder="striped")["reorder"] == "striped"
    with pytest.raises(ValueError, match="conflicts"):
        resolve_config({"context_parallel_load_balance": False,
                        "context_parallel_reorder_strategy": "striped"})
    with pytest.raises(ValueError, match="context_parallel_strategy"):
        resolve_config({"context_parallel_strategy": "ulysses"})
    with pytest.raises(ValueError, match="unknown"):
        resolve_config({"context_parallel_reorder": "striped"})
    with pytest.raises(TypeError, match="packing"):
        resolve_config({"packing": "yes"})
    with pytest.raises(TypeError, match="config"):
        resolve_config(["ring"])


# ---- errors ----------------------------------------------------------------------------------


def test_errors_dtypes():
    q, k, v, _ = inputs(F)
    seg = jnp.asarray(SEGMENTS)
    with pytest.raises(TypeError, match="q has dtype int32"):
        rj.attention(q.astype(jnp.int32), k, v, seg)
    other = jnp.float16 if jnp.dtype(F) == jnp.bfloat16 else jnp.bfloat16
    with pytest.raises(TypeError, match="one dtype"):
        rj.attention(q, k.astype(other), v, seg)
    with pytest.raises(TypeError, match="q has dtype float64"):
        rj.attention(np.asarray(q, np.float64), k, v, seg)
    with pytest.raises(TypeError, match="segment_ids has dtype float32"):
        rj.attention(q, k, v, seg.astype(jnp.float32))
    with pytest.raises(TypeError, match="pass a jax array"):
        rj.attention([[1.0]], k, v, seg)


def test_errors_shapes_and_values():
    q, k, v, _ = inputs(F)
    seg = jnp.asarray(SEGMENTS)
    with pytest.raises(ValueError, match="segment_ids has shape"):
        rj.attention(q, k, v, seg[:, :-1])
    with pytest.raises(ValueError, match="positions has shape"):
        rj.attention(q, k, v, seg, seg[:1])
    with pytest.raises(ValueError, match="pass \\[batch, seq, heads, head_dim\\]"):
        rj.attention(q[0, 0], k[0, 0], v[0, 0], seg)
    with pytest.raises(ValueError, match="GQA"):
        rj.attention(q[:, :, :3], k, v, seg)
    with pytest.raises(ValueError, match="must match"):
        rj.attention(q, k[:, :-1], v[:, :-1], seg)
    with pytest.raises(ValueError, match="window"):
        rj.attention(q, k, v, seg, window=-1)
    with pytest.raises(ValueError, match="scale"):
        rj.attention(q, k, v, seg, scale=0.0)
    with pytest.raises(ValueError, match="not a mesh axis"):
        rj.ring_attention(q, k, v, seg, seg, axis_name="cp")
    with pytest.raises(ValueError, match="positions is None"):
        rj.ring_attention(q, k, v, seg, None, axis_name="cp")
    with pytest.raises(ValueError, match="cp_size"):
        rj.plan(SEGMENTS, cp_size=0)
    with pytest.raises(ValueError):  # 24 tokens do not split into 5 shards
        rj.plan(SEGMENTS, cp_size=5)
    p = rj.plan(SEGMENTS, cp_size=2)
    with pytest.raises(ValueError, match="tokens on axis 1"):
        rj.unshard(np.zeros((B, S - 2)), p)
    with pytest.raises(ValueError, match="shards for a plan"):
        rj.unshard([np.zeros((B, S // 2))], p)
    if len(jax.devices(PLATFORM)) >= 4:  # one GPU has no 4-device mesh
        with pytest.raises(ValueError, match="plan for 4"):
            rj.context_parallel_attention(q, k, v, SEGMENTS, mesh=cp_mesh(4), axis_name="cp",
                                          shard_plan=p)


def test_errors_unsupported_head_dim(monkeypatch):
    q, k, v, _ = inputs(F)
    monkeypatch.setattr(_native, "unsupported_reason",
                        lambda *args: "head_dim 16 is not supported; use 64 or 128")
    with pytest.raises(NotImplementedError, match="head_dim 16"):
        rj.attention(q, k, v, jnp.asarray(SEGMENTS))


def test_errors_build_without_ffi(monkeypatch):
    monkeypatch.setattr(rj, "_registered", False)
    monkeypatch.setattr(_native, "xla_ffi_targets", lambda: {})
    q, k, v, _ = inputs(F)
    with pytest.raises(RuntimeError, match="without jaxlib's XLA FFI headers"):
        rj.attention(q, k, v, jnp.asarray(SEGMENTS))


def test_ffi_handler_reports_bad_arguments_as_errors():
    # Below the Python checks: the handler itself answers with an XLA error, not a crash.
    q, k, v, _ = inputs(F)
    seg = jnp.asarray(SEGMENTS)
    out, lse = rj._empty_accumulators(q)
    with pytest.raises(Exception, match="segment_ids_k is int16"):
        jax.block_until_ready(rj._forward_step(q, k, v, seg, seg, seg.astype(jnp.int16), seg,
                                               out, lse, True, -1, 0.0))
    with pytest.raises(Exception, match="lse_acc has shape"):
        jax.block_until_ready(rj._forward_step(q, k, v, seg, seg, seg, seg, out, lse[:, :1],
                                               True, -1, 0.0))


def test_steps_update_the_accumulators_in_place():
    # input_output_aliases: XLA hands each step its accumulators as its outputs' buffers.
    q, k, v, _ = inputs(F)
    seg, pos = jnp.asarray(SEGMENTS), derived_positions()
    out, lse = rj._empty_accumulators(q)
    step = functools.partial(rj._forward_step, causal=True, window=-1, scale=0.0)
    hlo = jax.jit(step).lower(q, k, v, seg, pos, seg, pos, out, lse).as_text()
    assert "ringpack_forward_step" in hlo and "output_operand_aliases" in hlo
    new_out, _ = jax.jit(step, donate_argnums=(7, 8))(q, k, v, seg, pos, seg, pos, out, lse)
    ref = reference_attention(q, k, v, seg, pos)
    assert_close(new_out, ref, F, "out")


def test_ffi_targets_listed():
    targets = _native.xla_ffi_targets()
    assert set(targets) == {"ringpack_forward_step", "ringpack_backward_step",
                            "ringpack_forward_direct", "ringpack_compute_delta"}
    for platforms in targets.values():
        assert "cpu" in platforms
        assert ("CUDA" in platforms) == ringpack.cuda_built()


def test_ffi_handlers_reject_bad_buffers_with_an_error():
    """The direct forward and the delta handlers check what other callers pass: an XLA error
    naming the buffer, not a crash."""
    rj._ensure_registered()
    q = jnp.zeros((1, 8, 2, 16), jnp.float32)
    seg = jnp.ones((1, 8), jnp.int32)
    pos = jnp.arange(8, dtype=jnp.int32)[None]
    attrs = {"causal": True, "window": np.int64(-1), "scale": np.float32(0.25)}
    bad_lse = jax.ffi.ffi_call("ringpack_forward_direct",
                               (jax.ShapeDtypeStruct(q.shape, q.dtype),
                                jax.ShapeDtypeStruct((1, 2, 7), jnp.float32)))
    with pytest.raises(Exception, match=r"lse has shape \[1, 2, 7\]; expected \[1, 2, 8\]"):
        jax.block_until_ready(bad_lse(q, q, q, seg, pos, **attrs))
    delta = jax.ffi.ffi_call("ringpack_compute_delta", jax.ShapeDtypeStruct((1, 2, 8), jnp.float32))
    with pytest.raises(Exception, match="dout is bfloat16; pass it as float32"):
        jax.block_until_ready(delta(q.astype(jnp.bfloat16), q))
    # Well-formed (bf16, which every backend takes; CUDA has no fp32 kernels), the delta is
    # rowsum(dout * out) over head_dim, accumulated in fp32.
    dout = (jnp.arange(q.size, dtype=jnp.float32).reshape(q.shape) / q.size).astype(jnp.bfloat16)
    out = jnp.ones(q.shape, jnp.bfloat16)
    expected = np.swapaxes(np.asarray(dout, np.float64).sum(-1), 1, 2)
    np.testing.assert_allclose(np.asarray(delta(dout, out)), expected, rtol=1e-5)
