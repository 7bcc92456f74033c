"""rocpd SQLite (``<pid>_results.db``, rocprofv3's default output from ROCm 7.0) -> Traces.

Read through the convenience views ``kernels``, ``memory_copies`` and ``regions``
(trace-formats.md §2.4) rather than the uuid-suffixed physical tables: the views already
join names, agents and correlation ids, and exist under the same names in every schema.

Why column aliases: the views were reshaped between schema 3.0 and 4.x (``corr_id`` became
``correlation_id``, ``agent_abs_index`` became ``agent_absolute_index``, graph ids appeared),
so each logical field lists its candidate column names and the first one present is used.
Columns are pulled with one cursor per view in large batches and transposed straight into
numpy arrays: no per-row dict or object, so a multi-million-dispatch database stays cheap.

Correlation: ``stack_id`` is rocprofiler's internal correlation id (the one CSV output calls
``Correlation_Id``); ``corr_id``/``correlation_id`` is the *external* id.
"""
from __future__ import annotations

import os
import sqlite3
from typing import Any

import numpy as np

from copyprof.errors import CopyprofError
from copyprof.events import Trace, TraceMeta
from copyprof.grouping import distinct
from copyprof.readers.rocprof_parts import assemble, copy_dir_of, finish_meta, grid_blocks, memcpy_name, part

_BATCH = 1 << 16

# logical field -> (candidate view columns, default when absent/NULL)
_KERNEL_FIELDS: dict[str, tuple[tuple[str, ...], Any]] = {
    "pid": (("pid",), -1),
    "name": (("name", "kernel_name"), ""),
    "start": (("start",), None),
    "end": (("end",), None),
    "agent_type": (("agent_type",), ""),
    "agent_index": (("agent_type_index",), -1),
    "agent_abs": (("agent_abs_index", "agent_absolute_index"), -1),
    "stream": (("stream_id",), -1),
    "queue": (("queue_id",), -1),
    "corr": (("stack_id",), -1),
    "ext": (("corr_id", "correlation_id"), -1),
    "grid_x": (("grid_x",), -1), "grid_y": (("grid_y",), -1), "grid_z": (("grid_z",), -1),
    "wg_x": (("workgroup_x",), -1), "wg_y": (("workgroup_y",), -1), "wg_z": (("workgroup_z",), -1),
    "graph": (("graph_exec_id",), -1),
    "graph_node": (("graph_node_id",), -1),
}
_COPY_FIELDS: dict[str, tuple[tuple[str, ...], Any]] = {
    "pid": (("pid",), -1),
    "name": (("name",), ""),
    "start": (("start",), None),
    "end": (("end",), None),
    "size": (("size",), -1),
    "stream": (("stream_id",), -1),
    "corr": (("stack_id",), -1),
    "ext": (("corr_id", "correlation_id"), -1),
    "src_type": (("src_agent_type",), ""),
    "src_index": (("src_agent_type_index",), -1),
    "dst_type": (("dst_agent_type",), ""),
    "dst_index": (("dst_agent_type_index",), -1),
    "graph": (("graph_exec_id",), -1),
    "graph_node": (("graph_node_id",), -1),
}
_REGION_FIELDS: dict[str, tuple[tuple[str, ...], Any]] = {
    "pid": (("pid",), -1),
    "category": (("category",), ""),
    "name": (("name",), ""),
    "start": (("start",), None),
    "end": (("end",), None),
    "tid": (("tid",), -1),
    "corr": (("stack_id",), -1),
    "ext": (("corr_id", "correlation_id"), -1),
}


def _objects(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}


def is_rocpd(conn: sqlite3.Connection) -> bool:
    """True for a rocpd database: ``rocpd_metadata`` / ``rocpd_*`` tables or the ``kernels`` view."""
    try:
        names = _objects(conn)
    except sqlite3.DatabaseError:
        return False
    if "StringIds" in names or any(n.startswith("CUPTI_ACTIVITY_KIND_") for n in names):
        return False  # Nsight Systems export
    return ("rocpd_metadata" in names or any(n.startswith("rocpd_kernel_dispatch") for n in names)
            or {"kernels", "memory_copies"} <= names)


