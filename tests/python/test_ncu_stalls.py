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


def write_csv(path):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        writer.writerow(["Kernel Name", "forward_wgmma_kernel"])
        writer.writerow(HEADER)
        writer.writerows(ROWS)


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
