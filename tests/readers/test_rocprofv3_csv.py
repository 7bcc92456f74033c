"""rocprofv3 CSV reader: all three kernel_trace header generations, rocpd2csv, edge cases.

Fixtures in tests/data/rocprofv3/ are hand-made, modelled on the rocprofiler-sdk docs CSVs
and the rows TraceLens uses in its tests (see tests/data/rocprofv3/README.md).
"""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from copyprof.errors import CopyprofError
from copyprof.events import COLUMNS
from copyprof.readers.rocprofv3_csv import read_rocprofv3_csv
from copyprof.readers.rocprofv3_csv_files import csv_groups, is_rocprofv3_csv

DATA = Path(__file__).parents[1] / "data" / "rocprofv3"


def _read_dir(d: Path):
    groups = csv_groups([str(d)])
    assert len(groups) == 1, groups
    traces = read_rocprofv3_csv(groups[0])
    assert len(traces) == 1, "one group reads into a one-element list"
    return traces[0]


# ----------------------------------------------------------------------------- detection
@pytest.mark.parametrize("rel", [
    "gen1/4242_kernel_trace.csv", "gen1/4242_memory_copy_trace.csv", "gen2/kernel_trace.csv",
    "gen3/908_kernel_trace.csv", "gen3/908_hip_api_trace.csv", "gen3/908_marker_api_trace.csv",
    "rocpd2csv/out_kernel_trace.csv", "rocpd2csv/out_regions_trace.csv",
])
def test_detects_every_trace_header(rel: str) -> None:
    # Every event-domain header generation, with or without rocpd2csv's leading Guid.
    assert is_rocprofv3_csv((DATA / rel).read_bytes()[:4096])


@pytest.mark.parametrize("head", [
    (DATA / "gen3/908_agent_info.csv").read_bytes()[:4096],  # agent_info alone is no trace
    b'"Index","KernelName","gpu-id","queue-id","queue-index","pid","tid","grd","wgr"\n',  # rocprof v1
    b"hello,world\n1,2\n",
    b"",
])
def test_rejects_other_headers(head: bytes) -> None:
    assert not is_rocprofv3_csv(head)


def test_detection_ignores_case_and_bom() -> None:
    # Headers are matched case-insensitively (rocpd2csv writes Lds_Block_Size, not LDS_Block_Size).
    assert is_rocprofv3_csv(b'\xef\xbb\xbfkind,agent_id,kernel_name,start_timestamp,end_timestamp\n')


# ----------------------------------------------------------------------------- grouping
def test_groups_by_prefix_and_orders_kernel_first(tmp_path: Path) -> None:
    # Two processes' outputs in one directory -> two groups; stats/HSA files are not ours.
    for rel in ("gen3/908_kernel_trace.csv", "gen3/908_hip_api_trace.csv", "gen1/4242_kernel_trace.csv"):
        shutil.copy(DATA / rel, tmp_path)
    (tmp_path / "908_kernel_stats.csv").write_text("Name,Calls\n")
    (tmp_path / "908_hsa_api_trace.csv").write_text("Domain,Function\n")
    (tmp_path / "notes.txt").write_text("x")
    groups = csv_groups([str(tmp_path)])
    names = [[Path(p).name for p in g] for g in groups]
    assert names == [["4242_kernel_trace.csv"], ["908_kernel_trace.csv", "908_hip_api_trace.csv"]]


def test_group_of_only_agent_info_is_dropped(tmp_path: Path) -> None:
    shutil.copy(DATA / "gen3/908_agent_info.csv", tmp_path)
    assert csv_groups([str(tmp_path)]) == []


