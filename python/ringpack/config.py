"""The CLI's YAML names for context parallelism, mapped onto ringpack's plan arguments.

Shared by ringpack.torch and ringpack.jax. A config is a mapping (e.g. a loaded YAML file or a
model config dict) that may hold, with the meanings of the CLI's YAML (README.md, docs/design.md
section 3):

  context_parallel_strategy          ring | all_gather
  context_parallel_load_balance      bool; false means the contiguous order (no reorder)
  context_parallel_reorder_strategy  auto | dual_chunk_swap | striped (also contiguous, striped:N)
  packing                            bool; rows hold several documents (the segment ids say which)

and ringpack's own short names ``strategy`` and ``reorder``, which win over the long ones. Other
keys are ignored, so a whole YAML or model config can be passed, except unknown keys that start
with ``context_parallel_`` (most likely typos), which raise ValueError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["resolve_config", "STRATEGIES", "REORDERS"]

STRATEGIES = ("ring", "all_gather")
REORDERS = ("auto", "contiguous", "dual_chunk_swap", "striped")

_KNOWN_CP_KEYS = (
    "context_parallel_strategy",
    "context_parallel_load_balance",
    "context_parallel_reorder_strategy",
)


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{key} = {value!r}: pass true or false")
    return value


def _check_strategy(key: str, value: Any) -> str:
    if value not in STRATEGIES:
        raise ValueError(f"{key} = {value!r}: use one of {', '.join(STRATEGIES)}")
    return value


def _check_reorder(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key} = {value!r}: use one of {', '.join(REORDERS)} (or striped:N)")
    kind, _, stripe = value.partition(":")
    ok = kind in REORDERS and (not stripe or (kind == "striped" and stripe.isdigit()))
    if not ok:
        raise ValueError(f"{key} = {value!r}: use one of {', '.join(REORDERS)} (or striped:N)")
    return value


def resolve_config(config: Mapping[str, Any] | None = None, *, strategy: str | None = None,
                   reorder: str | None = None) -> dict[str, Any]:
    """Returns ``{"strategy": "ring"|"all_gather", "reorder": label, "packing": bool | None}``.

    ``strategy`` and ``reorder`` (keyword arguments) win over the config's keys, as flags win
    over the YAML file in the CLI. Defaults: ring, auto. ``context_parallel_load_balance: false``
    turns auto into contiguous and conflicts with a balanced reorder (and ``true`` with
    contiguous), as in the CLI: ValueError naming both.
    ``packing`` is returned as given (None when absent); the plan reads the layout from the
    segment ids, so it does not change the reorder.
    """
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise TypeError(f"config is a {type(config).__name__}; pass a dict of the CLI's YAML keys "
                        "(context_parallel_strategy, context_parallel_reorder_strategy, ...)")
    for key in config:
        if (isinstance(key, str) and key.startswith("context_parallel_")
                and key not in _KNOWN_CP_KEYS):
            raise ValueError(f"unknown config key {key!r}; use one of {', '.join(_KNOWN_CP_KEYS)}")

    if strategy is not None:
        resolved_strategy = _check_strategy("strategy", strategy)
    elif "strategy" in config:
        resolved_strategy = _check_strategy("strategy", config["strategy"])
    elif "context_parallel_strategy" in config:
        resolved_strategy = _check_strategy("context_parallel_strategy",
                                            config["context_parallel_strategy"])
    else:
        resolved_strategy = "ring"

    if reorder is not None:
        reorder_key, resolved_reorder = "reorder", _check_reorder("reorder", reorder)
    elif "reorder" in config:
        reorder_key, resolved_reorder = "reorder", _check_reorder("reorder", config["reorder"])
    elif "context_parallel_reorder_strategy" in config:
        reorder_key = "context_parallel_reorder_strategy"
        resolved_reorder = _check_reorder(reorder_key, config[reorder_key])
    else:
        reorder_key, resolved_reorder = None, "auto"

    if "context_parallel_load_balance" in config:  # checked even when `reorder` wins over it
        balance = _check_bool("context_parallel_load_balance",
                              config["context_parallel_load_balance"])
        kind = resolved_reorder.partition(":")[0]
        if reorder is not None:
            pass  # an explicit reorder wins, as --reorder wins over the YAML file in the CLI
        elif kind == "auto":
            if not balance:
                resolved_reorder = "contiguous"
        elif balance == (kind == "contiguous"):
            fix = ("contiguous does not balance the load" if balance else
                   "no load balance means the contiguous order")
            raise ValueError(
                f"context_parallel_load_balance = {str(balance).lower()} conflicts with "
                f"{reorder_key} = {resolved_reorder!r}: {fix}; drop one of the two")

    packing = None
    if "packing" in config:
        packing = _check_bool("packing", config["packing"])
    return {"strategy": resolved_strategy, "reorder": resolved_reorder, "packing": packing}
