"""Train a randomly initialised Llama-style model for a few steps on packed rows with ringpack
attention, and compare it with transformers' own attention implementations on the same batches.

    python examples/train_packed_llama.py                       # CPU: a small model, seconds
    python examples/train_packed_llama.py --device cuda --attn ringpack sdpa flex_attention \
        --seq-len 16384 --layers 4 --hidden 2048 --heads 16 --kv-heads 4 --json out/train.json

Every implementation starts from the same weights and sees the same packed rows (documents drawn
from the corpus histogram in data/doc_length_distribution.csv, separated by position-id resets, no
weight downloads). Printed per implementation: the loss of every step, the median step time after
warm-up, and the attention kernels' share of the device time of one profiled step.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

import ringpack.transformers

HISTOGRAM = Path(__file__).resolve().parent.parent / "data" / "doc_length_distribution.csv"
ATTENTION_KERNELS = ("ringpack", "scaled_dot_product", "flash", "fmha", "flex_attention",
                     "attention")


def document_lengths(seq_len: int, documents: int, gen: torch.Generator) -> list[int]:
    """`documents` lengths drawn from the corpus histogram, scaled to fill seq_len exactly."""
    bins, counts = [], []
    lines = [line for line in HISTOGRAM.read_text().splitlines() if not line.startswith("#")]
    for row in csv.DictReader(lines):  # "[11, 50]",391188,...
        low, high = (int(x) for x in row["range"].strip("[]() ").split(","))
        bins.append((low, high))
        counts.append(float(row["number"]))
    picks = torch.multinomial(torch.tensor(counts), documents, replacement=True, generator=gen)
    raw = [bins[i][0] + float(torch.rand((), generator=gen)) * (bins[i][1] - bins[i][0])
           for i in picks.tolist()]
    lengths = [max(1, int(x * seq_len / sum(raw))) for x in raw]
    lengths[-1] += seq_len - sum(lengths)
    if lengths[-1] < 1:
        raise SystemExit(f"cannot pack {documents} documents into {seq_len} tokens; use fewer")
    return lengths


def packed_rows(steps: int, seq_len: int, documents: int, vocab: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(steps):
        lengths = document_lengths(seq_len, documents, gen)
        input_ids = torch.randint(0, vocab, (1, seq_len), generator=gen)
        position_ids = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
        labels = input_ids.clone()
        labels[0, torch.cumsum(torch.tensor([0] + lengths[:-1]), 0)] = -100
        rows.append((input_ids, position_ids, labels))
    return rows


def make_model(args, attn: str):
    config = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
        max_position_embeddings=max(args.seq_len, 2048))
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn,
                                                          dtype=args.dtype)
    return model.to(args.device).train()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def attention_share(model, batch, device) -> float:
    """Device time of attention kernels / all device time, over one forward + backward."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        loss = model(input_ids=batch[0], position_ids=batch[1], labels=batch[2],
                     use_cache=False).loss
        loss.backward()
        sync(device)
    model.zero_grad(set_to_none=True)
    total = attention = 0.0
    for event in prof.key_averages():
        spent = event.self_device_time_total if device.type == "cuda" else event.self_cpu_time_total
        if device.type == "cuda" and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        total += spent
        if any(name in event.key.lower() for name in ATTENTION_KERNELS):
            attention += spent
    return attention / total if total else float("nan")


def train(args, attn: str, rows):
    device = torch.device(args.device)
    model = make_model(args, attn)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    rows = [tuple(t.to(device) for t in row) for row in rows]
    losses, times = [], []
    for step, (input_ids, position_ids, labels) in enumerate(rows):
        sync(device)
        start = time.perf_counter()
        loss = model(input_ids=input_ids, position_ids=position_ids, labels=labels,
                     use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync(device)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
        print(f"  {attn:>15} step {step + 1:3d}/{len(rows)}  loss {losses[-1]:.4f}  "
              f"{times[-1] * 1e3:8.1f} ms", file=sys.stderr, flush=True)
    share = attention_share(model, rows[0], device)
    measured = times[args.warmup:] or times
    return {"attn_implementation": attn, "losses": losses, "step_ms": [t * 1e3 for t in times],
            "median_step_ms": statistics.median(measured) * 1e3, "attention_share": share}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--attn", nargs="+", default=["ringpack", "sdpa"],
                        help="implementations to compare: ringpack, sdpa, flex_attention, eager")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per packed row")
    parser.add_argument("--documents", type=int, default=21, help="documents per row")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3, help="steps left out of the median")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--kv-heads", type=int, default=None)
    parser.add_argument("--head-dim", type=int, default=None)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    defaults = (dict(seq_len=16384, layers=4, hidden=2048, heads=16, kv_heads=4, head_dim=128)
                if gpu else dict(seq_len=1024, layers=2, hidden=256, heads=4, kv_heads=2,
                                 head_dim=64))
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not gpu:
        args.vocab = min(args.vocab, 4096)
    args.dtype = torch.bfloat16 if gpu else torch.float32
    ringpack.transformers.register()
    rows = packed_rows(args.steps, args.seq_len, args.documents, args.vocab, args.seed)
    print(f"device {args.device}, {args.layers} layers, hidden {args.hidden}, heads "
          f"{args.heads}/{args.kv_heads}, head_dim {args.head_dim}, {args.dtype}, packed rows of "
          f"{args.seq_len} tokens ({args.documents} documents), AdamW, {args.steps} steps",
          flush=True)
    results = []
    for attn in args.attn:
        results.append(train(args, attn, rows))
        if args.json:  # after each implementation, so a run cut short keeps what it measured
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump({"config": {k: str(v) for k, v in vars(args).items()},
                           "results": results}, f, indent=1)
    print(f"{'attn_implementation':>20} {'median step ms':>15} {'attention share':>16}  losses")
    for r in results:
        losses = " ".join(f"{x:.4f}" for x in r["losses"])
        print(f"{r['attn_implementation']:>20} {r['median_step_ms']:15.1f} "
              f"{r['attention_share']:16.1%}  {losses}")
    first = results[0]["losses"]
    for r in results[1:]:
        drift = max(abs(a - b) for a, b in zip(first, r["losses"]))
        print(f"max |loss({results[0]['attn_implementation']}) - loss({r['attn_implementation']})|"
              f" over the steps: {drift:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
