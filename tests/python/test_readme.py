"""The README's Python examples run as printed (on CPU tensors; the CP example over gloo)."""

import gc
import os
import pathlib
import re
import tempfile
import weakref

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def python_blocks():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 2, "README.md lost its Python examples (the op, then CP)"
    return blocks


def test_readme_example_runs_on_cpu(capsys):
    torch.manual_seed(0)
    scope = {}
    exec(compile(python_blocks()[0], "README.md (first Python example)", "exec"), scope)
    assert scope["out"].shape == scope["q"].shape
    assert scope["q"].grad is not None and torch.isfinite(scope["q"].grad).all()
    assert "torch.Size([1, 18, 8, 64])" in capsys.readouterr().out


def _cp_example(rank, world, init_file, result_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    # The example imports ringpack.torch after init_process_group (this module does not import
    # it): the group must still die with destroy_process_group, or gloo aborts the process at exit.
    group = weakref.ref(dist.group.WORLD)
    try:
        _run_cp_example(rank, world, result_dir)
    finally:
        dist.destroy_process_group()
    gc.collect()
    assert group() is None, "the process group outlived destroy_process_group"
    open(os.path.join(result_dir, f"released{rank}"), "w").close()


def _run_cp_example(rank, world, result_dir):
    torch.manual_seed(0)  # every rank holds the same whole batch, as the example says
    first, cp = python_blocks()[:2]
    scope = {}
    exec(compile(first, "README.md (first Python example)", "exec"), scope)
    # The CP example as printed, on the CPU: its device is the only change.
    scope.update(rank=rank, world=world, group=dist.group.WORLD)
    exec(compile(cp.replace('device="cuda"', 'device="cpu"'), "README.md (CP example)", "exec"),
         scope)
    plan, out_r = scope["plan"], scope["out_r"]
    assert out_r.shape[1] == plan.shard_layout(rank, device="cpu")[0].shape[1]
    # Unsharded, the ranks' outputs are the single-device output of the first example.
    whole = scope["rt"].unshard(out_r.detach(), plan, group=dist.group.WORLD)
    torch.testing.assert_close(whole, scope["out"].detach(), rtol=1e-5, atol=1e-5)
    open(os.path.join(result_dir, f"ok{rank}"), "w").close()


def test_readme_cp_example_runs_over_gloo():
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_cp_example, args=(2, os.path.join(tmp, "init"), tmp), nprocs=2, join=True)
        done = set(os.listdir(tmp))
        assert {"ok0", "ok1"} <= done, "a rank did not finish the CP example"
        assert {"released0", "released1"} <= done, "a rank's group outlived destroy_process_group"