# ----------------------------------------------------------------------------- generation 1
def test_gen1_old_header_integer_agents() -> None:
    t = _read_dir(DATA / "gen1")
    ev = t.events
    assert t.meta.format == "rocprofv3-csv" and t.meta.flavour == "rocprofiler-sdk"
    assert t.meta.ranks == [0] and t.meta.metadata["pid"] == 4242  # pid from the file prefix
    assert t.meta.grid_unit == "work-items"
    assert t.meta.kind_counts == {"kernel": 3, "memcpy": 2}
    k = ev[ev.kind == "kernel"].reset_index(drop=True)
    # No agent_info: GPUs are numbered by ordinal among the agents kernels ran on (2 -> 0, 4 -> 1).
    assert k.device.tolist() == [0, 0, 1]
    # No Stream_Id column in this generation: the HSA queue is the stream.
    assert k.stream.tolist() == [1, 1, 2] and t.meta.metadata["stream_field"] == "queue_id"
    # copyBuffer: 49152 work-items / 512 per workgroup = 96 blocks; it stays a kernel.
    cb = k[k.name == "__amd_rocclr_copyBuffer"].iloc[0]
    assert (cb.grid_x, cb.block_x, cb.dur_ns, cb.correlation) == (96, 512, 2680, 11)
    assert (k.bytes == -1).all() and (k.bytes_src == "none").all()  # never inferred from grid
    # 1024x1024 work-items with 64x1 workgroups -> 16 x 1024 blocks.
    add = k[k.name.str.startswith("void addition_kernel")].iloc[0]
    assert (add.grid_x, add.grid_y, add.grid_z) == (16, 1024, 1)
    m = ev[ev.kind == "memcpy"].reset_index(drop=True)
    assert m.name.tolist() == ["Memcpy HtoD", "Memcpy DtoD"] and m.copy_dir.tolist() == ["HtoD", "DtoD"]
    # HtoD is done by the destination GPU (agent 2), DtoD attributed to the source GPU (agent 2).
    assert m.device.tolist() == [0, 0] and (m.bytes == -1).all() and m.on_gpu.all()
    assert (m.stream == -1).all()  # the old memory_copy header has no Stream_Id


# ----------------------------------------------------------------------------- generation 2
def test_gen2_stream_id_and_no_pid_prefix() -> None:
    t = _read_dir(DATA / "gen2")
    k = t.events[t.events.kind == "kernel"].reset_index(drop=True)
    assert "pid" not in t.meta.metadata  # kernel_trace.csv has no pid prefix and no Process_Id
    assert k.stream.tolist() == [1, 2, 2] and t.meta.metadata["stream_field"] == "stream_id"
    # 1000 work-items / 64 = 15.6 -> rounded up to 16 blocks (a partial block still runs).
    sub = k[k.name.str.startswith("subtract_kernel")].iloc[0]
    assert sub.grid_x == 16
    m = t.events[t.events.kind == "memcpy"].reset_index(drop=True)
    assert m.copy_dir.tolist() == ["HtoD", "DtoH"] and m.stream.tolist() == [1, 2]
    assert m.device.tolist() == [0, 0]  # DtoH: the source agent 2 is the GPU


