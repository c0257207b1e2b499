#!/usr/bin/env python3
"""Peer timings for `ringpack bench` on the same layouts (docs/design.md §8).

Reads the workload layouts written by `ringpack bench --layouts-only --layouts-out FILE`
(segment ids and positions per workload) and times, with CUDA events after warm-up, median over
the repetitions:
  flex   PyTorch FlexAttention, torch.compile'd, with a BlockMask built from the same segment ids
         and positions (document + causal: seg_q == seg_k, seg_q != 0, pos_k <= pos_q);
  cudnn  SDPA, cuDNN backend, dense causal (dense workloads only: PyTorch's ragged cuDNN path,
         which its varlen_attn leaves off, took 55-79 ms a forward on packed-16k / packed-64k,
         a cost of the binding, not the kernel; docs/benchmarks.md, "Session 24");
  flash  FlashAttention-2 through PyTorch: SDPA's flash backend on dense rows (causal); on packed
         rows torch.nn.attention.varlen.varlen_attn (cu_seqlens, window (-1, 0): causal within
         each document), the kernel behind flash_attn_varlen_func.
varlen_attn indexes keys by token within a document, so it runs only where each document is one
run of tokens with positions 0, 1, ... (varlen_documents); padding is left out of its inputs (it
has no visible pairs). Its output is checked against Flex's on the same inputs (max abs
difference CHECK_TOL) where Flex ran; if it differs it is reported as an error, not timed. GQA:
native kv heads where the kernel takes them, else repeated heads (the same FLOPs). Backward is
timed alone (torch.autograd.grad with retain_graph on a fixed forward graph).
Writes {"device", "torch", "results": [{workload, impl, fwd_ms, fwd_ms_min, fwd_ms_max,
bwd_ms, ...}]} for `ringpack bench --peers`.
"""
import argparse
import json
import statistics
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from tile_geometry import documents  # bench/, beside this script


