"""ringpack: exact context-parallel attention over packed sequences.

Framework ops live in submodules, imported on demand so that neither framework is required:

- ``ringpack.torch``: ``attention`` (a ``torch.library`` custom op with autograd), ``plan``,
  ``shard`` and ``unshard`` for context parallelism over a ``torch.distributed`` group.
- ``ringpack.jax``: ``attention`` through the XLA FFI with ``custom_vjp``, and the ring inside
  ``shard_map``.
- ``ringpack.transformers``: ``attn_implementation="ringpack"`` for Hugging Face models.

See docs/python.md.
"""

from . import _native

__version__ = "0.1.0"
RingpackError = _native.RingpackError

__all__ = ["RingpackError", "__version__", "cuda_built"]


def cuda_built() -> bool:
    """Whether this build has the CUDA kernels (it needs nvcc when it was built)."""
    return _native.cuda_built()
