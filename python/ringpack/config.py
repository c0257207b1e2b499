"""The CLI's configuration names in Python (docs/python.md, README "A YAML config").

``resolve_config(config, strategy=None, reorder=None)`` maps the seed system's keys
``context_parallel_strategy`` (ring | all_gather), ``context_parallel_load_balance`` (bool),
``context_parallel_reorder_strategy`` (auto | dual_chunk_swap | striped) and ``packing`` (bool)
to ``{"strategy": ..., "reorder": ...}``. Explicit keyword arguments win over the dict, as flags
win over the YAML file in the CLI.
"""

from __future__ import annotations

from typing import Optional

_KEYS = ("context_parallel_strategy", "context_parallel_load_balance",
         "context_parallel_reorder_strategy", "packing")
_STRATEGIES = ("ring", "all_gather")


def _is_reorder(label: str) -> bool:
    if label in ("auto", "contiguous", "dual_chunk_swap", "striped"):
        return True
    name, _, size = label.partition(":")
    return name == "striped" and size.isdigit() and int(size) > 0


def resolve_config(config: dict, strategy: Optional[str] = None,
                   reorder: Optional[str] = None) -> dict:
    if not isinstance(config, dict):
        raise TypeError(f"config is a {type(config).__name__}; pass a dict of the CLI's YAML names")
    for key in config:
        if key not in _KEYS:
            raise ValueError(f"unknown config key {key!r}; use one of {', '.join(_KEYS)}")
    for key in ("context_parallel_load_balance", "packing"):
        if key in config and not isinstance(config[key], bool):
            raise TypeError(f"{key} = {config[key]!r}; pass true or false")
    strategy = strategy if strategy is not None else config.get("context_parallel_strategy", "ring")
    if strategy not in _STRATEGIES:
        raise ValueError(f"strategy {strategy!r}: use ring or all_gather")
    balance = config.get("context_parallel_load_balance", True)
    configured = config.get("context_parallel_reorder_strategy")
    if reorder is None:
        reorder = configured if configured is not None else ("auto" if balance else "contiguous")
    if not isinstance(reorder, str) or not _is_reorder(reorder):
        raise ValueError(f"reorder {reorder!r}: use auto, contiguous, dual_chunk_swap, striped or "
                         "striped:N")
    if not balance and reorder not in ("contiguous",) and configured is not None:
        raise ValueError(f"context_parallel_load_balance is false but "
                         f"context_parallel_reorder_strategy is {configured!r}: drop one of them")
    return {"strategy": strategy, "reorder": reorder}
