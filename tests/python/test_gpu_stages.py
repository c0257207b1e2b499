"""scripts/gpu_stages.sh with stand-in stages (no GPU needed)."""

import os
import pathlib
import subprocess
import tarfile

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gpu_stages.sh"


def run(tmp_path, *stages):
    env = dict(os.environ, OUT=str(tmp_path / "out"), STAGE_DIR=str(tmp_path / "stages"))
    return subprocess.run(["bash", str(SCRIPT), *stages], env=env, capture_output=True,
                          text=True, check=False)


def members(tmp_path, name):
    with tarfile.open(tmp_path / "out" / f"{name}.tgz") as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


def test_each_stage_gets_its_own_out_and_tarball(tmp_path):
    first = "first 10 echo ok > $OUT/summary.txt; echo nccl $NCCL_NVLS_ENABLE >> $OUT/summary.txt"
    result = run(tmp_path, first, "second 10 echo from stdout; exit 3")
    assert result.returncode == 1, result.stderr  # the second stage failed
    lines = result.stdout.splitlines()
    assert lines[0].startswith("== stage first: exit 0 in ")
    assert lines[1:3] == ["ok", "nccl 0"]  # its summary, with the NCCL settings exported
    assert lines[3].startswith("== stage second: exit 3 in ")
    assert lines[4] == "from stdout"  # no summary: the tail of its output
    assert members(tmp_path, "first")["first/summary.txt"] == "ok\nnccl 0\n"
    assert members(tmp_path, "second")["second/stdout.txt"] == "from stdout\n"


def test_a_stage_past_its_limit_is_stopped_and_the_next_runs(tmp_path):
    result = run(tmp_path, "slow 1 echo started; sleep 20", "next 10 echo next > $OUT/summary.txt")
    assert result.returncode == 1
    assert "== stage slow: stopped at its limit of 1 s (exit 124)" in result.stdout
    assert "started" in members(tmp_path, "slow")["slow/stdout.txt"]
    assert members(tmp_path, "next")["next/summary.txt"] == "next\n"


def test_all_stages_passing_exit_zero(tmp_path):
    result = run(tmp_path, "a 10 true", "b 10 echo b")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_malformed_stage_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    for bad in ("nolimit", "x abc touch " + str(marker), "bad/name 5 true", "nocommand 5",
                "ok 5 true"):  # the last: a second stage named ok
        result = run(tmp_path, f"ok 10 touch {marker}", bad)
        assert result.returncode == 2, bad
        assert "bad stage" in result.stderr
        assert not marker.exists(), bad
    assert run(tmp_path).returncode == 2  # no stages at all
