"""ringpack attention for JAX: the XLA FFI steps of ringpack._native with ``jax.custom_vjp``,
and context parallelism inside ``jax.shard_map`` (docs/python.md).

Layouts: ``[batch, seq, heads, head_dim]`` (BSHD) with segment ids ``[batch, seq]``, or the packed
THD form ``[tokens, heads, head_dim]`` with segment ids ``[tokens]``; GQA by head counts. Segment
id 0 marks padding (attends to nothing, seen by nothing); a query sees a key of its own segment
at a position no later than its own (causal), within ``window`` positions when given
(include/ringpack/mask.h).

Single device::

    out = ringpack.jax.attention(q, k, v, segment_ids)          # jit, grad and vmap work

Context parallelism, the way MaxText / TransformerEngine do it: reorder the batch for cp devices
with :func:`plan` and :func:`shard`, run :func:`ring_attention` inside ``jax.shard_map`` over the
mesh axis of the cp devices (each device holds its shard ``[B, S/cp, H, D]``), and put the
result back in order with :func:`unshard`. :func:`context_parallel_attention` does the three::

    p = ringpack.jax.plan(segment_ids, cp_size=4, num_heads_q=32, num_heads_kv=8, head_dim=128)
    mesh = jax.make_mesh((4,), ("cp",), axis_types=(jax.sharding.AxisType.Auto,))
    spec = jax.sharding.PartitionSpec(None, "cp")
    f = jax.shard_map(functools.partial(ringpack.jax.ring_attention, axis_name="cp"),
                      mesh=mesh, in_specs=(spec,) * 5, out_specs=spec)
    step = jax.jit(lambda q, k, v, seg, pos: ringpack.jax.unshard(
        f(*(ringpack.jax.shard(t, p) for t in (q, k, v, seg, pos))), p))
    out = step(q, k, v, p.segment_ids, p.positions)    # jax.grad works through it

(In a model the batch would be loaded already reordered: shard() once per batch on the host.)
The plan's step_visible table is informational here: a step whose blocks share no document
costs the kernel only its tile classification.

The ring: at step s each device runs the forward step kernel on the key/value block it holds,
merging into fp32 accumulators, while ``lax.ppermute`` already passes the block (K, V, its
segment ids and positions) to the next device, so XLA can overlap the transfer with the kernel.
The backward passes the blocks around again with their fp32 dK/dV accumulators, which return to
their owner after the last step; dQ stays local. ``strategy="all_gather"`` gathers K, V, segment
ids and positions once (``lax.all_gather``) and reduce-scatters dK/dV (``lax.psum_scatter``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from . import _native
from .config import resolve_config

__all__ = [
    "attention",
    "ring_attention",
    "context_parallel_attention",
    "plan",
    "shard",
    "unshard",
    "derive_positions",
    "ShardPlan",
]

_FORWARD = "ringpack_forward_step"
_BACKWARD = "ringpack_backward_step"
_FORWARD_DIRECT = "ringpack_forward_direct"
_DELTA = "ringpack_compute_delta"
_FLOAT_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))

# ---- FFI targets ---------------------------------------------------------------------------

_registered = False
_register_lock = threading.Lock()


def _ensure_registered() -> None:
    """Registers the XLA FFI targets of ringpack._native with jax, once."""
    global _registered
    if _registered:
        return
    with _register_lock:
        if _registered:
            return
        targets = _native.xla_ffi_targets()
        if not targets:
            raise RuntimeError(
                "ringpack was built without jaxlib's XLA FFI headers, so ringpack.jax has no "
                "kernels; rebuild it with jaxlib importable: pip install jaxlib && pip install "
                "--no-build-isolation --force-reinstall . (or a plain pip install ., whose build "
                "environment pins jaxlib)")
        for name, platforms in targets.items():
            for platform, capsule in platforms.items():
                jax.ffi.register_ffi_target(name, capsule, platform=platform)
        _registered = True


def _vma(x) -> frozenset:
    """The mesh axes x varies over inside shard_map (empty outside it)."""
    aval = jax.typeof(x)
    mat = getattr(aval, "mat", None)  # jax >= 0.10: the manual axis type
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", ()))


def _varying_alike(args: Sequence[Any]) -> list:
    """Casts every argument to vary over the union of their manual axes: an FFI call inside
    shard_map needs operands of one variance, and its results then vary alike."""
    union = frozenset().union(*(_vma(a) for a in args))
    if not union:
        return list(args)
    out = []
    for a in args:
        missing = tuple(sorted(union - _vma(a), key=str))
        out.append(lax.pcast(a, missing, to="varying") if missing else a)
    return out


def _result_type(x, shape=None, dtype=None):
    """The type of a result that varies like x: x's shape and dtype unless given (an accumulator
    the FFI call aliases keeps both), and x's variance inside shard_map."""
    shape = x.shape if shape is None else shape
    dtype = x.dtype if dtype is None else dtype
    if not _vma(x):
        return jax.ShapeDtypeStruct(shape, dtype)
    aval = jax.typeof(x)  # inside shard_map: keep the manual axes (jax >= 0.10 names them mat)
    sharding = aval.sharding
    if len(shape) != len(x.shape):  # a spec is per dimension: the same mesh, nothing split
        sharding = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    if hasattr(aval, "mat"):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding, manual_axis_type=aval.mat)
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding, vma=aval.vma)