def read_rocpd(path: str) -> list[Trace]:
    """Read a rocpd ``.db``: one Trace per profiled pid (kernels, copies, HIP API, markers)."""
    if not os.path.exists(path):
        raise CopyprofError("no such file", path=path)
    if os.path.getsize(path) == 0:
        raise CopyprofError("file is empty", path=path)
    from copyprof.readers.files import connect_readonly

    try:
        conn = connect_readonly(path)
    except sqlite3.Error as exc:
        raise CopyprofError(f"cannot open SQLite database: {exc}", path=path) from exc
    try:
        return _read(conn, path)
    except sqlite3.DatabaseError as exc:
        hint = "; is it truncated?" if "malformed" in str(exc) or "not a database" in str(exc) else ""
        raise CopyprofError(f"cannot read SQLite database ({exc}){hint}", path=path) from exc
    except UnicodeDecodeError as exc:  # a column name that is not UTF-8 (sqlite3 decodes names strictly)
        raise CopyprofError("cannot read SQLite database (a table or column name is not UTF-8: damaged file?)",
                            path=path) from exc
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, path: str) -> list[Trace]:
    names = _objects(conn)
    if not is_rocpd(conn) or not ({"kernels", "memory_copies"} & names):
        raise CopyprofError("not a rocpd database (no kernels or memory_copies view)", path=path)
    skipped_pids = np.empty(0, np.int64)
    problems: list[str] = []
    k = _fetch(conn, "kernels", _KERNEL_FIELDS, path, problems) if "kernels" in names else None
    m = _fetch(conn, "memory_copies", _COPY_FIELDS, path, problems) if "memory_copies" in names else None
    r = None
    if "regions" in names:
        r = _fetch(conn, "regions", _REGION_FIELDS, path, problems)
        cat = np.char.upper(r["category"].astype(str))
        r["marker"] = np.char.startswith(cat, "MARKER")
        keep = r["marker"] | np.char.startswith(cat, "HIP")
        skipped_pids = r["pid"][~keep]
        r = {key: v[keep] for key, v in r.items()}
    pids = set()
    for cols in (k, m, r):
        if cols is not None:
            pids |= set(distinct(cols["pid"]).tolist())
    if not pids:
        raise CopyprofError("holds no kernel, memory copy or HIP API/marker rows", path=path)

    devices = _devices(conn, names)
    metadata = _metadata(conn, names)
    procs = _processes(conn, names)
    traces = []
    for pid in sorted(pids):
        parts = []
        if k is not None and (sel := k["pid"] == pid).any():
            parts.append(_kernel_part(k, sel))
        if m is not None and (sel := m["pid"] == pid).any():
            parts.append(_copy_part(m, sel))
        if r is not None and (sel := r["pid"] == pid).any():
            kind = np.where(r["marker"][sel], "annotation", "runtime")
            parts.append(part(kind.astype(object), r["name"][sel], r["start"][sel], r["end"][sel],
                              stream=r["tid"][sel], correlation=r["corr"][sel], external_id=_ext(r["ext"][sel])))
        md = {**metadata, "pid": int(pid), **procs.get(int(pid), {})}
        warnings = list(problems)
        if skipped := int((skipped_pids == pid).sum()):
            warnings.append(f"skipped {skipped} regions that are neither HIP API nor markers")
        meta = TraceMeta(path=path, format="rocpd", flavour="rocprofiler-sdk", ranks=[0],
                         devices=devices, metadata=md, warnings=warnings)
        traces.append(finish_meta(meta, assemble(parts), parts))
    return traces


