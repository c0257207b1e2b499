"""ringpack attention for PyTorch (docs/python.md).

``attention(q, k, v, segment_ids, positions=None, ...)`` computes exact attention over packed
rows: query i sees key j when both belong to the same document (equal, non-zero segment id) and,
when causal, ``positions[j] <= positions[i]`` (and within ``window`` when given). Layouts:
``[batch, seq, heads, head_dim]`` with ``segment_ids`` ``[batch, seq]``, or the packed THD form
``[tokens, heads, head_dim]`` with ``segment_ids`` ``[tokens]``; GQA by head counts.

It is a ``torch.library`` custom op (``ringpack::attention_fwd`` / ``ringpack::attention_bwd``)
with autograd and fake implementations, so it works under ``torch.compile`` and CUDA graphs; it
runs on the caller's current CUDA stream, or on CPU tensors through the CPU backend.

With ``cp_group`` (a ``torch.distributed`` group) every rank passes its own shard of a row that
``plan(...)`` reordered and ``shard(...)`` cut, and ringpack's CP schedule runs over the group:
on CUDA tensors over ringpack's own NCCL communicator (its unique id is broadcast over the group
once and the communicator is cached per group, device and stream), on CPU tensors over the
group's own transport (e.g. gloo). ``unshard(...)`` restores the original order.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Optional, Sequence

import torch
import torch.distributed as dist

from . import _native
from .config import resolve_config


def _unbind_world_defaults():
    """torch.distributed.nn.functional binds `group.WORLD` as a default argument when it is
    imported, and torch imports it on the first call of any custom op. Imported after
    init_process_group, it keeps the default group alive past destroy_process_group, and a gloo
    group torn down during interpreter exit aborts the process ("terminate called without an
    active exception"). Importing it before any group exists binds None, which its functions
    read as the default group at call time; when the group exists already (ringpack.torch
    imported after init_process_group), the defaults that hold it are set back to that None."""
    import torch.distributed.nn.functional as functional

    world = dist.group.WORLD if dist.is_initialized() else None
    if world is None:
        return
    for fn in vars(functional).values():
        defaults = getattr(fn, "__defaults__", None)
        if getattr(fn, "__module__", None) == functional.__name__ and defaults:
            fn.__defaults__ = tuple(None if d is world else d for d in defaults)


if dist.is_available():
    _unbind_world_defaults()

__all__ = ["attention", "plan", "shard", "unshard", "ShardPlan", "derive_positions"]

_ATTENTION_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_DEFAULT_TIMEOUT_SECONDS = 300.0


# ---- argument checks (one-line errors naming the value and the fix) -------------------------


def _check_inputs(q, k, v, segment_ids, positions):
    for name, t in (("q", q), ("k", k), ("v", v), ("segment_ids", segment_ids)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} is a {type(t).__name__}; pass a torch.Tensor")
    if q.dtype not in _ATTENTION_DTYPES:
        raise TypeError(f"q has dtype {q.dtype}; pass float32, bfloat16 or float16")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}; pass one dtype")
    if q.dim() not in (3, 4):
        raise ValueError(
            f"q has shape {tuple(q.shape)}; pass [batch, seq, heads, head_dim] or the packed "
            "[tokens, heads, head_dim]")
    for name, t in (("k", k), ("v", v)):
        if t.dim() != q.dim():
            raise ValueError(f"{name} has shape {tuple(t.shape)} but q has {tuple(q.shape)}; "
                             "pass q, k and v in one layout")
    if k.shape != v.shape:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; they must match")
    if k.shape[:-2] != q.shape[:-2] or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k has shape {tuple(k.shape)} and q {tuple(q.shape)}: they must agree "
                         "in every dimension but the heads")
    heads_q, heads_kv = q.shape[-2], k.shape[-2]
    if heads_kv < 1 or heads_q % heads_kv != 0:
        raise ValueError(f"q has {heads_q} heads and k {heads_kv}; the query heads must be a "
                         "multiple of the key/value heads (GQA)")
    tokens_shape = q.shape[:-2]
    for name, t in (("segment_ids", segment_ids), ("positions", positions)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} is a {type(t).__name__}; pass a torch.Tensor")
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise TypeError(f"{name} has dtype {t.dtype}; pass integers (int32 or int64)")
        if t.shape != tokens_shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {tuple(tokens_shape)} "
                             f"(the token dimensions of q {tuple(q.shape)})")
    for name, t in (("k", k), ("v", v), ("segment_ids", segment_ids), ("positions", positions)):
        if t is not None and t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put every tensor "
                             "on one device")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q is on {q.device}; ringpack runs on cpu and cuda tensors")


def _check_supported(q, backward: bool):
    device = q.device
    reason = _native.unsupported_reason(device.type, device.index or 0,
                                        str(q.dtype).removeprefix("torch."), q.shape[-1],
                                        backward)
    if reason is not None:
        raise NotImplementedError(reason)


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def derive_positions(segment_ids: torch.Tensor) -> torch.Tensor:
    """Positions 0, 1, 2, ... within each run of equal segment ids along the last dimension."""
    seq = segment_ids.shape[-1]
    index = torch.arange(seq, device=segment_ids.device).expand(segment_ids.shape)
    starts = torch.ones(segment_ids.shape, dtype=torch.bool, device=segment_ids.device)
    starts[..., 1:] = segment_ids[..., 1:] != segment_ids[..., :-1]
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(-1).values
    return (index - first).to(torch.int32)


# ---- the single-device op --------------------------------------------------------------------


@torch.library.custom_op("ringpack::attention_fwd", mutates_args=())
def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segment_ids: torch.Tensor,
                   positions: torch.Tensor, causal: bool, window: int,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    _check_supported(q, backward=False)
    batch, seq, heads, _ = q.shape
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, seq), dtype=torch.float32, device=q.device)
    _native.forward_direct(q, k, v, segment_ids, positions, out, lse, causal, window, scale,
                           _stream(q))
    return out, lse


@_attention_fwd.register_fake
def _(q, k, v, segment_ids, positions, causal, window, scale):
    batch, seq, heads, _ = q.shape
    return torch.empty_like(q), q.new_empty((batch, heads, seq), dtype=torch.float32)


@torch.library.custom_op("ringpack::attention_bwd", mutates_args=())
def _attention_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segment_ids: torch.Tensor,
                   positions: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                   dout: torch.Tensor, causal: bool, window: int, scale: float,
                   deterministic: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_supported(q, backward=True)
    batch, seq, heads, _ = q.shape
    delta = torch.empty((batch, heads, seq), dtype=torch.float32, device=q.device)
    _native.compute_delta(dout, out, delta, _stream(q))
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
    dv = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
    _native.backward_step(q, k, v, segment_ids, positions, segment_ids, positions, dout, lse,
                          delta, dq, dk, dv, causal, window, scale, _stream(q),
                          deterministic=deterministic)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


@_attention_bwd.register_fake
def _(q, k, v, segment_ids, positions, out, lse, dout, causal, window, scale, deterministic):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _fwd_setup(ctx, inputs, output):
    q, k, v, segment_ids, positions, causal, window, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, segment_ids, positions, out, lse)
    ctx.mask = (causal, window, scale)
    ctx.mark_non_differentiable(lse)


def _fwd_backward(ctx, dout, _dlse):
    q, k, v, segment_ids, positions, out, lse = ctx.saved_tensors
    causal, window, scale = ctx.mask
    dq, dk, dv = torch.ops.ringpack.attention_bwd(q, k, v, segment_ids, positions, out, lse,
                                                  dout.contiguous(), causal, window, scale,
                                                  torch.are_deterministic_algorithms_enabled())
    return dq, dk, dv, None, None, None, None, None


_attention_fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup)


# ---- the CP op -------------------------------------------------------------------------------

class _GroupState:
    """What the CP op keeps for one torch.distributed group: a weak reference to the group, the
    native CP groups per (device, stream) and the call signatures every rank agreed on.

    The reference is weak so that destroy_process_group really destroys the group: a gloo group
    kept alive past it is torn down during interpreter exit, where its worker threads abort the
    process ("terminate called without an active exception"). When the group dies, its entry
    and native communicators go with it."""

    def __init__(self, group, name: str):
        self.group_ref = weakref.ref(group, lambda _: self._forget(name))
        self.native: dict[tuple, object] = {}  # (device, stream) -> _native.CpGroup
        self.agreed: set = set()

    def _forget(self, name: str):
        if _GROUPS.get(name) is self:
            del _GROUPS[name]


_GROUPS: dict[str, _GroupState] = {}  # group name -> state, for the ops' string argument


def _register_group(group) -> str:
    """The name the ops carry for `group`; a new group under a reused name (torch reuses names
    after destroy_process_group) starts with empty caches."""
    name = group.group_name
    state = _GROUPS.get(name)
    if state is None or state.group_ref() is not group:
        _GROUPS[name] = _GroupState(group, name)
    return name


def _group_state(group_name: str):
    """(state, live group) for a registered name; RuntimeError once the group was destroyed."""
    state = _GROUPS.get(group_name)
    group = None if state is None else state.group_ref()
    if group is None:
        _GROUPS.pop(group_name, None)
        raise RuntimeError(f"the CP group {group_name!r} was destroyed; pass a live "
                           "torch.distributed group as cp_group")
    return state, group


def _check_ranks_agree(group_name: str, signature: tuple):
    """Every rank must call the CP op with the same shard shapes, dtype, mask and strategy (a
    mismatch would make the schedules exchange blocks of different sizes). Checked once per
    signature with one all_gather_object over the group; ValueError on every rank otherwise."""
    state, group = _group_state(group_name)
    if signature in state.agreed:
        return
    seen = [None] * dist.get_world_size(group)
    dist.all_gather_object(seen, signature, group=group)
    for rank, other in enumerate(seen):
        if other != signature:
            raise ValueError(f"CP rank {rank} called with {other} but rank "
                             f"{dist.get_rank(group)} with {signature} (shard shapes, dtype, "
                             "causal, window, scale, strategy); every rank must pass its shard "
                             "of the same plan")
    state.agreed.add(signature)


class _TorchTransport:
    """Host transfers of the CP schedules over a torch.distributed group (CPU tensors, e.g. gloo).

    The schedules pass numpy views of their buffers (valid until the request is waited for).
    It holds the group weakly, like _GroupState."""

    def __init__(self, group):
        self._group_ref = weakref.ref(group)
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    @property
    def group(self):
        group = self._group_ref()
        if group is None:
            raise RuntimeError("the CP group was destroyed during a CP call")
        return group

    def _global(self, peer: int) -> int:
        return dist.get_global_rank(self.group, peer)

    def isend(self, buf, peer):
        return dist.isend(torch.from_numpy(buf), dst=self._global(peer), group=self.group)

    def irecv(self, buf, peer):
        return dist.irecv(torch.from_numpy(buf), src=self._global(peer), group=self.group)

    def all_gather(self, send, recv):
        dist.all_gather(list(torch.from_numpy(recv).chunk(self.size)), torch.from_numpy(send),
                        group=self.group)

    def reduce_scatter_sum(self, send, recv):
        # gloo has no reduce_scatter: reduce everything, keep this rank's slice.
        total = torch.from_numpy(send).clone()
        dist.all_reduce(total, group=self.group)
        torch.from_numpy(recv).copy_(total.view(self.size, -1)[self.rank])

    def barrier(self):
        dist.barrier(group=self.group)


def _cp_state(group_name: str, device: torch.device, stream: int):
    state, group = _group_state(group_name)
    key = (str(device), stream)
    native = state.native.get(key)
    if native is not None:
        return native
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if device.type == "cuda":
        if not _native.nccl_available():
            raise RuntimeError("cp_group on CUDA tensors needs ringpack built with NCCL; rebuild "
                               "with the CUDA toolkit's NCCL present")
        unique_id = [_native.nccl_unique_id() if rank == 0 else None]
        dist.broadcast_object_list(unique_id, src=dist.get_global_rank(group, 0), group=group,
                                   device=device if dist.get_backend(group) == "nccl" else None)
        native = _native.nccl_group(unique_id[0], rank, size, device.index or 0, stream,
                                    _DEFAULT_TIMEOUT_SECONDS)
    else:
        native = _native.python_group(rank, size, _TorchTransport(group),
                                      _DEFAULT_TIMEOUT_SECONDS, torch.get_num_threads())
    state.native[key] = native
    return native


@torch.library.custom_op("ringpack::cp_attention_fwd", mutates_args=())
def _cp_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      segment_ids: torch.Tensor, positions: torch.Tensor, causal: bool,
                      window: int, scale: float, group_name: str, strategy: str,
                      step_visible: list[bool]) -> tuple[torch.Tensor, torch.Tensor]:
    batch, seq, heads, _ = q.shape
    _check_ranks_agree(group_name, (tuple(q.shape), tuple(k.shape), str(q.dtype), causal, window,
                                    scale, strategy))
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, seq), dtype=torch.float32, device=q.device)
    state = _cp_state(group_name, q.device, _stream(q))
    _native.cp_forward(state, strategy, q, k, v, segment_ids, positions, out, lse, causal,
                       window, scale, step_visible)
    return out, lse


@_cp_attention_fwd.register_fake
def _(q, k, v, segment_ids, positions, causal, window, scale, group_name, strategy, step_visible):
    batch, seq, heads, _ = q.shape
    return torch.empty_like(q), q.new_empty((batch, heads, seq), dtype=torch.float32)


@torch.library.custom_op("ringpack::cp_attention_bwd", mutates_args=())
def _cp_attention_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      segment_ids: torch.Tensor, positions: torch.Tensor, out: torch.Tensor,
                      lse: torch.Tensor, dout: torch.Tensor, causal: bool, window: int,
                      scale: float, group_name: str, strategy: str,
                      step_visible: list[bool]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    state = _cp_state(group_name, q.device, _stream(q))
    _native.cp_backward(state, strategy, q, k, v, segment_ids, positions, out, lse, dout, dq, dk,
                        dv, causal, window, scale, step_visible)
    return dq, dk, dv


@_cp_attention_bwd.register_fake
def _(q, k, v, segment_ids, positions, out, lse, dout, causal, window, scale, group_name,
      strategy, step_visible):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _cp_setup(ctx, inputs, output):
    q, k, v, segment_ids, positions, causal, window, scale, group_name, strategy, visible = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, segment_ids, positions, out, lse)
    ctx.args = (causal, window, scale, group_name, strategy, visible)
    ctx.mark_non_differentiable(lse)


def _cp_backward(ctx, dout, _dlse):
    q, k, v, segment_ids, positions, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.ringpack.cp_attention_bwd(q, k, v, segment_ids, positions, out, lse,
                                                     dout.contiguous(), *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None, None, None


_cp_attention_fwd.register_autograd(_cp_backward, setup_context=_cp_setup)


# ---- the public function ---------------------------------------------------------------------


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segment_ids: torch.Tensor,
              positions: Optional[torch.Tensor] = None, *, causal: bool = True,
              window: Optional[int] = None, scale: Optional[float] = None,
              cp_group: Optional["dist.ProcessGroup"] = None, strategy: Optional[str] = None,
              plan: Optional["ShardPlan"] = None, cp_rank: Optional[int] = None,
              config: Optional[dict] = None) -> torch.Tensor:
    """Exact attention over packed rows; returns the output in q's layout and dtype.

    q [B, S, Hq, D] (or [T, Hq, D]), k and v [B, S, Hkv, D] (or [T, Hkv, D]); segment_ids and
    positions [B, S] (or [T]), 0 = padding. positions default to 0, 1, 2, ... within each run of
    equal segment ids (pass them explicitly with cp_group: a shard's runs are not its documents;
    ``plan.shard_layout(rank)`` gives both). window: keys at most `window` positions back (None =
    no window). scale: default 1/sqrt(D).

    cp_group: run ringpack's CP schedule over this torch.distributed group; every rank passes its
    shard. strategy: "ring" (default) or "all_gather"; config: the CLI's YAML names, e.g.
    {"context_parallel_strategy": "all_gather"}. With plan (and cp_rank, default the group rank),
    steps whose keys this rank's queries cannot see are skipped.
    """
    _check_inputs(q, k, v, segment_ids, positions)
    packed = q.dim() == 3
    if packed:
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
        segment_ids = segment_ids.unsqueeze(0)
        positions = None if positions is None else positions.unsqueeze(0)
    if window is not None and (not isinstance(window, int) or window < 0):
        raise ValueError(f"window = {window!r}; pass a non-negative int, or None for no window")
    if scale is not None and not (isinstance(scale, (int, float)) and scale > 0):
        raise ValueError(f"scale = {scale!r}; pass a positive number, or None for 1/sqrt(head_dim)")
    settings = resolve_config(config or {}, strategy=strategy)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    segment_ids = segment_ids.to(torch.int32).contiguous()
    window_arg = -1 if window is None else int(window)
    scale_arg = 0.0 if scale is None else float(scale)
    if cp_group is None:
        if positions is None:
            positions = derive_positions(segment_ids)
        positions = positions.to(torch.int32).contiguous()
        out, _ = torch.ops.ringpack.attention_fwd(q, k, v, segment_ids, positions, causal,
                                                  window_arg, scale_arg)
    else:
        if positions is None:
            raise ValueError("with cp_group pass the shard's positions too: "
                             "segment_ids, positions = plan.shard_layout(rank)")
        positions = positions.to(torch.int32).contiguous()
        group_name = _register_group(cp_group)
        rank = dist.get_rank(cp_group) if cp_rank is None else cp_rank
        visible = [] if plan is None else list(plan.step_visible[rank])
        out, _ = torch.ops.ringpack.cp_attention_fwd(q, k, v, segment_ids, positions, causal,
                                                     window_arg, scale_arg, group_name,
                                                     settings["strategy"], visible)
    return out.squeeze(0) if packed else out


# ---- sharding helpers ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """How a batch of packed rows is reordered and cut into cp shards (docs/design.md §3).

    index[i] is the original token of reordered slot i; rank r holds slots [r*n, (r+1)*n)."""

    cp_size: int
    reorder: str  # the reorder that runs ("auto" resolved), e.g. "dual_chunk_swap"
    explanation: str
    index: torch.Tensor  # [S] int64
    inverse: torch.Tensor  # [S] int64
    segment_ids: torch.Tensor  # [B, S] int32, original order
    positions: torch.Tensor  # [B, S] int32, original order
    step_visible: tuple  # [cp][cp]: rank r's queries see rank s's keys

    @property
    def shard_len(self) -> int:
        return self.index.numel() // self.cp_size

    def slots(self, rank: int) -> torch.Tensor:
        if not 0 <= rank < self.cp_size:
            raise ValueError(f"rank {rank}: pass a rank in [0, {self.cp_size})")
        n = self.shard_len
        return self.index[rank * n:(rank + 1) * n]

    def shard_layout(self, rank: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Rank `rank`'s (segment_ids, positions) [B, n]."""
        slots = self.slots(rank)
        return (self.segment_ids.index_select(1, slots).to(device),
                self.positions.index_select(1, slots).to(device))


def plan(segment_ids: torch.Tensor, positions: Optional[torch.Tensor] = None, *, cp_size: int,
         reorder: Optional[str] = None, strategy: Optional[str] = None, causal: bool = True,
         window: Optional[int] = None, num_heads_q: int = 32, num_heads_kv: int = 8,
         head_dim: int = 128, dtype: torch.dtype = torch.bfloat16,
         config: Optional[dict] = None) -> ShardPlan:
    """The reorder for cp_size ranks of a batch [B, S] (or [S]) of segment ids, as the CLI
    picks it: reorder "auto" (default) chooses with the cost model; or contiguous,
    dual_chunk_swap, striped, "striped:64". config takes the CLI's YAML names."""
    if not isinstance(segment_ids, torch.Tensor):
        raise TypeError(f"segment_ids is a {type(segment_ids).__name__}; pass a torch.Tensor")
    if segment_ids.dim() == 1:
        segment_ids = segment_ids.unsqueeze(0)
        positions = None if positions is None else positions.unsqueeze(0)
    if segment_ids.dim() != 2:
        raise ValueError(f"segment_ids has shape {tuple(segment_ids.shape)}; pass [batch, seq]")
    if not isinstance(cp_size, int) or cp_size < 1:
        raise ValueError(f"cp_size = {cp_size!r}; pass an int >= 1")
    settings = resolve_config(config or {}, strategy=strategy, reorder=reorder)
    seg = segment_ids.detach().to("cpu", torch.int32).contiguous()
    pos = None if positions is None else positions.detach().to("cpu", torch.int32).contiguous()
    index, label, explanation, full_positions, visible = _native.plan_reorder(
        seg.numpy(), None if pos is None else pos.numpy(), cp_size, settings["reorder"],
        settings["strategy"], causal, -1 if window is None else int(window), num_heads_q,
        num_heads_kv, head_dim, torch.empty((), dtype=dtype).element_size())
    index = torch.from_numpy(index).to(torch.int64)
    inverse = torch.empty_like(index)
    inverse[index] = torch.arange(index.numel())
    return ShardPlan(cp_size, label, explanation, index, inverse, seg,
                     torch.from_numpy(full_positions), tuple(tuple(r) for r in visible))


def shard(x: torch.Tensor, plan: ShardPlan, rank: int, dim: int = 1) -> torch.Tensor:
    """Rank `rank`'s shard of x along `dim` (the sequence dimension: 1 for [B, S, ...])."""
    return x.index_select(dim, plan.slots(rank).to(x.device)).contiguous()


def unshard(shards, plan: ShardPlan, dim: int = 1, group=None) -> torch.Tensor:
    """The full tensor in original order from the cp shards: a list of them (rank order), or
    this rank's shard and its group (all-gathered first)."""
    if isinstance(shards, torch.Tensor):
        if group is None:
            raise ValueError("unshard of one shard needs group=: pass the list of every rank's "
                             "shards, or this rank's shard and its torch.distributed group")
        parts = [torch.empty_like(shards) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, shards.contiguous(), group=group)
        shards = parts
    if len(shards) != plan.cp_size:
        raise ValueError(f"{len(shards)} shards for a plan of cp_size {plan.cp_size}; pass one "
                         "per rank")
    whole = torch.cat(list(shards), dim=dim)
    return whole.index_select(dim, plan.inverse.to(whole.device))