def _attrs(causal: bool, window: int, scale: float) -> dict:
    return {"causal": bool(causal), "window": np.int64(window), "scale": np.float32(scale)}


def _forward_step(q, k, v, seg_q, pos_q, seg_k, pos_k, out_acc, lse_acc, causal, window, scale):
    """Merges softmax(q k^T) v of one key block into (out_acc [B,Sq,Hq,D], lse_acc [B,Hq,Sq])."""
    _ensure_registered()
    args = _varying_alike([q, k, v, seg_q, pos_q, seg_k, pos_k, out_acc, lse_acc])
    call = jax.ffi.ffi_call(_FORWARD, (_result_type(args[7]), _result_type(args[8])),
                            input_output_aliases={7: 0, 8: 1}, vmap_method="sequential")
    return call(*args, **_attrs(causal, window, scale))


def _backward_step(q, k, v, seg_q, pos_q, seg_k, pos_k, dout, lse, delta, dq_acc, dk_acc, dv_acc,
                   causal, window, scale):
    """Adds one key block's gradients to the fp32 accumulators (dq_acc, dk_acc, dv_acc)."""
    _ensure_registered()
    args = _varying_alike([q, k, v, seg_q, pos_q, seg_k, pos_k, dout, lse, delta, dq_acc, dk_acc,
                           dv_acc])
    call = jax.ffi.ffi_call(
        _BACKWARD, (_result_type(args[10]), _result_type(args[11]), _result_type(args[12])),
        input_output_aliases={10: 0, 11: 1, 12: 2}, vmap_method="sequential")
    return call(*args, **_attrs(causal, window, scale))


def _empty_accumulators(q):
    b, s, h, d = q.shape
    return jnp.zeros((b, s, h, d), jnp.float32), jnp.full((b, h, s), -jnp.inf, jnp.float32)


def _forward_direct(q, k, v, seg, pos, causal, window, scale):
    """The whole attention of one row: (out [B,S,Hq,D] in q's dtype, lse [B,Hq,S] fp32), written
    by the backend directly (no fp32 accumulators on CUDA)."""
    _ensure_registered()
    args = _varying_alike([q, k, v, seg, pos])
    b, s, h, _ = q.shape
    call = jax.ffi.ffi_call(
        _FORWARD_DIRECT, (_result_type(args[0]), _result_type(args[0], (b, h, s), jnp.float32)),
        vmap_method="sequential")
    return call(*args, **_attrs(causal, window, scale))


