"""scripts/ncu_stalls.py on a small source-page CSV in ncu's format (no GPU, no ncu needed)."""

import csv
import importlib.util
import pathlib

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "ncu_stalls.py"
spec = importlib.util.spec_from_file_location("ncu_stalls", SCRIPT)
ncu_stalls = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ncu_stalls)

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "stall_wait",
          "stall_long_sb", "stall_barrier", "stall_long_sb (Not Issued)"]
ROWS = [  # address, source, samples, wait, long_sb, barrier, long_sb not issued
    ["0x7f0000", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT", 50, 50, 0, 0, 0],
    ["0x7f0010", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR7+0x28800], R13", 5, 5, 0, 0, 0],
    ["0x7f0020", "R2UR UR8, R14", 5, 5, 0, 0, 0],
    ["0x7f0030", "@!P0  BRA 0x7f0100", 20, 0, 20, 0, 20],
    ["0x7f0040", "@!P1  BRA 0x7f0200", 10, 10, 0, 0, 0],  # P1: no try-wait wrote it
    ["0x7f0050", "WARPGROUP.DEPBAR.LE gsb0, 0x0", 10, 0, 0, 10, 0],
]


def write_csv(path, header=HEADER, rows=ROWS):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        writer.writerow(["Kernel Name", "forward_wgmma_kernel"])
        writer.writerow(header)
        writer.writerows(rows)


def test_summary_shares_sites_and_top_instructions(tmp_path):
    path = tmp_path / "sass.csv"
    write_csv(path)
    reasons, data = ncu_stalls.read(path)
    assert reasons == ["stall_wait", "stall_long_sb", "stall_barrier"]  # not the "Not Issued" one
    lines = ncu_stalls.summarise(reasons, data, top=2)
    assert lines[0] == "100 warp samples"
    assert lines[1] == "stall reasons: wait 70.0%, long_sb 20.0%, barrier 10.0%"
    # The P0 branch polls the try-wait two instructions before it; the P1 branch polls nothing.
    assert lines[2] == "sites: wgmma waits 10.0%, mbarrier waits 20.0%"
    assert "HGMMA" in lines[3] and "50.0%" in lines[3] and "wait 50" in lines[3]
    assert "20.0%" in lines[4] and "waits on: SYNCS.PHASECHK" in lines[4]
    assert "[UR7+0x28800]" in lines[4]
    assert len(lines) == 5


def test_a_report_without_source_counters_says_so(tmp_path):
    path = tmp_path / "sass.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        writer.writerow(HEADER)
        writer.writerow(["0x7f0000", "NOP", 0, 0, 0, 0, 0])
    reasons, data = ncu_stalls.read(path)
    assert ncu_stalls.summarise(reasons, data, top=5) == [
        "no stall samples (was the report taken with the source counters?)"]


def test_runs_of_equal_execution_count_with_their_shares(tmp_path):
    # A step loop that ran 100 times between per-item code that ran 10 times, and a run too
    # small to list (under 0.5% of the samples).
    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "stall_wait",
              "Instructions Executed"]
    rows = [["0x10", "LDS R10, [R15]", 10, 10, 10],
            ["0x20", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT", 40, 40, 100],
            ["0x30", "MUFU.EX2 R1, R2", 39, 39, 100],
            ["0x40", "STG.E.128 desc[UR24][R10.64], R24", 10, 10, 10],
            ["0x50", "EXIT", 1, 1, 10],
            ["0x60", "RET.REL.NODEC R20 0x0", 0, 0, 1]]
    path = tmp_path / "sass.csv"
    write_csv(path, header, rows)
    reasons, data = ncu_stalls.read(path)
    lines = ncu_stalls.summarise(reasons, data, top=1)
    start = lines.index("runs of equal execution count (rows, executed, share of samples, first):")
    runs = [line.split() for line in lines[start + 1:]]
    assert [(r[0], r[1], r[2]) for r in runs] == [
        ("0-0", "x10", "10.0%"), ("1-2", "x100", "79.0%"), ("3-4", "x10", "11.0%")]
    assert runs[1][3].startswith("HGMMA")
