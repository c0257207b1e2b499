#!/usr/bin/env python3
"""ringpack.torch.attention against FlexAttention on the standard packed workloads (GPU).

For each workload of the layouts file (`ringpack bench --layouts-only --layouts-out FILE`) and
the same bf16 inputs:
  accuracy  outputs and gradients of ringpack's op and of FlexAttention (document + causal
            BlockMask, torch.compile'd) against an fp32 reference computed document by document
            with SDPA (memory-efficient backend, fp32); ringpack must stay within 2x of Flex's
            own error (max |error| over non-padding tokens, and relative RMS);
  speed     forward and backward medians with CUDA events, through the public Python entry
            points (ringpack: the torch custom op with its argument checks; Flex: the compiled
            function), and the ratio Flex / ringpack.
Writes a JSON file and prints one line per workload; exits 1 when an accuracy check fails.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import ringpack.torch as rt
from peers import time_ms  # bench/peers.py: (median, min, max) ms with CUDA events


def reference(q, k, v, seg, dout):
    """fp32 outputs and gradients, document by document ([1, S, H, D] inputs, contiguous runs)."""
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    groups = q.shape[2] // k.shape[2]
    out = torch.zeros_like(q32)
    ids = seg[0].tolist()
    start = 0
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        while start < len(ids):
            end = start
            while end < len(ids) and ids[end] == ids[start]:
                end += 1
            if ids[start] != 0:
                qd = q32[:, start:end].transpose(1, 2)
                kd = k32[:, start:end].repeat_interleave(groups, 2).transpose(1, 2)
                vd = v32[:, start:end].repeat_interleave(groups, 2).transpose(1, 2)
                out[:, start:end] = F.scaled_dot_product_attention(
                    qd, kd, vd, is_causal=True).transpose(1, 2)
            start = end
    grads = torch.autograd.grad(out, (q32, k32, v32), dout.float())
    return out.detach(), grads


def errors(got, want, keep):
    diff = (got.float() - want)[:, keep]
    ref = want[:, keep]
    return {"max_abs": diff.abs().max().item(),
            "rel_rms": (diff.pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--workloads", default="packed-16k,packed-64k")
    args = parser.parse_args()
    spec = json.load(open(args.layouts))
    heads_q, heads_kv, dim = spec["num_heads_q"], spec["num_heads_kv"], spec["head_dim"]
    dtype = torch.bfloat16
    # The timed backward replays one graph (retain_graph), which compiled backwards with donated
    # buffers refuse.
    import torch._functorch.config as functorch_config

    functorch_config.donated_buffer = False
    flex = torch.compile(flex_attention, dynamic=False)
    results, ok = [], True
    for workload in spec["workloads"]:
        name = workload["name"]
        if name not in args.workloads.split(","):
            continue
        # One row per workload in the layouts file: [S] -> [1, S].
        seg = torch.tensor(workload["segment_ids"], dtype=torch.int32, device="cuda")[None]
        pos = torch.tensor(workload["positions"], dtype=torch.int32, device="cuda")[None]
        seq = seg.shape[1]
        gen = torch.Generator(device="cuda").manual_seed(0)
        rand = lambda h: (torch.rand(1, seq, h, dim, device="cuda", generator=gen) * 2 - 1).to(dtype)
        q, k, v, dout = rand(heads_q), rand(heads_kv), rand(heads_kv), rand(heads_q)
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_()

        def mask_mod(b, h, qi, ki):
            return (seg[b, qi] == seg[b, ki]) & (seg[b, qi] != 0) & (pos[b, ki] <= pos[b, qi])

        block_mask = create_block_mask(mask_mod, 1, None, seq, seq, device="cuda")
        ours = lambda: rt.attention(q, k, v, seg, pos)
        theirs = lambda: flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                              block_mask=block_mask, enable_gqa=True).transpose(1, 2)
        want_out, want_grads = reference(q, k, v, seg, dout)
        keep = seg[0] != 0
        entry = {"workload": name, "seq_len": seq, "heads": [heads_q, heads_kv], "head_dim": dim}
        for impl, fn in (("ringpack", ours), ("flex", theirs)):
            out = fn()
            grads = torch.autograd.grad(out, (q, k, v), dout)
            entry[impl] = {"out": errors(out, want_out, keep)}
            for gname, g, w in zip(("dq", "dk", "dv"), grads, want_grads):
                entry[impl][gname] = errors(g, w, keep)
            with torch.no_grad():
                entry[impl]["fwd_ms"] = time_ms(fn, 5, 20)[0]
            out = fn()
            entry[impl]["bwd_ms"] = time_ms(
                lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), 5, 20)[0]
        checks = []
        for tensor in ("out", "dq", "dk", "dv"):
            for metric in ("max_abs", "rel_rms"):
                mine, flexs = entry["ringpack"][tensor][metric], entry["flex"][tensor][metric]
                passed = mine <= 2 * flexs
                checks.append(passed)
                if not passed:
                    print(f"{name}: {tensor} {metric} ringpack {mine:.3e} > 2 x flex {flexs:.3e}")
        entry["within_2x_of_flex"] = all(checks)
        ok &= entry["within_2x_of_flex"]
        r, f = entry["ringpack"], entry["flex"]
        print(f"{name}: fwd ringpack {r['fwd_ms']:.3f} ms flex {f['fwd_ms']:.3f} ms "
              f"({f['fwd_ms'] / r['fwd_ms']:.2f}x) | bwd ringpack {r['bwd_ms']:.3f} ms flex "
              f"{f['bwd_ms']:.3f} ms ({f['bwd_ms'] / r['bwd_ms']:.2f}x) | max|err| out/dq/dk/dv "
              f"ringpack {r['out']['max_abs']:.2e}/{r['dq']['max_abs']:.2e}/"
              f"{r['dk']['max_abs']:.2e}/{r['dv']['max_abs']:.2e} flex {f['out']['max_abs']:.2e}/"
              f"{f['dq']['max_abs']:.2e}/{f['dk']['max_abs']:.2e}/{f['dv']['max_abs']:.2e} "
              f"within 2x: {entry['within_2x_of_flex']}", flush=True)
        results.append(entry)
        del q, k, v, dout, want_out, want_grads
        torch.cuda.empty_cache()
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "results": results}, open(args.json, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