def _delta(dout, out):
    """rowsum(dout * out) in fp32, [B, Hq, S], by the backend (one pass)."""
    _ensure_registered()
    args = _varying_alike([dout, out])
    b, s, h, _ = out.shape
    call = jax.ffi.ffi_call(_DELTA, _result_type(args[1], (b, h, s), jnp.float32),
                            vmap_method="sequential")
    return call(*args)


# ---- argument checks -----------------------------------------------------------------------


def _platform_of(x) -> str:
    """"cpu" or "cuda": where x lives (a concrete array), where the shard_map it is traced in runs,
    or else where jit will run it (the default device, else the default backend)."""
    platform = None
    if isinstance(x, jax.Array):
        try:
            platform = next(iter(x.devices())).platform
        except Exception:  # noqa: BLE001 - a tracer has no devices
            platform = None
    if platform is None:
        mesh = getattr(getattr(jax.typeof(x), "sharding", None), "mesh", None)
        platform = getattr(getattr(mesh, "abstract_device", None), "platform", None)
    if platform is None:
        default = getattr(jax.config, "jax_default_device", None)
        platform = getattr(default, "platform", default) if default is not None else None
    if platform is None:
        platform = jax.default_backend()
    if platform == "cpu":
        return "cpu"
    if platform in ("gpu", "cuda"):
        return "cuda"
    raise ValueError(f"q is on a {platform} device; ringpack.jax runs on CPU and CUDA devices "
                     "(use jax.device_put to move the arrays)")


def _check_supported(q, backward: bool) -> None:
    platform = _platform_of(q)
    dtype = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[jnp.dtype(q.dtype).name]
    reason = _native.unsupported_reason(platform, 0, dtype, int(q.shape[-1]), backward)
    if reason is not None:
        raise NotImplementedError(
            f"head_dim {q.shape[-1]} with {jnp.dtype(q.dtype).name} on {platform}"
            f"{' (backward)' if backward else ''}: {reason}")


def _check_float(name: str, x) -> None:
    dtype = getattr(x, "dtype", None)
    if dtype is None or not hasattr(x, "shape"):
        raise TypeError(f"{name} is a {type(x).__name__}; pass a jax array")
    if jnp.dtype(dtype) not in _FLOAT_DTYPES:
        raise TypeError(f"{name} has dtype {jnp.dtype(dtype).name}; pass float32, bfloat16 or "
                        f"float16 (e.g. {name}.astype(jnp.bfloat16))")


def _as_int32(name: str, x, shape: tuple) -> jax.Array:
    dtype = getattr(x, "dtype", None)
    if dtype is None or not hasattr(x, "shape"):
        raise TypeError(f"{name} is a {type(x).__name__}; pass an integer jax or numpy array")
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"{name} has dtype {jnp.dtype(dtype).name}; pass integers "
                        f"(e.g. {name}.astype(jnp.int32))")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(x.shape)}; pass {tuple(shape)} to match q")
    return jnp.asarray(x).astype(jnp.int32)


def _mask_args(window, scale) -> tuple[int, float]:
    if window is None:
        w = -1
    else:
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 0:
            raise ValueError(f"window = {window!r}; pass None (no window) or an int >= 0")
        w = int(window)
    if scale is None:
        s = 0.0
    else:
        if not isinstance(scale, (int, float, np.floating, np.integer)) or not scale > 0 \
                or not math.isfinite(float(scale)):
            raise ValueError(f"scale = {scale!r}; pass None (1/sqrt(head_dim)) or a float > 0")
        s = float(scale)
    return w, s


