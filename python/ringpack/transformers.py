"""ringpack attention in Hugging Face transformers models (docs/python.md).

``register()`` adds ``"ringpack"`` to transformers' attention-function and mask registries, so
``AutoModelForCausalLM.from_config(config, attn_implementation="ringpack")`` (or
``model.set_attn_implementation("ringpack")``) runs every attention layer through
``ringpack.torch.attention``. Packed batches name their documents either

- by position ids that restart at each document (``model(input_ids, position_ids=...)``, the
  convention transformers uses for packing), or
- by explicit document ids: ``model(input_ids, position_ids=..., segment_ids=...)`` with
  segment id 0 for padding.

No [S, S] mask is built: the registered mask function only passes a 2-D padding mask through.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import torch as ringpack_torch

__all__ = ["register", "attention_forward", "segments_from_positions", "NAME"]

NAME = "ringpack"


def segments_from_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """Document ids 1, 2, ... [B, S]: a new document starts where the position is not the previous
    one plus 1 (transformers' packed-sequence rule)."""
    starts = torch.ones_like(position_ids, dtype=torch.int32)
    starts[:, 1:] = (position_ids[:, 1:] - position_ids[:, :-1] != 1).to(torch.int32)
    return starts.cumsum(-1, dtype=torch.int32)


def _padding_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0,
                  kv_offset: int = 0, mask_function=None, attention_mask=None, **kwargs):
    """The mask registry entry: the 2-D padding mask [B, S] when some token is padding, else
    None (ringpack builds the document mask itself)."""
    if attention_mask is None or attention_mask.dim() != 2:
        return None
    attention_mask = attention_mask[:, -kv_length:]
    return None if bool(attention_mask.all()) else attention_mask


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                      dropout: float = 0.0, scaling: Optional[float] = None,
                      sliding_window: Optional[int] = None, **kwargs):
    """transformers' attention-function interface: query [B, Hq, S, D], key/value [B, Hkv, S, D]
    -> (output [B, S, Hq, D], None)."""
    if dropout and module.training:
        raise NotImplementedError(f"attention dropout {dropout} is not supported by ringpack; "
                                  "set the model's attention_dropout to 0")
    if kwargs.get("softcap") is not None:
        raise NotImplementedError("ringpack has no logit softcap; use another attn_implementation")
    if query.shape[2] != key.shape[2]:
        raise NotImplementedError(
            f"{query.shape[2]} queries against {key.shape[2]} keys (a KV cache): ringpack's "
            "transformers integration is for training and prefill; generate with sdpa")
    batch, _, seq, _ = query.shape
    segment_ids = kwargs.get("segment_ids")
    position_ids = kwargs.get("position_ids")
    if position_ids is not None and position_ids.dim() == 1:
        position_ids = position_ids.unsqueeze(0)
    if position_ids is not None:
        position_ids = position_ids.expand(batch, seq)
    if segment_ids is None:
        segment_ids = (segments_from_positions(position_ids) if position_ids is not None else
                       torch.ones((batch, seq), dtype=torch.int32, device=query.device))
    segment_ids = segment_ids.to(torch.int32)
    if attention_mask is not None:
        if attention_mask.dim() != 2:
            raise ValueError(f"attention_mask of shape {tuple(attention_mask.shape)}: ringpack "
                             "takes a 2-D padding mask [batch, seq] (or none)")
        segment_ids = segment_ids * attention_mask.to(torch.int32)
    positions = None if position_ids is None else position_ids.to(torch.int32)
    causal = getattr(module, "is_causal", True)
    window = None if sliding_window is None else int(sliding_window) - 1
    out = ringpack_torch.attention(query.transpose(1, 2), key.transpose(1, 2),
                                   value.transpose(1, 2), segment_ids, positions, causal=causal,
                                   window=window, scale=scaling)
    return out, None


def register() -> str:
    """Registers "ringpack" with transformers; returns the name to pass as attn_implementation."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, _padding_mask)
    return NAME