# ----------------------------------------------------------------------------- generation 3
def test_gen3_full_directory_with_agent_info() -> None:
    t = _read_dir(DATA / "gen3")
    ev = t.events
    assert t.meta.kind_counts == {"kernel": 5, "memcpy": 3, "runtime": 9, "annotation": 2}
    assert t.meta.graph_launches == 2  # two hipGraphLaunch rows in hip_api_trace
    assert t.meta.partial is None and t.meta.warnings == []
    assert list(ev.columns) == list(COLUMNS)  # the one event table, nothing extra
    assert (ev["rank"] == 0).all() and (ev.dur_ns >= 0).all()
    # agent_info: nodes 0-1 are CPUs, 2-3 GPUs -> "Agent 2" is device 0, "Agent 3" device 1.
    assert [(d["index"], d["arch"], d["name"], d["cus"]) for d in t.meta.devices] == [
        (0, "gfx942", "AMD Instinct MI300X", 304), (1, "gfx942", "AMD Instinct MI300X", 304)]
    k = ev[ev.kind == "kernel"]
    cb = k[k.name == "__amd_rocclr_copyBuffer"]
    assert cb.grid_x.tolist() == [96, 256, 96]  # 49152/512, 131072/512, 49152/512
    assert cb.device.tolist() == [0, 0, 1]
    fill = k[k.name == "__amd_rocclr_fillBufferAligned"]
    assert len(fill) == 1  # memset-like blit kernels stay kind "kernel"; taxonomy classifies them
    # A quoted kernel name with commas inside survives intact.
    assert any(n.startswith("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor")
               for n in k.name)
    m = ev[ev.kind == "memcpy"].set_index("correlation")
    assert m.loc[90, "device"] == 0 and m.loc[112, "device"] == 1  # HtoD -> dst, DtoH -> src
    assert m.loc[105, "copy_dir"] == "DtoD" and m.loc[105, "name"] == "Memcpy DtoD"
    rt = ev[ev.kind == "runtime"]
    assert not rt.on_gpu.any() and set(rt.stream) == {908, 911}  # host rows: stream = thread id
    assert (rt.device == -1).all()
    # hipMemcpyAsync correlation 101 joins the copyBuffer dispatch with the same id.
    assert set(rt[rt.name == "hipMemcpyAsync"].correlation) >= {101}
    ann = ev[ev.kind == "annotation"]
    assert ann.name.tolist() == ["execute_model", "decode_step[bs=32]"] and not ann.on_gpu.any()


# ----------------------------------------------------------------------------- rocpd2csv
def test_rocpd2csv_guid_casing_regions_and_logical_agents() -> None:
    t = _read_dir(DATA / "rocpd2csv")
    ev = t.events
    assert t.meta.metadata["pid"] == 714789  # prefix "out" is not a pid; Process_Id is
    assert t.meta.kind_counts == {"kernel": 2, "memcpy": 1, "runtime": 2, "annotation": 1}
    # "Agent 4" is the 3rd GPU in out_agent_info.csv (nodes 2,3,4,5 are GPUs) -> device 2.
    assert set(ev[ev.kind == "kernel"].device) == {2}
    assert ev[ev.kind == "memcpy"].device.tolist() == [2]
    assert t.meta.graph_launches == 1
    # The regions file mixes domains: the HSA row is skipped and said so.
    assert any("HSA_CORE_API" in w for w in t.meta.warnings)
    assert ev[ev.kind == "annotation"].name.tolist() == ["step 7"]
    lap = ev[ev.name.astype(str).str.contains("laplacian")].iloc[0]
    assert lap.grid_x == 912  # 233472 / 256


def test_rocpd2csv_graph_columns_and_empty_cells() -> None:
    t = _read_dir(DATA / "rocpd2csv_graph")
    k = t.events
    assert k.graph_id.tolist() == [3, -1] and k.graph_node_id.tolist() == [17, -1]  # NULL -> -1


def test_group_without_kernel_trace_still_reads() -> None:
    paths = [str(DATA / "gen3/908_hip_api_trace.csv"), str(DATA / "gen3/908_marker_api_trace.csv")]
    t = read_rocprofv3_csv(paths)[0]
    assert t.meta.kind_counts == {"runtime": 9, "annotation": 2}


def test_lowercase_header_and_gzip(tmp_path: Path) -> None:
    # Header match is case-insensitive, and a gzip'd CSV (by magic bytes) reads the same.
    text = (DATA / "gen3/908_kernel_trace.csv").read_text()
    header, rest = text.split("\n", 1)
    p = tmp_path / "908_kernel_trace.csv.gz"
    p.write_bytes(gzip.compress((header.lower() + "\n" + rest).encode()))
    t = read_rocprofv3_csv([str(p)])[0]
    assert len(t.events) == 5 and t.events.grid_x.tolist()[0] == 96


# ----------------------------------------------------------------------------- bad input
def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "1_kernel_trace.csv"
    p.write_bytes(b"")
    with pytest.raises(CopyprofError, match="empty") as e:
        read_rocprofv3_csv([str(p)])
    assert str(p) in str(e.value)


