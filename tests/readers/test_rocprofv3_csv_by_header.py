"""rocprofv3 CSV parts are recognised by their header, not only by name.

rocprofv3 names its parts ``<prefix>_kernel_trace.csv`` & co.; people rename them when they
collect or attach them (``kernels.csv``). A reader that went by names alone would answer "no
trace found" for a directory of renamed parts, and ``copyprof inspect kernels.csv`` would print
nothing and exit 0. The content
below is the project's generation-3 fixture (tests/data/rocprofv3/gen3), renamed.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from copyprof.readers.discover import discover
from copyprof.readers.rocprofv3_csv_files import csv_groups, domain_by_header
from copyprof.reading import read_runs

GEN3 = Path(__file__).parents[1] / "data" / "rocprofv3" / "gen3"
RENAMED = {"908_kernel_trace.csv": "kernels.csv", "908_hip_api_trace.csv": "hip calls.csv",
           "908_marker_api_trace.csv": "markers.csv", "908_memory_copy_trace.csv": "copies.csv",
           "908_agent_info.csv": "gpus.csv"}


def _renamed(tmp_path: Path) -> Path:
    for old, new in RENAMED.items():
        shutil.copy(GEN3 / old, tmp_path / new)
    return tmp_path


def test_domain_from_header_and_first_row(tmp_path):
    d = _renamed(tmp_path)
    got = {p.name: domain_by_header(str(p)) for p in sorted(d.iterdir())}
    # hip and marker API files share one header: the first row's Domain tells them apart
    assert got == {"copies.csv": "memory_copy_trace", "gpus.csv": "agent_info", "hip calls.csv": "hip_api_trace",
                   "kernels.csv": "kernel_trace", "markers.csv": "marker_api_trace"}


def test_renamed_parts_read_as_the_named_ones(tmp_path):
    (tmp_path / "renamed").mkdir()
    d = _renamed(tmp_path / "renamed")
    [group] = csv_groups([str(d)])
    assert [Path(p).name for p in group] == ["kernels.csv", "copies.csv", "hip calls.csv", "markers.csv", "gpus.csv"]
    [renamed] = read_runs([str(d)])
    [named] = read_runs([str(GEN3)])
    assert renamed.events.equals(named.events)  # same table: devices from gpus.csv, copies, markers
    assert renamed.meta.devices == named.meta.devices and renamed.meta.kind_counts == named.meta.kind_counts


def test_one_renamed_file_named_by_the_user(tmp_path):
    shutil.copy(GEN3 / "908_kernel_trace.csv", tmp_path / "kernels.csv")
    [src] = discover([str(tmp_path / "kernels.csv")])
    assert src.fmt == "rocprofv3-csv" and Path(src.path).name == "kernels.csv"
    proc = subprocess.run([sys.executable, "-m", "copyprof", "inspect", "--no-cache", "--format", "json",
                           str(tmp_path / "kernels.csv")], capture_output=True, text=True)
    assert proc.returncode == 0 and '"kernel": 5' in proc.stdout, proc.stderr


def test_repeated_domains_are_not_merged(tmp_path):
    # Two renamed kernel traces in one directory may be two processes: each is its own group.
    shutil.copy(GEN3 / "908_kernel_trace.csv", tmp_path / "a.csv")
    shutil.copy(GEN3 / "908_kernel_trace.csv", tmp_path / "b.csv")
    assert [[Path(p).name for p in g] for g in csv_groups([str(tmp_path)])] == [["a.csv"], ["b.csv"]]


def test_rocprofv3_outputs_we_do_not_read_stay_out(tmp_path):
    # An HSA API trace has the API header but no row copyprof reads; statistics files are never
    # sniffed; a HIP API file under rocprofv3's other name for it (the rocprofiler-sdk docs'
    # hip_runtime_trace.csv) is read by its rows.
    hip = (GEN3 / "908_hip_api_trace.csv").read_text().splitlines()
    (tmp_path / "908_hsa_api_trace.csv").write_text("\n".join([hip[0]] + [r.replace('"HIP_', '"HSA_')
                                                                         for r in hip[1:]]) + "\n")
    (tmp_path / "908_kernel_stats.csv").write_text("Name,Calls\n")
    assert csv_groups([str(tmp_path)]) == []
    (tmp_path / "908_hip_runtime_trace.csv").write_text("\n".join(hip) + "\n")
    assert [[Path(p).name for p in g] for g in csv_groups([str(tmp_path)])] == [["908_hip_runtime_trace.csv"]]