def _check_qkv(q, k, v) -> bool:
    """Checks dtypes and shapes of q, k, v; returns whether they are THD ([T, H, D])."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_float(name, x)
    if jnp.dtype(k.dtype) != jnp.dtype(q.dtype) or jnp.dtype(v.dtype) != jnp.dtype(q.dtype):
        names = ", ".join(jnp.dtype(x.dtype).name for x in (q, k, v))
        raise TypeError(f"q, k, v have dtypes {names}; pass them in one dtype")
    if q.ndim not in (3, 4):
        raise ValueError(f"q has shape {tuple(q.shape)}; pass [batch, seq, heads, head_dim] or "
                         "[tokens, heads, head_dim]")
    if k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(f"q, k, v have shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}; pass them in one layout (BSHD or THD)")
    thd = q.ndim == 3
    lead = q.shape[:-2]
    if k.shape[:-2] != lead or v.shape != k.shape or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"q, k, v have shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}; k and v must match each other and q's "
                         f"{'tokens' if thd else 'batch, seq'} and head_dim (self-attention)")
    hq, hkv = q.shape[-2], k.shape[-2]
    if hkv < 1 or hq % hkv != 0:
        raise ValueError(f"q has {hq} heads and k {hkv}; the query heads must be a multiple of "
                         "the key/value heads (GQA)")
    if q.shape[-1] < 1:
        raise ValueError(f"head_dim is {q.shape[-1]}; pass head_dim >= 1")
    return thd


def derive_positions(segment_ids) -> jax.Array:
    """Positions 0, 1, 2, ... within each contiguous run of a segment id along the last axis;
    padding (segment id 0) gets 0. Traceable (works under jit)."""
    seg = jnp.asarray(segment_ids)
    n = seg.shape[-1]
    idx = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), seg.shape)
    if n == 0:
        return idx
    first = jnp.ones(seg.shape[:-1] + (1,), bool)
    starts = jnp.concatenate([first, seg[..., 1:] != seg[..., :-1]], axis=-1)
    run_start = lax.cummax(jnp.where(starts, idx, 0), axis=seg.ndim - 1)
    return jnp.where(seg == 0, 0, idx - run_start).astype(jnp.int32)


# ---- the single-device op ------------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _attention(q, k, v, seg, pos, causal, window, scale):
    return _attention_fwd(q, k, v, seg, pos, causal, window, scale)[0]


def _attention_fwd(q, k, v, seg, pos, causal, window, scale):
    out, lse = _forward_direct(q, k, v, seg, pos, causal, window, scale)
    return out, (q, k, v, seg, pos, out, lse)


def _attention_bwd(causal, window, scale, residuals, dout):
    q, k, v, seg, pos, out, lse = residuals
    _check_supported(q, backward=True)
    dout = dout.astype(q.dtype)
    delta = _delta(dout, out)
    dq, dk, dv = (jnp.zeros(x.shape, jnp.float32) for x in (q, k, v))
    dq, dk, dv = _backward_step(q, k, v, seg, pos, seg, pos, dout, lse, delta, dq, dk, dv, causal,
                                window, scale)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None


_attention.defvjp(_attention_fwd, _attention_bwd)


def attention(q, k, v, segment_ids, positions=None, *, causal: bool = True,
              window: Optional[int] = None, scale: Optional[float] = None,
              config: Optional[Mapping[str, Any]] = None, axis_name: Optional[str] = None):
    """Exact attention over packed sequences: softmax(scale q k^T + mask) v.

    q [B, S, Hq, D], k and v [B, S, Hkv, D] (float32, bfloat16 or float16; Hq a multiple of Hkv),
    segment_ids [B, S] (0 = padding), positions [B, S] (None: 0, 1, 2, ... per contiguous run
    of a segment id); or the THD form q [T, Hq, D], segment_ids [T]. causal: keys at positions
    up to the query's; window: also at most `window` positions away; scale: None =
    1/sqrt(D). Returns [B, S, Hq, D] (or [T, Hq, D]) in q's dtype; differentiable.

    With ``axis_name`` (inside ``jax.shard_map``, arrays being this device's shard of a batch
    reordered by :func:`shard`, positions required) it runs :func:`ring_attention` with the
    strategy of ``config`` (the CLI's YAML names, e.g. ``{"context_parallel_strategy":
    "all_gather"}``; ringpack.config).
    """
    thd = _check_qkv(q, k, v)
    settings = resolve_config(config)
    if axis_name is not None:
        if thd:
            raise ValueError("the THD layout has no batch axis to shard; pass [batch, seq, heads, "
                             "head_dim] (e.g. q[None]) with axis_name")
        return ring_attention(q, k, v, segment_ids, positions, axis_name=axis_name, causal=causal,
                              window=window, scale=scale, strategy=settings["strategy"])
    seq_shape = q.shape[:-2]
    seg = _as_int32("segment_ids", segment_ids, seq_shape)
    pos = derive_positions(seg) if positions is None else _as_int32("positions", positions,
                                                                     seq_shape)
    w, s = _mask_args(window, scale)
    _check_supported(q, backward=False)
    if thd:
        out = _attention(q[None], k[None], v[None], seg[None], pos[None], bool(causal), w, s)
        return out[0]
    return _attention(q, k, v, seg, pos, bool(causal), w, s)


# ---- context parallelism inside shard_map --------------------------------------------------


def _axis_size(axis_name) -> int:
    try:
        return int(lax.axis_size(axis_name))
    except (NameError, KeyError, ValueError) as e:
        raise ValueError(f"axis_name {axis_name!r} is not a mesh axis here: call ring_attention "
                         "inside jax.shard_map over a mesh with that axis") from e


def _ring_perm(cp: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % cp) for i in range(cp)]


def _cp_forward(q, k, v, seg, pos, axis_name, strategy, causal, window, scale):
    cp = _axis_size(axis_name)
    out, lse = _empty_accumulators(q)
    if strategy == "all_gather":
        gather = functools.partial(lax.all_gather, axis_name=axis_name, axis=1, tiled=True)
        k_all, v_all, seg_all, pos_all = (gather(x) for x in (k, v, seg, pos))
        return _forward_step(q, k_all, v_all, seg, pos, seg_all, pos_all, out, lse, causal,
                             window, scale)
    # ring: at step s this device holds the block of device (rank - s) mod cp.
    block = (k, v, seg, pos)
    for step in range(cp):
        # Issue the transfer of the next step before this step's kernel: they do not depend
        # on each other, so XLA's scheduler can overlap them.
        following = lax.ppermute(block, axis_name, _ring_perm(cp)) if step + 1 < cp else None
        bk, bv, bseg, bpos = block
        out, lse = _forward_step(q, bk, bv, seg, pos, bseg, bpos, out, lse, causal, window, scale)
        block = following
    return out, lse


def _cp_backward(q, k, v, seg, pos, out, lse, dout, axis_name, strategy, causal, window, scale):
    cp = _axis_size(axis_name)
    delta = _delta(dout, out)
    dq = jnp.zeros(q.shape, jnp.float32)
    if strategy == "all_gather":
        gather = functools.partial(lax.all_gather, axis_name=axis_name, axis=1, tiled=True)
        k_all, v_all, seg_all, pos_all = (gather(x) for x in (k, v, seg, pos))
        dk_all = jnp.zeros(k_all.shape, jnp.float32)
        dv_all = jnp.zeros(v_all.shape, jnp.float32)
        dq, dk_all, dv_all = _backward_step(q, k_all, v_all, seg, pos, seg_all, pos_all, dout, lse,
                                            delta, dq, dk_all, dv_all, causal, window, scale)
        scatter = functools.partial(lax.psum_scatter, axis_name=axis_name, scatter_dimension=1,
                                    tiled=True)
        return dq, scatter(dk_all), scatter(dv_all)
    # ring: the block of device (rank - s) travels with its fp32 dK/dV accumulators; after the
    # last step one more hop brings each block's gradients home.
    block = (k, v, seg, pos)
    dk = jnp.zeros(k.shape, jnp.float32)
    dv = jnp.zeros(v.shape, jnp.float32)
    perm = _ring_perm(cp)
    for step in range(cp):
        following = lax.ppermute(block, axis_name, perm) if step + 1 < cp else None
        bk, bv, bseg, bpos = block
        dq, dk, dv = _backward_step(q, bk, bv, seg, pos, bseg, bpos, dout, lse, delta, dq, dk, dv,
                                    causal, window, scale)
        if cp > 1:
            dk, dv = lax.ppermute((dk, dv), axis_name, perm)
        block = following
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8, 9))
def _cp_attention(q, k, v, seg, pos, axis_name, strategy, causal, window, scale):
    return _cp_attention_fwd(q, k, v, seg, pos, axis_name, strategy, causal, window, scale)[0]


def _cp_attention_fwd(q, k, v, seg, pos, axis_name, strategy, causal, window, scale):
    out_acc, lse = _cp_forward(q, k, v, seg, pos, axis_name, strategy, causal, window, scale)
    out = out_acc.astype(q.dtype)
    return out, (q, k, v, seg, pos, out, lse)


def _cp_attention_bwd(axis_name, strategy, causal, window, scale, residuals, dout):
    q, k, v, seg, pos, out, lse = residuals
    _check_supported(q, backward=True)
    dq, dk, dv = _cp_backward(q, k, v, seg, pos, out, lse, dout.astype(q.dtype), axis_name,
                              strategy, causal, window, scale)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None


_cp_attention.defvjp(_cp_attention_fwd, _cp_attention_bwd)


def ring_attention(q, k, v, segment_ids, positions, *, axis_name, causal: bool = True,
                   window: Optional[int] = None, scale: Optional[float] = None,
                   strategy: str = "ring"):
    """Context-parallel attention; call it inside ``jax.shard_map`` over the mesh axis
    ``axis_name`` of the cp devices.

    Each device passes its shard of a batch reordered by :func:`shard`: q [B, n, Hq, D], k and v
    [B, n, Hkv, D], segment_ids and positions [B, n] (the plan's positions, sharded like the
    rest: positions cannot be derived from a shard). Returns this device's output [B, n, Hq, D];
    differentiable. strategy: "ring" (pass K/V around with ppermute) or "all_gather".
    """
    if _check_qkv(q, k, v):
        raise ValueError(f"q has shape {tuple(q.shape)}; ring_attention takes [batch, seq, heads, "
                         "head_dim] shards (add a batch axis: q[None])")
    if positions is None:
        raise ValueError("positions is None; pass the plan's positions sharded like the rest "
                         "(shard(plan.positions, plan)): a shard cannot derive them")
    settings = resolve_config(None, strategy=strategy)
    seg = _as_int32("segment_ids", segment_ids, q.shape[:2])
    pos = _as_int32("positions", positions, q.shape[:2])
    w, s = _mask_args(window, scale)
    _axis_size(axis_name)
    _check_supported(q, backward=False)
    return _cp_attention(q, k, v, seg, pos, axis_name, settings["strategy"], bool(causal), w, s)


# ---- the reorder plan: shard and unshard a batch ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """How a batch [B, S] is reordered and split for cp devices (ringpack.torch's ShardPlan).

    index[i] is the original token at reordered slot i; device r holds slots
    [r*S/cp, (r+1)*S/cp). positions are the batch's positions in original order; segment_ids
    the batch's ids. step_visible[r][s]: whether a query of device r sees any key of device s.
    """
    cp_size: int
    label: str
    explanation: str
    strategy: str
    index: np.ndarray
    inverse: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    step_visible: tuple

    @property
    def shard_len(self) -> int:
        return len(self.index) // self.cp_size


def plan(segment_ids, positions=None, *, cp_size: int, reorder: Optional[str] = None,
         strategy: Optional[str] = None, causal: bool = True, window: Optional[int] = None,
         num_heads_q: int = 32, num_heads_kv: int = 8, head_dim: int = 128,
         dtype: Any = jnp.bfloat16, config: Optional[Mapping[str, Any]] = None) -> ShardPlan:
    """The reorder of a batch of segment ids [B, S] (or [S]) for cp_size devices, as the CLI picks
    it: reorder "auto" (default) chooses with the cost model; or contiguous, dual_chunk_swap,
    striped, "striped:64". config takes the CLI's YAML names (ringpack.config). The segment ids
    (and positions) must be concrete arrays: the plan is computed on the host."""
    if not isinstance(cp_size, (int, np.integer)) or isinstance(cp_size, bool) or cp_size < 1:
        raise ValueError(f"cp_size = {cp_size!r}; pass an int >= 1")
    settings = resolve_config(config, strategy=strategy, reorder=reorder)
    try:
        seg = np.asarray(segment_ids)
        pos = None if positions is None else np.asarray(positions)
    except jax.errors.TracerArrayConversionError as e:
        raise ValueError("plan() reads the segment ids on the host; call it outside jit with "
                         "concrete arrays") from e
    if not np.issubdtype(seg.dtype, np.integer):
        raise TypeError(f"segment_ids has dtype {seg.dtype}; pass integers")
    if seg.ndim == 1:
        seg = seg[None]
        pos = None if pos is None else pos[None]
    if seg.ndim != 2:
        raise ValueError(f"segment_ids has shape {seg.shape}; pass [batch, seq] or [seq]")
    if pos is not None and (pos.shape != seg.shape or not np.issubdtype(pos.dtype, np.integer)):
        raise ValueError(f"positions has shape {pos.shape} and dtype {pos.dtype}; pass integers "
                         f"of segment_ids' shape {seg.shape}")
    # Writable copies: the native call takes writable arrays, and jax's host views are read-only.
    seg = np.array(seg, dtype=np.int32, order="C", copy=True)
    pos = None if pos is None else np.array(pos, dtype=np.int32, order="C", copy=True)
    w, _ = _mask_args(window, None)
    index, label, explanation, full_positions, visible = _native.plan_reorder(
        seg, pos, int(cp_size), settings["reorder"], settings["strategy"], bool(causal), w,
        int(num_heads_q), int(num_heads_kv), int(head_dim), jnp.dtype(dtype).itemsize)
    index = np.asarray(index, np.int32)
    inverse = np.empty_like(index)
    inverse[index] = np.arange(index.size, dtype=np.int32)
    return ShardPlan(int(cp_size), label, explanation, settings["strategy"], index, inverse, seg,
                     np.asarray(full_positions, np.int32), tuple(tuple(r) for r in visible))


def _unsplit(x, axis):
    """x with `axis` not split over a mesh axis of explicit sharding (a gather along a split
    axis has no unambiguous output sharding there); other arrays unchanged."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    spec = tuple(getattr(sharding, "spec", None) or ())
    if axis >= len(spec) or spec[axis] is None:
        return x
    spec = tuple(None if i == axis else a for i, a in enumerate(spec))
    spec = jax.sharding.PartitionSpec(*spec)
    return jax.reshard(x, jax.sharding.NamedSharding(sharding.mesh, spec))


def _take(x, index, axis):
    if isinstance(x, np.ndarray):
        return np.take(x, index, axis=axis)
    x = _unsplit(jnp.asarray(x), axis % x.ndim)
    return jnp.take(x, jnp.asarray(index), axis=axis)


def shard(x, plan: ShardPlan, rank: Optional[int] = None, axis: int = 1):
    """x reordered along `axis` (the sequence axis: 1 for [B, S, ...]) for the plan's devices:
    the whole reordered array (rank None; shard_map with PartitionSpec(None, axis_name) gives
    device r its slice) or device `rank`'s shard."""
    if x.shape[axis] != len(plan.index):
        raise ValueError(f"x has {x.shape[axis]} tokens on axis {axis} but the plan "
                         f"{len(plan.index)}; pass the batch the plan was made for (and the "
                         "sequence axis)")
    if rank is None:
        return _take(x, plan.index, axis)
    if not 0 <= rank < plan.cp_size:
        raise ValueError(f"rank {rank}: pass a rank in [0, {plan.cp_size})")
    n = plan.shard_len
    return _take(x, plan.index[rank * n:(rank + 1) * n], axis)


def unshard(x, plan: ShardPlan, axis: int = 1):
    """The original order from the reordered array (shard_map's output with
    out_specs=PartitionSpec(None, axis_name)) or from the list of every device's shard."""
    if isinstance(x, (list, tuple)):
        if len(x) != plan.cp_size:
            raise ValueError(f"{len(x)} shards for a plan of cp_size {plan.cp_size}; pass one "
                             "per device")
        x = (np.concatenate if all(isinstance(t, np.ndarray) for t in x) else jnp.concatenate)(
            list(x), axis=axis)
    if x.shape[axis] != len(plan.index):
        raise ValueError(f"x has {x.shape[axis]} tokens on axis {axis} but the plan "
                         f"{len(plan.index)}; pass the whole reordered batch (or the list of "
                         "shards)")
    return _take(x, plan.inverse, axis)


def context_parallel_attention(q, k, v, segment_ids, positions=None, *, mesh, axis_name: str,
                               causal: bool = True, window: Optional[int] = None,
                               scale: Optional[float] = None,
                               config: Optional[Mapping[str, Any]] = None,
                               reorder: Optional[str] = None, strategy: Optional[str] = None,
                               shard_plan: Optional[ShardPlan] = None):
    """attention() of a whole batch [B, S, H, D] over the devices of ``mesh``'s axis
    ``axis_name``: plans the reorder (or takes ``shard_plan``), shards, runs ring_attention
    in shard_map and restores the original order. segment_ids/positions must be concrete."""
    thd = _check_qkv(q, k, v)
    if thd:
        raise ValueError(f"q has shape {tuple(q.shape)}; pass [batch, seq, heads, head_dim]")
    if axis_name not in mesh.axis_names:
        raise ValueError(f"axis_name {axis_name!r} is not an axis of the mesh {mesh.axis_names}")
    cp = int(mesh.shape[axis_name])
    if shard_plan is None:
        shard_plan = plan(segment_ids, positions, cp_size=cp, reorder=reorder, strategy=strategy,
                          causal=causal, window=window, num_heads_q=q.shape[2],
                          num_heads_kv=k.shape[2], head_dim=q.shape[3], dtype=q.dtype,
                          config=config)
    elif shard_plan.cp_size != cp:
        raise ValueError(f"the plan is for cp_size {shard_plan.cp_size} but the mesh axis "
                         f"{axis_name!r} has {cp} devices; plan for {cp}")
    if tuple(np.shape(segment_ids)) != tuple(q.shape[:2]):
        raise ValueError(f"segment_ids has shape {tuple(np.shape(segment_ids))}; pass "
                         f"{tuple(q.shape[:2])} to match q")
    settings = resolve_config(config, strategy=strategy)
    spec = jax.sharding.PartitionSpec(None, axis_name)
    body = functools.partial(ring_attention, axis_name=axis_name, causal=causal, window=window,
                             scale=scale, strategy=settings["strategy"])
    # The mesh with Auto axes: the reorders gather along the split sequence axis, which explicit
    # axes (jax.make_mesh's default) would ask a mesh context for.
    mesh = jax.sharding.Mesh(mesh.devices, mesh.axis_names,
                             axis_types=(jax.sharding.AxisType.Auto,) * len(mesh.axis_names))
    mapped = jax.shard_map(body, mesh=mesh, in_specs=(spec,) * 5, out_specs=spec)
    inputs = [shard(t, shard_plan) for t in (q, k, v)]
    inputs += [jnp.asarray(shard(shard_plan.segment_ids, shard_plan)),
               jnp.asarray(shard(shard_plan.positions, shard_plan))]
    # Lay the reordered inputs out along the mesh axis (needed for meshes of explicit axes).
    sharding = jax.sharding.NamedSharding(mesh, spec)
    inputs = [jax.device_put(t, sharding) for t in inputs]
    return unshard(mapped(*inputs), shard_plan)