def time_ms(fn, warmup, reps):
    """Per-repetition CUDA-event times of fn() in ms: (median, min, max)."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        stops[i].record()
    torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in zip(starts, stops)]
    return statistics.median(ms), min(ms), max(ms)


def inputs(seq_len, heads_q, heads_kv, head_dim, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(heads):  # [batch, heads, seq, head_dim], uniform in [-1, 1)
        x = torch.rand(1, heads, seq_len, head_dim, device="cuda", generator=gen) * 2 - 1
        return x.to(dtype).requires_grad_(True)

    q, k, v = rand(heads_q), rand(heads_kv), rand(heads_kv)
    dout = (torch.rand(1, heads_q, seq_len, head_dim, device="cuda", generator=gen) * 2 - 1).to(dtype)
    return q, k, v, dout


CHECK_TOL = 2e-2  # bf16 / fp16 outputs of values in [-1, 1): a wrong mask differs by far more


def varlen_documents(segment_ids, positions):
    """(token indices, cu_seqlens, longest document) of a packed row for varlen_attn: the tokens
    of each document (tile_geometry.documents: its runs, padding left out) in row order. Raises
    ValueError where a document is not one run of tokens with positions 0, 1, ... (varlen_attn
    masks by token index within a document, not by position)."""
    index, cu_seqlens, longest, seen = [], [0], 0, set()
    for first, end in documents(np.asarray(segment_ids)):
        seg = int(segment_ids[first])
        if seg in seen:
            raise ValueError(f"document {seg} is split into runs (tokens {first}..{end - 1})")
        seen.add(seg)
        if list(positions[first:end]) != list(range(end - first)):
            raise ValueError(f"document {seg}'s positions are not 0, 1, ... "
                             f"(tokens {first}..{end - 1})")
        index.extend(range(first, end))
        cu_seqlens.append(len(index))
        longest = max(longest, end - first)
    if not index:
        raise ValueError("no document tokens")
    return index, cu_seqlens, longest


def entry(workload, impl, fwd, bwd):
    return {"workload": workload, "impl": impl,
            "fwd_ms": fwd[0], "fwd_ms_min": fwd[1], "fwd_ms_max": fwd[2],
            "bwd_ms": bwd[0] if bwd else None,
            "bwd_ms_min": bwd[1] if bwd else None, "bwd_ms_max": bwd[2] if bwd else None}


def bench_pair(attention, q, k, v, dout, warmup, reps):
    """Forward time of attention(q, k, v) and backward time of its graph."""
    with torch.no_grad():
        fwd = time_ms(lambda: attention(q, k, v), warmup, reps)
    out = attention(q, k, v)
    bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                  warmup, reps)
    return fwd, bwd


def token_major(x, index):
    """[1, heads, seq, head_dim] -> [tokens, heads, head_dim] of the rows in index (the
    cu_seqlens layout), a new leaf that takes gradients."""
    return x.detach()[0].transpose(0, 1)[index].contiguous().requires_grad_(x.requires_grad)


def varlen_flash(name, q, k, v, dout, w, flex_out, warmup, reps):
    """The result entry of FlashAttention-2's varlen_attn on a packed row."""
    try:
        index, cu_list, longest = varlen_documents(w["segment_ids"], w["positions"])
        from torch.nn.attention.varlen import varlen_attn
        cu_seqlens = torch.tensor(cu_list, dtype=torch.int32, device="cuda")

        def run(q_, k_, v_):
            return varlen_attn(q_, k_, v_, cu_seqlens, cu_seqlens, longest, longest,
                               window_size=(-1, 0))
        qt, kt, vt, dt = (token_major(x, index) for x in (q, k, v, dout))
        try:  # native GQA where the kernel takes fewer kv heads
            with torch.no_grad():
                out = run(qt, kt, vt)
        except RuntimeError:
            group = q.shape[1] // k.shape[1]
            kt = kt.detach().repeat_interleave(group, dim=1).requires_grad_(True)
            vt = vt.detach().repeat_interleave(group, dim=1).requires_grad_(True)
            with torch.no_grad():
                out = run(qt, kt, vt)
        if flex_out is not None:
            diff = (out.float() - token_major(flex_out, index).float()).abs().max().item()
            if not diff <= CHECK_TOL:
                raise RuntimeError(f"output differs from flex's by {diff:.3g}")
        return entry(name, "flash", *bench_pair(run, qt, kt, vt, dt, warmup, reps))
    except Exception as error:  # report, keep the other peers
        print(f"flash on {name} failed: {error}", file=sys.stderr)
        return {"workload": name, "impl": "flash", "fwd_ms": 0.0, "error": str(error)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", required=True, help="JSON from ringpack bench --layouts-out")
    parser.add_argument("--json", required=True, help="output file")
    parser.add_argument("--peers", default="flex,cudnn,flash")
    args = parser.parse_args()
    spec = json.load(open(args.layouts))
    heads_q, heads_kv, head_dim = spec["num_heads_q"], spec["num_heads_kv"], spec["head_dim"]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[spec["dtype"]]
    warmup, reps = spec["warmup"], spec["reps"]
    peers = args.peers.split(",")
    flex = torch.compile(flex_attention, dynamic=False)
    results = []
    for w in spec["workloads"]:
        name, seq_len = w["name"], w["seq_len"]
        seg = torch.tensor(w["segment_ids"], dtype=torch.int32, device="cuda")
        pos = torch.tensor(w["positions"], dtype=torch.int32, device="cuda")
        q, k, v, dout = inputs(seq_len, heads_q, heads_kv, head_dim, dtype, seed=0)

        flex_out = None  # what the packed rows' flash peer is checked against
        if "flex" in peers:
            def document_causal(b, h, q_idx, kv_idx):
                return (seg[q_idx] == seg[kv_idx]) & (seg[q_idx] != 0) & (pos[kv_idx] <= pos[q_idx])
            try:
                block_mask = create_block_mask(document_causal, B=None, H=None, Q_LEN=seq_len,
                                               KV_LEN=seq_len, device="cuda")
                run = lambda q_, k_, v_: flex(q_, k_, v_, block_mask=block_mask, enable_gqa=True)
                results.append(entry(name, "flex", *bench_pair(run, q, k, v, dout, warmup, reps)))
                with torch.no_grad():
                    flex_out = run(q, k, v)
            except Exception as error:  # report, keep the other peers
                results.append({"workload": name, "impl": "flex", "fwd_ms": 0.0, "error": str(error)})
                print(f"flex on {name} failed: {error}", file=sys.stderr)

        dense = all(s == 1 for s in w["segment_ids"])
        if not dense and "flash" in peers:
            results.append(varlen_flash(name, q, k, v, dout, w, flex_out, warmup, reps))
        for impl, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            if impl not in peers or not dense:
                continue
            # GQA as repeated kv heads: the same FLOPs; not every SDPA backend takes enable_gqa.
            group = heads_q // heads_kv
            k_rep = k.detach().repeat_interleave(group, dim=1).requires_grad_(True)
            v_rep = v.detach().repeat_interleave(group, dim=1).requires_grad_(True)

            def run(q_, k_, v_, backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
            try:
                results.append(entry(name, impl, *bench_pair(run, q, k_rep, v_rep, dout, warmup, reps)))
            except Exception as error:
                results.append({"workload": name, "impl": impl, "fwd_ms": 0.0, "error": str(error)})
                print(f"{impl} on {name} failed: {error}", file=sys.stderr)
        del q, k, v, dout, flex_out
        torch.cuda.empty_cache()
        print(f"peers: {name} done", file=sys.stderr)

    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
