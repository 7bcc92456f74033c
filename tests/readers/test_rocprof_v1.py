"""Tests for the legacy rocprof v1 results.csv reader.

The fixture tests/data/rocprof_v1_results.csv is hand-made with the header rocprof v1 writes on
recent ROCm (22 columns ending in DurationNs, as in published outputs quoted in
shared/docs/trace-formats.md §2.6). Its rows: two ``bodyForce(...) [clone .kd]`` dispatches
(the name contains a comma inside quotes), one ``__amd_rocclr_copyBuffer.kd`` (a HIP runtime
blit copy: grd 49152 work-items, wgr 512) and one ``__amd_rocclr_fillBufferAligned.kd``.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from copyprof.errors import CopyprofError
from copyprof.readers.rocprof_v1 import is_rocprof_v1_csv, read_rocprof_v1_csv

DATA = Path(__file__).resolve().parents[1] / "data"
CSV = DATA / "rocprof_v1_results.csv"
HEADER = CSV.read_text().splitlines()[0]


def test_reads_kernels_as_written() -> None:
    t, = read_rocprof_v1_csv(str(CSV))
    ev, meta = t.events, t.meta
    assert meta.kind_counts == {"kernel": 4} and len(ev) == 4 and (ev["kind"] == "kernel").all()
    # Names are kept verbatim, including the '[clone .kd]' suffix and the comma inside quotes:
    # the copy taxonomy matches on the exact spelling.
    assert ev["name"].astype(str).tolist() == [
        "bodyForce(Body*, float, int) [clone .kd]", "__amd_rocclr_copyBuffer.kd",
        "__amd_rocclr_fillBufferAligned.kd", "bodyForce(Body*, float, int) [clone .kd]"]
    # Durations are EndNs - BeginNs (the copyBuffer row: ...312680 - ...310000 = 2680 ns).
    assert ev["dur_ns"].tolist() == [26316649, 2680, 1500, 26115847]
    assert ev["start_ns"].iloc[1] == 1591372836310000
    # gpu-id -> device, queue-id -> stream.
    assert ev["device"].tolist() == [0, 0, 0, 1] and ev["stream"].tolist() == [0, 1, 1, 0]
    assert ev["on_gpu"].all()


def test_grid_is_stored_in_blocks() -> None:
    # grd is work-items: 65536/256 = 256 blocks, 49152/512 = 96, 1024/256 = 4, and 257/256 -> 2
    # (ceil: a partial last workgroup is still a workgroup). block_x = wgr; y/z are not in the file -> 1.
    t, = read_rocprof_v1_csv(str(CSV))
    ev = t.events
    assert ev["grid_x"].tolist() == [256, 96, 4, 2]
    assert ev["block_x"].tolist() == [256, 512, 256, 256]
    assert set(ev["grid_y"]) == set(ev["grid_z"]) == set(ev["block_y"]) == set(ev["block_z"]) == {1}
    assert t.meta.grid_unit == "work-items"


def test_no_bytes_or_copy_classification() -> None:
    # The reader must not guess bytes from the grid nor classify the rocclr copy: bytes stay -1.
    t, = read_rocprof_v1_csv(str(CSV))
    ev = t.events
    assert (ev["bytes"] == -1).all() and (ev["bytes_src"] == "none").all()
    assert (ev["copy_dir"] == "").all() and (ev["correlation"] == -1).all()
    meta = t.meta
    assert meta.format == "rocprof-v1" and meta.ranks == [0] and meta.partial is None and meta.warnings == []
    assert meta.metadata["pids"] == [3670615]


def test_gzip_input(tmp_path: Path) -> None:
    path = tmp_path / "results.csv.gz"
    path.write_bytes(gzip.compress(CSV.read_bytes()))
    t, = read_rocprof_v1_csv(str(path))
    assert len(t.events) == 4


def test_old_header_without_duration(tmp_path: Path) -> None:
    # Older ROCm: vgpr/sgpr/fbar instead of arch_vgpr/accum_vgpr/wave_size, no DurationNs.
    # Columns are found by name, so the result is the same kind of table.
    path = tmp_path / "results.csv"
    path.write_text(
        '"Index","KernelName","gpu-id","queue-id","queue-index","pid","tid","grd","wgr","lds","scr","vgpr","sgpr",'
        '"fbar","sig","obj","DispatchNs","BeginNs","EndNs","CompleteNs"\n'
        '0,"vecAdd",0,0,1,12345,12345,65536,256,0,0,16,8,0,"0x0","0x1",1234567890,1234567900,1234568000,1234568100\n')
    t, = read_rocprof_v1_csv(str(path))
    assert t.events[["grid_x", "block_x", "dur_ns"]].values.tolist() == [[256, 256, 100]]


@pytest.mark.parametrize("head, expected", [
    (CSV.read_bytes()[:300], True),
    (b"\xef\xbb\xbf" + CSV.read_bytes()[:300], True),  # UTF-8 BOM
    (b"Index,KernelName,gpu-id,queue-id,grd,wgr,BeginNs,EndNs\n", True),  # unquoted
    (b'"Index","KernelName","gpu-id","grd","wgr"\n', True),  # --timestamp off: the reader explains
    (b'"Kind","Agent_Id","Queue_Id","Kernel_Id","Kernel_Name"\n', False),  # rocprofv3 kernel trace
    (b'"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n', False),  # results.stats.csv
    (b'{"traceEvents": []}', False),
    (b"", False),
])
def test_detection(head: bytes, expected: bool) -> None:
    assert is_rocprof_v1_csv(head) is expected


def test_truncated_mid_row_keeps_earlier_rows(tmp_path: Path) -> None:
    # Cut the file inside the last row's quoted kernel name: 3 whole rows survive, partial says so.
    text = CSV.read_text()
    cut = text.rindex('"bodyForce') + 5
    path = tmp_path / "results.csv"
    path.write_text(text[:cut])
    t, = read_rocprof_v1_csv(str(path))
    assert len(t.events) == 3 and t.meta.kind_counts == {"kernel": 3}
    assert t.meta.partial is not None and "cut off" in t.meta.partial and "read 3 kernel rows" in t.meta.partial


def test_truncated_inside_last_number_warns(tmp_path: Path) -> None:
    # A cut inside DurationNs leaves a row that still parses; the missing final newline is the only
    # sign, so the row is kept with a warning rather than silently trusted.
    text = CSV.read_text().rstrip("\n")
    path = tmp_path / "results.csv"
    path.write_text(text[:-3])
    t, = read_rocprof_v1_csv(str(path))
    assert len(t.events) == 4 and any("newline" in w for w in t.meta.warnings)


def test_malformed_row_in_the_middle_is_skipped(tmp_path: Path) -> None:
    lines = CSV.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace("1591372836310000", "not-a-number")
    path = tmp_path / "results.csv"
    path.write_text("".join(lines))
    t, = read_rocprof_v1_csv(str(path))
    assert len(t.events) == 3 and "__amd_rocclr_copyBuffer.kd" not in set(t.events["name"].astype(str))
    assert any("skipped 1 malformed rows (first: data row 2)" in w for w in t.meta.warnings)
    assert t.meta.partial is None


@pytest.mark.parametrize("content, message", [
    ("", "empty file"),
    (HEADER + "\n", "no kernel rows"),  # header only: the profile recorded no dispatch
    ('"Index","Kern', "header lacks"),  # cut inside the header
    ('"Index","KernelName","gpu-id","grd","wgr"\n0,"k",0,1,1\n', "--timestamp on"),
    ("not,a,rocprof\n1,2,3\n", "header lacks"),
])
def test_bad_input_is_one_line_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "results.csv"
    path.write_text(content)
    with pytest.raises(CopyprofError, match=message) as err:
        read_rocprof_v1_csv(str(path))
    assert "\n" not in str(err.value) and err.value.path == str(path)