def test_header_only(tmp_path: Path) -> None:
    p = tmp_path / "1_kernel_trace.csv"
    p.write_text((DATA / "gen3/908_kernel_trace.csv").read_text().split("\n")[0] + "\n")
    with pytest.raises(CopyprofError, match="header but no rows"):
        read_rocprofv3_csv([str(p)])


def test_wrong_header(tmp_path: Path) -> None:
    p = tmp_path / "1_kernel_trace.csv"
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(CopyprofError, match="not a rocprofv3 CSV"):
        read_rocprofv3_csv([str(p)])


def test_missing_required_column(tmp_path: Path) -> None:
    p = tmp_path / "1_kernel_trace.csv"
    p.write_text('"Kind","Agent_Id","Kernel_Name","Start_Timestamp"\n"KERNEL_DISPATCH",2,"k",5\n')
    with pytest.raises(CopyprofError, match="end_timestamp"):
        read_rocprofv3_csv([str(p)])


def test_non_numeric_timestamp_names_line_and_column(tmp_path: Path) -> None:
    lines = (DATA / "gen1/4242_kernel_trace.csv").read_text().splitlines()
    lines[2] = lines[2].replace("2414192765424862", "soon")
    p = tmp_path / "4242_kernel_trace.csv"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(CopyprofError, match=r"line 3: start_timestamp is 'soon'"):
        read_rocprofv3_csv([str(p)])


@pytest.mark.parametrize("cut_after", ['"__amd_rocclr_cop', "1700000000140000,17000"])
def test_truncated_last_line_keeps_good_rows(tmp_path: Path, cut_after: str) -> None:
    # A capture killed mid-write: the last row is cut inside a quoted name or inside a number.
    # The four complete rows are kept and meta.partial says what happened.
    text = (DATA / "gen3/908_kernel_trace.csv").read_text()
    cut = text.rindex(cut_after) + len(cut_after)
    p = tmp_path / "908_kernel_trace.csv"
    p.write_text(text[:cut])
    t = read_rocprofv3_csv([str(p)])[0]
    assert len(t.events) == 4
    assert t.meta.partial and "cut off" in t.meta.partial and "4 rows" in t.meta.partial


def test_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    p = tmp_path / "908_kernel_trace.csv"
    p.write_text((DATA / "gen3/908_kernel_trace.csv").read_text().rstrip("\n"))
    t = read_rocprofv3_csv([str(p)])[0]
    assert len(t.events) == 5 and t.meta.partial is None


def test_truncated_gzip_csv_is_partial(tmp_path: Path) -> None:
    data = gzip.compress((DATA / "gen3/908_kernel_trace.csv").read_bytes() * 1)
    p = tmp_path / "908_kernel_trace.csv.gz"
    p.write_bytes(data[: len(data) - 12])  # drop the gzip trailer and some deflate data
    t = read_rocprofv3_csv([str(p)])[0]
    assert 0 < len(t.events) <= 5 and t.meta.partial


def test_end_before_start_is_clamped_and_warned(tmp_path: Path) -> None:
    # The table promises dur_ns >= 0; a row whose end precedes its start gets 0 and a warning.
    lines = (DATA / "gen1/4242_kernel_trace.csv").read_text().splitlines()
    lines[1] = lines[1].replace("2414192765356017", "2414192765353000")
    p = tmp_path / "4242_kernel_trace.csv"
    p.write_text("\n".join(lines) + "\n")
    t = read_rocprofv3_csv([str(p)])[0]
    assert t.events.dur_ns.tolist()[0] == 0 and any("end before" in w for w in t.meta.warnings)


def test_agent_info_only_group_is_an_error() -> None:
    with pytest.raises(CopyprofError, match="only agent_info"):
        read_rocprofv3_csv([str(DATA / "gen3/908_agent_info.csv")])