def _fetch(conn: sqlite3.Connection, view: str, fields: dict[str, tuple[tuple[str, ...], Any]],
           path: str, problems: list[str]) -> dict[str, np.ndarray]:
    """Select the fields' columns from a view (aliases resolved) into numpy arrays.

    SQLite does not enforce column types, so a damaged or hand-edited database can hold text,
    blobs or floats where integers belong. Such a cell is read as missing (the field's
    default); a row whose start or end is not an integer is dropped. Both are counted in
    ``problems`` (the traces' warnings), so the rest of the file is still read.
    """
    present = {d[0].lower() for d in conn.execute(f'SELECT * FROM "{view}" LIMIT 0').description}
    select: list[str] = []
    required: list[str] = []
    optional: list[str] = []
    for candidates, default in fields.values():
        col = next((c for c in candidates if c in present), None)
        if col is None and default is None:
            raise CopyprofError(f"view {view} lacks column {candidates[0]}", path=path)
        if col is None:
            select.append("''" if isinstance(default, str) else str(default))
        elif isinstance(default, str):
            select.append(f"COALESCE(\"{col}\", '')")
        else:
            (required if default is None else optional).append(col)
            select.append(f"CASE typeof(\"{col}\") WHEN 'integer' THEN \"{col}\" ELSE {-1 if default is None else default} END")
    select.append(" OR ".join(f"typeof(\"{c}\") != 'integer'" for c in required) or "0")
    select.append(" + ".join(f"(typeof(\"{c}\") NOT IN ('integer', 'null'))" for c in optional) or "0")
    cur = conn.execute(f'SELECT {", ".join(select)} FROM "{view}"')
    chunks: list[list[tuple[Any, ...]]] = [[] for _ in range(len(fields) + 2)]
    while batch := cur.fetchmany(_BATCH):
        for i, column in enumerate(zip(*batch)):
            chunks[i].append(column)
    flat = [[v for c in cols for v in c] for cols in chunks]
    drop = np.array(flat[-2], dtype=bool) if flat[-2] else np.zeros(0, bool)
    if bad := sum(flat[-1]):
        problems.append(f"view {view}: {bad} values are not integers (read as missing)")
    if drop.any():
        problems.append(f"view {view}: skipped {int(drop.sum())} rows whose start or end is not an integer")
    out: dict[str, np.ndarray] = {}
    for (key, (_, default)), values in zip(fields.items(), flat):
        if isinstance(default, str):
            arr = np.array([_text(v) for v in values], dtype=object) if values else np.empty(0, object)
        else:
            arr = np.array(values, dtype=np.int64) if values else np.empty(0, np.int64)
        out[key] = arr[~drop] if len(drop) else arr
    return out


def _text(value: Any) -> str:
    """A name cell as text: blobs decoded leniently, numbers spelled out."""
    if isinstance(value, str):
        return value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _ext(ext: np.ndarray) -> np.ndarray:
    return np.where(ext > 0, ext, -1)


