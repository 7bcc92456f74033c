"""rocprofv3 JSON reader: the real MI350X sample, a hand-made multi-process file, bad input."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from copyprof.errors import CopyprofError
from copyprof.readers.rocprofv3_json import read_rocprofv3_json

DATA = Path(__file__).parents[1] / "data" / "rocprofv3" / "json"
SMALL = DATA / "1001_results.json"
SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "sample_traces"
SAMPLE_908 = SAMPLES / "rocprofv3_json_gfx950_mi350x_908_results.json.gz"
needs_sample = pytest.mark.skipif(
    not SAMPLE_908.exists(), reason=f"real rocprofv3 sample not present at {SAMPLE_908}")


# ----------------------------------------------------------------------------- real sample
@pytest.fixture(scope="module")
def t908():
    traces = read_rocprofv3_json(str(SAMPLE_908))
    assert len(traces) == 1  # one element in "rocprofiler-sdk-tool": one process (pid 908)
    return traces[0]


@needs_sample
def test_908_counts(t908) -> None:
    # Expected values recounted with a one-off stdlib script (json.load of the gunzipped file):
    #   len(buffer_records.kernel_dispatch) == 43915, all with kind 11 / operation 2, which the
    #   file's own strings.buffer_records names KERNEL_DISPATCH / KERNEL_DISPATCH_COMPLETE;
    #   joining dispatch_info.kernel_id to kernel_symbols[].formatted_kernel_name gives
    #   3153 "__amd_rocclr_copyBuffer" (durations end-start: median 2680 ns, sum 10,051,659 ns,
    #   of which 1200 have grid 49152 / workgroup 512) and 3213 "__amd_rocclr_fillBufferAligned";
    #   memory_copy, hip_api and marker_api lists are empty. This matches the README census.
    ev = t908.events
    assert len(ev) == 43915
    assert t908.meta.kind_counts == {"kernel": 43915}
    cb = ev[ev.name == "__amd_rocclr_copyBuffer"]
    assert len(cb) == 3153
    assert cb.dur_ns.median() == 2680
    assert cb.dur_ns.sum() == 10_051_659
    assert ((cb.grid_x == 96) & (cb.block_x == 512)).sum() == 1200  # 49152 / 512 work-items
    assert (ev.name == "__amd_rocclr_fillBufferAligned").sum() == 3213
    assert (ev.bytes == -1).all() and (ev.bytes_src == "none").all()  # dispatches carry no bytes
    assert (ev["rank"] == 0).all() and ev.on_gpu.all()
    assert not ev.name.astype(str).str.endswith(".kd").any()  # formatted names, .kd stripped


@needs_sample
def test_908_meta_and_devices(t908) -> None:
    m = t908.meta
    assert (m.format, m.flavour, m.ranks, m.grid_unit) == ("rocprofv3-json", "rocprofiler-sdk", [0], "work-items")
    assert m.metadata["pid"] == 908 and m.metadata["hostname"] == "smci350-zts-gtu-c6-25"
    assert "aorta/train.py" in m.metadata["command"]
    # agents[]: 2 CPUs then 8 GPUs (type 2, gfx950, 256 CUs); every dispatch ran on the first GPU.
    assert len(m.devices) == 8
    assert {(d["arch"], d["name"], d["cus"]) for d in m.devices} == {("gfx950", "AMD Instinct MI350X", 256)}
    assert set(t908.events.device) == {0}
    assert m.graph_launches == 0  # no HIP API trace in this capture
    span = (t908.events.start_ns + t908.events.dur_ns).max() - t908.events.start_ns.min()
    assert 15.0e9 < span < 15.2e9  # ~15 s of ns timestamps


# ----------------------------------------------------------------------------- small file
def test_small_file_two_processes() -> None:
    a, b = read_rocprofv3_json(str(SMALL))
    assert (a.meta.metadata["pid"], b.meta.metadata["pid"]) == (1001, 1002)
    assert a.meta.kind_counts == {"kernel": 3, "memcpy": 2, "runtime": 3, "annotation": 1}
    assert b.meta.kind_counts == {"kernel": 1}


def test_enums_resolved_through_the_files_string_table() -> None:
    # In this file KERNEL_DISPATCH is kind 3 and MEMORY_COPY kind 4 (908 uses 11 and 10):
    # records are only recognised if the reader uses strings.buffer_records.
    a, _ = read_rocprofv3_json(str(SMALL))
    ev = a.events
    m = ev[ev.kind == "memcpy"].reset_index(drop=True)
    assert m.name.tolist() == ["Memcpy DtoD", "Memcpy HtoD"] and m.copy_dir.tolist() == ["DtoD", "HtoD"]
    assert m.bytes.tolist() == [1048576, 4096] and (m.bytes_src == "event").all()
    assert m.device.tolist() == [0, 0]  # DtoD from GPU 7002 (device 0); HtoD into 7002
    rt = ev[ev.kind == "runtime"]
    assert sorted(rt.name) == ["hipGraphLaunch", "hipLaunchKernel", "hipMemcpyAsync"]
    assert a.meta.graph_launches == 1 and not rt.on_gpu.any()
    assert set(rt.stream) == {1001, 1002}  # host rows: stream = thread id


def test_kernel_names_grid_and_correlation() -> None:
    a, b = read_rocprofv3_json(str(SMALL))
    k = a.events[a.events.kind == "kernel"].set_index("correlation")
    assert k.loc[21, "name"] == "__amd_rocclr_copyBuffer" and k.loc[21, "grid_x"] == 96
    assert k.loc[22, "name"] == "__amd_rocclr_fillBufferAligned"  # stays a kernel
    # No formatted_kernel_name for kernel 40: kernel_name is used, with ".kd" stripped.
    assert k.loc[23, "name"] == "_Z13rms_norm_fp16PKvPvi"
    assert (k.loc[23, "grid_x"], k.loc[23, "grid_y"]) == (4, 2)  # ceil(1000/256), 2/1
    assert k.loc[23, "device"] == 1 and k.loc[23, "external_id"] == 77
    assert k.loc[21, "external_id"] == -1  # external 0 means none
    assert k.loc[21, "stream"] == 3 and a.meta.metadata["stream_field"] == "stream_id"
    # Process 1002 only has stream handle 0 -> the HSA queue is used as the stream.
    assert b.events.stream.tolist() == [9] and b.meta.metadata["stream_field"] == "queue_id"
    assert [d["arch"] for d in a.meta.devices] == ["gfx942", "gfx942"]


def test_marker_message_is_the_annotation_name() -> None:
    a, _ = read_rocprofv3_json(str(SMALL))
    ann = a.events[a.events.kind == "annotation"]
    assert ann.name.tolist() == ["decode_step[bs=32]"] and ann.dur_ns.tolist() == [60000]


def test_marker_messages_as_object_and_mismatched_kinds(tmp_path: Path) -> None:
    doc = json.loads(SMALL.read_text())
    proc = doc["rocprofiler-sdk-tool"][0]
    proc["strings"]["marker_api"] = {"20": "prefill"}  # tolerate a map written as an object
    # A record in the kernel_dispatch list whose kind is MEMORY_COPY is not a dispatch.
    bogus = dict(proc["buffer_records"]["kernel_dispatch"][0], kind=4)
    proc["buffer_records"]["kernel_dispatch"].append(bogus)
    p = tmp_path / "x_results.json"
    p.write_text(json.dumps(doc))
    a, _ = read_rocprofv3_json(str(p))
    assert a.events[a.events.kind == "annotation"].name.tolist() == ["prefill"]
    assert a.meta.kind_counts["kernel"] == 3
    assert any("skipped 1" in w for w in a.meta.warnings)


# ----------------------------------------------------------------------------- bad input
def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "e_results.json"
    p.write_bytes(b"")
    with pytest.raises(CopyprofError, match="empty"):
        read_rocprofv3_json(str(p))


def test_truncated_plain_json(tmp_path: Path) -> None:
    p = tmp_path / "t_results.json"
    p.write_bytes(SMALL.read_bytes()[:3000])
    with pytest.raises(CopyprofError, match="truncated") as e:
        read_rocprofv3_json(str(p))
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_gzip_truncated_mid_stream(tmp_path: Path) -> None:
    # A gzip'd results file cut in the middle of the compressed stream: one-line error.
    data = gzip.compress(SMALL.read_bytes())
    p = tmp_path / "g_results.json.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(CopyprofError) as e:
        read_rocprofv3_json(str(p))
    assert str(p) in str(e.value) and "\n" not in str(e.value)


@needs_sample
def test_real_sample_truncated_mid_stream(tmp_path: Path) -> None:
    data = SAMPLE_908.read_bytes()
    p = tmp_path / "908_results.json.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(CopyprofError, match="compressed stream ends early"):
        read_rocprofv3_json(str(p))


def test_wrong_json_document(tmp_path: Path) -> None:
    p = tmp_path / "k.json"
    p.write_text('{"traceEvents": []}')
    with pytest.raises(CopyprofError, match="not a rocprofv3 results JSON"):
        read_rocprofv3_json(str(p))


def test_no_process(tmp_path: Path) -> None:
    p = tmp_path / "n_results.json"
    p.write_text('{"rocprofiler-sdk-tool": []}')
    with pytest.raises(CopyprofError, match="no process"):
        read_rocprofv3_json(str(p))