def _gpu_index(types: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``agent_type_index`` is the ordinal among GPUs: exactly the table's device index."""
    return np.where(types.astype(str) == "GPU", index, -1)


def _kernel_part(k: dict[str, np.ndarray], sel: np.ndarray) -> dict[str, Any]:
    g = {a: k[a][sel] for a in k}
    has_type = (g["agent_type"].astype(str) != "").any()
    if (g["agent_index"] >= 0).any():
        device = _gpu_index(g["agent_type"], g["agent_index"]) if has_type else g["agent_index"]
    elif (g["agent_abs"] >= 0).any():  # no type index: ordinal among the agents kernels ran on
        device = np.unique(g["agent_abs"], return_inverse=True)[1].astype(np.int64)
    else:
        device = np.full(len(g["start"]), -1, np.int64)
    use_stream = bool((g["stream"] > 0).any())
    wg = [g["wg_x"], g["wg_y"], g["wg_z"]]
    grid = [grid_blocks(g[f"grid_{a}"], w) for a, w in zip("xyz", wg)]
    return part("kernel", g["name"], g["start"], g["end"], on_gpu=True, device=device,
                stream=g["stream"] if use_stream else g["queue"], correlation=g["corr"],
                external_id=_ext(g["ext"]), grid_x=grid[0], grid_y=grid[1], grid_z=grid[2],
                block_x=wg[0], block_y=wg[1], block_z=wg[2], graph_id=g["graph"],
                graph_node_id=g["graph_node"])


def _copy_part(m: dict[str, np.ndarray], sel: np.ndarray) -> dict[str, Any]:
    g = {a: m[a][sel] for a in m}
    dirs = np.array([copy_dir_of(str(d)) for d in g["name"]], dtype=object)
    src = _gpu_index(g["src_type"], g["src_index"])
    dst = _gpu_index(g["dst_type"], g["dst_index"])
    device = np.where(dirs == "HtoD", dst, np.where((dirs == "DtoH") | (dirs == "DtoD"), src, -1))
    return part("memcpy", [memcpy_name(str(d)) for d in g["name"]], g["start"], g["end"], on_gpu=True,
                device=device, stream=g["stream"], correlation=g["corr"], external_id=_ext(g["ext"]),
                bytes=g["size"], copy_dir=dirs, graph_id=g["graph"], graph_node_id=g["graph_node"])


def _devices(conn: sqlite3.Connection, names: set[str]) -> list[dict[str, Any]]:
    """GPU agents from ``rocpd_info_agent`` ordered by type index (name, arch, CUs)."""
    if "rocpd_info_agent" not in names:
        return []
    cols = {d[0].lower() for d in conn.execute('SELECT * FROM "rocpd_info_agent" LIMIT 0').description}
    want = [c if c in cols else "NULL" for c in ("type_index", "absolute_index", "name", "product_name")]
    cus = "json_extract(extdata, '$.cu_count')" if "extdata" in cols else "NULL"
    query = f"SELECT DISTINCT {', '.join(want)}, %s FROM rocpd_info_agent WHERE type = 'GPU' ORDER BY 1, 2"
    try:
        rows = conn.execute(query % cus).fetchall()
    except sqlite3.OperationalError:  # no JSON functions in this SQLite build
        rows = conn.execute(query % "NULL").fetchall()
    seen: dict[int, dict[str, Any]] = {}
    for ti, ai, name, product, cu in rows:
        idx = ti if type(ti) is int else len(seen)
        name = _text(name) if name is not None else None
        seen.setdefault(idx, {"index": idx, "name": (_text(product) if product else None) or name, "arch": name,
                              "cus": cu if type(cu) is int and cu > 0 else None,
                              "node_id": ai if type(ai) is int else None})
    return list(seen.values())


def _metadata(conn: sqlite3.Connection, names: set[str]) -> dict[str, Any]:
    if "rocpd_metadata" not in names:
        return {}
    return {_text(t): _text(v) if isinstance(v, bytes) else v
            for t, v in conn.execute("SELECT tag, value FROM rocpd_metadata")}


def _processes(conn: sqlite3.Connection, names: set[str]) -> dict[int, dict[str, Any]]:
    """Hostname and command per pid from the ``processes`` view, when it exists."""
    if "processes" not in names:
        return {}
    cols = {d[0].lower() for d in conn.execute('SELECT * FROM "processes" LIMIT 0').description}
    want = [c for c in ("hostname", "command", "init", "fini") if c in cols]
    out: dict[int, dict[str, Any]] = {}
    if "pid" not in cols or not want:
        return out
    for row in conn.execute(f'SELECT pid, {", ".join(want)} FROM processes'):
        if type(row[0]) is int:
            out[row[0]] = {k: _text(v) if isinstance(v, bytes) else v for k, v in zip(want, row[1:]) if v is not None}
    return out
