"""Nsight Systems SQLite exports (``nsys export --type sqlite``) -> the event table.

Why this shape: an nsys export is a whole profiling session in one database. Every name is an
id into ``StringIds``, tables appear or not depending on what was traced, and column sets
drift between schema versions (2.9 has no ``greenContextId``; pipit appended ``name``
columns to its samples). So each table is read with a SELECT built from the columns it
really has (``COALESCE(col, -1)``, missing -> ``-1``), rows are fetched in chunks straight
into int64 numpy arrays, and names are resolved once per distinct id, never per row.

Two things the raw tables do that a naive reader gets wrong (both seen in the saxpy sample):
* ``CUPTI_ACTIVITY_KIND_RUNTIME`` repeats each API call as a "CUDA backtrace" row
  (eventClass 67, unsuffixed name, ``callchainId`` set) next to the real one (eventClass 0,
  ``cudaMemcpy_v3020``). The backtrace rows are dropped, or every call counts twice.
* ``NVTX_EVENTS`` also holds domain-creation and thread-naming rows; only ranges (push/pop,
  start/end) become annotations. Thread names ``MPI Rank N`` (nsys ``--trace=mpi``) are the
  best evidence of the MPI rank a process had.
"""
from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from copyprof.columns import filled, load_pandas
from copyprof.errors import CopyprofError
from copyprof.events import KINDS, Trace, TraceMeta, make_table
from copyprof.grouping import distinct
from copyprof.readers import nsys_schema as schema
from copyprof.readers.nsys_schema import (
    ACTIVITY_TABLES,
    BACKTRACE_CLASSES,
    CHUNK,
    COPY_KINDS,
    IN_BATCH,
    KERNEL,
    MEM_KINDS,
    MEMCPY,
    MEMSET,
    MPI_RANK,
    NVTX,
    NVTX_RANGE_TYPES,
    NVTX_THREAD_TYPE,
    RUNTIME,
    TID_MASK,
    VERSION_SUFFIX,
)

load_pandas()  # the string storage this command asked for (columns.prefer_python_strings)


def is_nsys(conn: sqlite3.Connection) -> bool:
    """True when ``conn`` looks like an nsys export: ``StringIds`` plus a CUPTI or NVTX table."""
    try:
        tables = schema.tables(conn)
    except sqlite3.DatabaseError:
        return False
    return "StringIds" in tables and any(t.startswith("CUPTI_ACTIVITY_KIND_") or t == NVTX for t in tables)


def read_nsys(path: str) -> list[Trace]:
    """Read an nsys SQLite export: one Trace per profiled process (usually one)."""
    from copyprof.readers.files import connect_readonly

    try:
        conn = connect_readonly(path)
    except sqlite3.Error as exc:
        raise CopyprofError(f"cannot open as SQLite ({exc})", path=path) from exc
    try:
        return _Reader(conn, path).read()
    except sqlite3.DatabaseError as exc:  # a damaged page outside the per-table reads (string table, enums)
        raise CopyprofError(f"cannot read SQLite database ({exc}); is it truncated or damaged?", path=path) from exc
    except UnicodeDecodeError as exc:  # sqlite3 decodes column names strictly
        raise CopyprofError("cannot read SQLite database (a table or column name is not UTF-8: damaged file?)",
                            path=path) from exc
    finally:
        conn.close()


class _Reader:
    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self.conn, self.path = conn, path
        self.problems: list[str] = []  # per-table read failures -> meta.partial
        self.warnings: list[str] = []
        self.meta_extra: dict[str, Any] = {}

    # ---- top level -------------------------------------------------------------------
    def read(self) -> list[Trace]:
        try:
            self.tables = schema.tables(self.conn)
        except sqlite3.DatabaseError as exc:
            hint = ""
            if self.path.endswith((".nsys-rep", ".qdrep")):
                hint = " (an .nsys-rep must first be exported: nsys export --type sqlite)"
            elif "malformed" in str(exc):
                hint = " (the file is truncated or corrupt)"
            raise CopyprofError(f"not a readable SQLite database: {exc}{hint}", path=self.path) from exc
        present = [t for t in ACTIVITY_TABLES if t in self.tables]
        if not present:
            raise CopyprofError(
                "no Nsight Systems activity tables (CUPTI_ACTIVITY_KIND_KERNEL/MEMCPY/MEMSET/RUNTIME, "
                "NVTX_EVENTS): not an nsys SQLite export, or one made without CUDA/NVTX tracing", path=self.path)
        readers: dict[str, Callable[[], schema.Part]] = {KERNEL: self._kernels, MEMCPY: self._memcpys,
                                                   MEMSET: self._memsets, RUNTIME: self._runtime, NVTX: self._nvtx}
        parts: list[schema.Part] = []
        read: list[str] = []
        for table in present:
            try:
                parts.append(readers[table]())
                read.append(table)
            except sqlite3.DatabaseError as exc:  # corrupt pages, schema we cannot query
                self.problems.append(f"{table} unreadable ({exc})")
        if not read:
            raise CopyprofError(f"cannot read any activity table: {'; '.join(self.problems)}", path=self.path)
        if self.problems:
            whole = len(present) - len(self.problems)
            self.problems.insert(0, f"read {whole} of {len(present)} activity tables in full")
        if not any(len(p.codes) for p in parts):
            self.warnings.append("the activity tables hold no rows")
        return self._split(parts, read)

    def _split(self, parts: list[schema.Part], tables_read: list[str]) -> list[Trace]:
        """One Trace per process; ranks from ``MPI Rank N`` thread names, else pid order."""
        pids = distinct(np.concatenate([p.pid for p in parts] + [np.empty(0, np.int64)]))
        keys = sorted((int(k) for k in pids if k >= 0), key=lambda g: ((g >> 24) & TID_MASK, g))
        named = self._mpi_ranks()
        if len(keys) <= 1:
            groups: list[int | None] = [None]  # everything, including rows without a pid
            ranks = [named[keys[0]] if keys and keys[0] in named else 0]
            self.meta_extra["rank_source"] = "mpi-thread-name" if keys and keys[0] in named else "default"
        else:
            groups = list(keys)
            by_name = [named.get(k) for k in keys]
            if None not in by_name and len(set(by_name)) == len(by_name):
                ranks = [int(r) for r in by_name]  # type: ignore[arg-type]
                how, self.meta_extra["rank_source"] = "from the nsys 'MPI Rank N' thread names", "mpi-thread-name"
            else:
                ranks = list(range(len(keys)))
                how, self.meta_extra["rank_source"] = "numbered 0..n-1 in process-id order", "pid-order"
            self.warnings.append(f"{len(keys)} processes in one export: one trace per process, ranks {how}")
            if any((p.pid < 0).any() for p in parts):
                self.warnings.append("rows without a process id were given to the first process")
        general = self._general_meta(tables_read)
        traces = []
        for i, (key, rank) in enumerate(zip(groups, ranks)):
            sel = [p if key is None else schema.subset(p, (p.pid == key) | ((p.pid < 0) & (i == 0))) for p in parts]
            traces.append(self._trace(sel, key if key is not None else (keys[0] if keys else None), rank, general))
        return traces

    def _trace(self, parts: list[schema.Part], key: int | None, rank: int, general: dict[str, Any]) -> Trace:
        index: dict[str, int] = {}
        codes, cols_list, kinds = [], [], []
        for p in parts:
            remap = np.array([index.setdefault(n, len(index)) for n in p.names], dtype=np.int32)
            codes.append(remap[p.codes] if len(p.codes) else np.empty(0, np.int32))
            cols_list.append(p.cols)
            kinds.append(filled(len(p.codes), p.kind))
        n = sum(len(c) for c in codes)
        cols: dict[str, Any] = {}
        defaults: dict[str, Any] = {"bytes_src": "none", "copy_dir": ""}
        for col in sorted(set().union(*(c.keys() for c in cols_list))):
            default = defaults.get(col, -1)
            cols[col] = np.concatenate([
                c[col] if col in c else np.full(len(k), default, dtype=object if isinstance(default, str) else np.int64)
                for c, k in zip(cols_list, kinds)])
        cols["kind"] = np.concatenate(kinds) if kinds else np.empty(0, object)
        cols["on_gpu"] = np.isin(cols["kind"], ("kernel", "memcpy", "memset"))
        cols["rank"] = np.full(n, rank, dtype=np.int32)
        all_codes = np.concatenate(codes) if codes else np.empty(0, np.int32)
        used, all_codes = np.unique(all_codes, return_inverse=True)  # drop names of other processes
        names = list(index)
        table = make_table(all_codes.reshape(-1).astype(np.int32), [names[i] for i in used], cols).to_pandas()
        table = table.sort_values("start_ns", kind="stable", ignore_index=True)
        counts = {ACTIVITY_TABLES[t]: 0 for t in general["tables_read"]}
        counts.update({k: int(v) for k, v in table["kind"].value_counts().items() if v})
        launch = table["name"].cat.categories.str.startswith(("cudaGraphLaunch", "cuGraphLaunch"))
        is_launch = launch[table["name"].cat.codes.to_numpy()] & (table["kind"] == "runtime").to_numpy()
        metadata = dict(general["metadata"])
        if key is not None:
            metadata.update(pid=(key >> 24) & TID_MASK, process_name=general["procs"].get(key))
        metadata.update(self.meta_extra)
        return Trace(TraceMeta(
            path=self.path, format="nsys-sqlite", flavour="cupti", ranks=[rank], devices=general["devices"],
            metadata=metadata, kind_counts={k: counts[k] for k in KINDS if k in counts},
            graph_launches=int(is_launch.sum()),
            warnings=list(self.warnings), partial="; ".join(self.problems) or None), table)

    # ---- activity tables -------------------------------------------------------------
    def _kernels(self) -> schema.Part:
        a = self._fetch(KERNEL, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                 "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY",
                                 "blockZ", "graphNodeId", "graphId"])
        strings = self._strings(np.concatenate([a[:, 6], a[:, 7]]))

        def label(k: list[int]) -> str:
            return strings.get(k[0]) or strings.get(k[1]) or f"<kernel name id {k[0]}>"

        names, codes = schema.intern(a[:, 6:8], label)
        cols = schema.common(a)
        cols.update(grid_x=a[:, 8], grid_y=a[:, 9], grid_z=a[:, 10], block_x=a[:, 11], block_y=a[:, 12],
                    block_z=a[:, 13], graph_node_id=a[:, 14], graph_id=a[:, 15])
        return schema.Part("kernel", names, codes, cols, a[:, 5])

    def _memcpys(self) -> schema.Part:
        a = self._fetch(MEMCPY, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes",
                                 "copyKind", "srcKind", "dstKind", "graphNodeId"])
        dirs, mems = self._copy_kinds(), self._mem_kinds()

        def label(k: list[int]) -> str:
            d = dirs.get(k[0], f"kind{k[0]}")
            if k[1] < 0 or k[2] < 0:  # srcKind/dstKind not recorded
                return f"Memcpy {d}"
            return f"Memcpy {d} ({mems.get(k[1], '?')} -> {mems.get(k[2], '?')})"

        names, codes = schema.intern(a[:, 7:10], label)
        cols = schema.common(a)
        cols.update(bytes=a[:, 6], bytes_src=np.where(a[:, 6] >= 0, "event", "none"), graph_node_id=a[:, 10])
        uniq, inv = np.unique(a[:, 7], return_inverse=True)
        cols["copy_dir"] = np.array([dirs.get(int(k), f"kind{k}") for k in uniq], dtype=object)[inv.reshape(-1)]
        return schema.Part("memcpy", names, codes, cols, a[:, 5])

    def _memsets(self) -> schema.Part:
        a = self._fetch(MEMSET, ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes",
                                 "memKind", "graphNodeId"])
        mems = self._mem_kinds()
        names, codes = schema.intern(a[:, 7], lambda k: f"Memset ({mems[k]})" if k in mems else "Memset")
        cols = schema.common(a)
        cols.update(bytes=a[:, 6], bytes_src=np.where(a[:, 6] >= 0, "event", "none"), graph_node_id=a[:, 8])
        return schema.Part("memset", names, codes, cols, a[:, 5])

    def _runtime(self) -> schema.Part:
        a = self._fetch(RUNTIME, ["start", "end", "globalTid", "correlationId", "nameId", "eventClass"])
        skip = self._enum_ids("ENUM_NSYS_EVENT_CLASS", BACKTRACE_CLASSES)
        back = np.isin(a[:, 5], list(skip))
        if back.any():
            self.meta_extra["runtime_backtrace_rows_skipped"] = int(back.sum())
            a = a[~back]
        strings = self._strings(a[:, 4])
        names, codes = schema.intern(a[:, 4], lambda k: VERSION_SUFFIX.sub("", strings.get(k, f"<api name id {k}>")))
        cols = {"start_ns": a[:, 0], "dur_ns": np.maximum(a[:, 1] - a[:, 0], 0), "stream": schema.tid(a[:, 2]),
                "correlation": a[:, 3]}
        return schema.Part("runtime", names, codes, cols, schema.pid_of_tid(a[:, 2]))

    def _nvtx(self) -> schema.Part:
        types = self._enum_ids("ENUM_NSYS_EVENT_TYPE", NVTX_RANGE_TYPES)
        a, texts = self._fetch(NVTX, ["start", "end", "globalTid", "textId"], text="text",
                               where=f'"eventType" IN ({",".join(map(str, sorted(types)))})')
        total = (self._safe(f'SELECT COUNT(*) FROM "{NVTX}"') or [(0,)])[0][0]
        if total > len(a):
            self.meta_extra["nvtx_non_range_rows_skipped"] = int(total - len(a))
        strings = self._strings(a[:, 3])
        labels = pd.Series([schema.text(t) for t in texts], dtype=object)
        missing = labels.isna().to_numpy()
        labels[missing] = [strings.get(int(k), "") for k in a[missing, 3]]
        codes, uniq = pd.factorize(labels)
        open_ended = a[:, 1] < 0
        if open_ended.any():
            self.warnings.append(f"{int(open_ended.sum())} NVTX ranges have no end (kept with duration 0)")
        cols = {"start_ns": a[:, 0], "dur_ns": np.where(open_ended, 0, np.maximum(a[:, 1] - a[:, 0], 0)),
                "stream": schema.tid(a[:, 2])}
        return schema.Part("annotation", [str(u) for u in uniq], codes.astype(np.int32), cols, schema.pid_of_tid(a[:, 2]))

    # ---- helpers ---------------------------------------------------------------------
    def _fetch(self, table: str, columns: list[str], text: str | None = None, where: str = "") -> Any:
        """Int columns (NULL/missing -> -1) as an (n, k) int64 array; plus a text column if asked.

        A table that fails part way (corrupt page) keeps the rows fetched before the failure.
        A cell that is not an integer (text, a blob, a float: SQLite does not enforce column
        types) is read as missing (-1) and counted in a warning, rather than failing the file.
        """
        have = {r[1] for r in self.conn.execute(f'PRAGMA table_info("{table}")')}
        exprs = [f"CASE typeof(\"{c}\") WHEN 'integer' THEN \"{c}\" ELSE -1 END" if c in have else "-1"
                 for c in columns]
        exprs.append(" + ".join(f"(typeof(\"{c}\") NOT IN ('integer', 'null'))" for c in columns if c in have) or "0")
        if text is not None:
            exprs.append(f'"{text}"' if text in have else "NULL")
        sql = f'SELECT {", ".join(exprs)} FROM "{table}"' + (f" WHERE {where}" if where else "")
        chunks: list[np.ndarray] = []
        texts: list[Any] = []
        cur = self.conn.execute(sql)
        try:
            while rows := cur.fetchmany(CHUNK):
                if text is not None:
                    *ints, strs = zip(*rows)
                    texts.extend(strs)
                    chunks.append(np.array(ints, dtype=np.int64).T)
                else:
                    chunks.append(np.array(rows, dtype=np.int64))
        except sqlite3.DatabaseError as exc:
            got = sum(len(c) for c in chunks)
            if not got:
                raise
            self.problems.append(f"{table} stopped after {got} rows ({exc})")
        arr = np.concatenate(chunks) if chunks else np.empty((0, len(columns) + 1), np.int64)
        if bad := int(arr[:, -1].sum()):
            self.warnings.append(f"{table}: {bad} values are not integers (read as missing)")
        arr = arr[:, :-1]
        return (arr, texts) if text is not None else arr

    def _strings(self, ids: np.ndarray) -> dict[int, str]:
        """StringIds values for the distinct ids given (never the whole table: it can be huge)."""
        if "StringIds" not in self.tables:
            return {}
        wanted = [int(i) for i in distinct(ids) if i >= 0]
        out: dict[int, str] = {}
        for i in range(0, len(wanted), IN_BATCH):
            batch = wanted[i:i + IN_BATCH]
            rows = self.conn.execute(f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(batch))})",
                                     batch)
            out.update((i, schema.text(v) or "") for i, v in rows)
        return out

    def _enum(self, table: str, column: str = "name") -> dict[int, str]:
        if table not in self.tables:
            return {}
        try:
            rows = self.conn.execute(f'SELECT id, "{column}" FROM "{table}"').fetchall()
            return {i: str(schema.text(v)) for i, v in rows if v is not None and type(i) is int}
        except sqlite3.DatabaseError:
            return {}

    def _enum_ids(self, table: str, wanted: dict[str, int]) -> set[int]:
        """Ids of the enum symbols ``wanted``; the fixed numbers when the export has no such table."""
        found = {i for i, name in self._enum(table).items() if name in wanted}
        return found or set(wanted.values())

    def _copy_kinds(self) -> dict[int, str]:
        out = dict(COPY_KINDS)
        for i, name in self._enum("ENUM_CUDA_MEMCPY_OPER").items():
            m = re.fullmatch(r"CUDA_MEMCPY_KIND_(UVM_)?([A-Z])TO([A-Z])", name)
            if m:
                out[i] = f"{m.group(1) or ''}{m.group(2)}to{m.group(3)}"
        return out

    def _mem_kinds(self) -> dict[int, str]:
        return {**MEM_KINDS, **self._enum("ENUM_CUDA_MEM_KIND", "label")}

    def _mpi_ranks(self) -> dict[int, int]:
        """globalPid -> rank from NVTX thread names ``MPI Rank N`` (written by nsys --trace=mpi)."""
        if NVTX not in self.tables:
            return {}
        types = self._enum_ids("ENUM_NSYS_EVENT_TYPE", dict([NVTX_THREAD_TYPE]))
        found: dict[int, set[int]] = {}
        try:
            rows = self.conn.execute(f'SELECT globalTid, text FROM "{NVTX}" WHERE text LIKE \'MPI Rank %\' AND '
                                     f'eventType IN ({",".join(map(str, types))})').fetchall()
        except sqlite3.DatabaseError:
            return {}
        for g, text in rows:
            m = MPI_RANK.fullmatch(schema.text(text) or "")
            if m and type(g) is int:
                found.setdefault(g & ~TID_MASK, set()).add(int(m.group(1)))
        return {k: v.pop() for k, v in found.items() if len(v) == 1}

    def _general_meta(self, tables_read: list[str]) -> dict[str, Any]:
        metadata: dict[str, Any] = {}
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if table in self.tables:
                rows = dict(self._safe(f'SELECT name, value FROM "{table}"'))
                metadata["nsys_schema"] = schema.text(rows.get("EXPORT_SCHEMA_VERSION"))
                metadata["nsys_version"] = schema.text(rows.get("EXPORT_PRODUCT_VERSION"))
                break
        if "TARGET_INFO_SESSION_START_TIME" in self.tables:
            row = self._safe("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
            if row and type(row[0][0]) is int:
                metadata["session_start_utc_ns"] = row[0][0]
        devices: dict[str | None, dict[str, Any]] = {}
        if "TARGET_INFO_GPU" in self.tables:
            have = {r[1] for r in self._safe('PRAGMA table_info("TARGET_INFO_GPU")')}
            pick = [c if c in have else "NULL" for c in ("id", "name", "computeMajor", "computeMinor", "smCount")]
            sql = f"SELECT {', '.join(pick)} FROM TARGET_INFO_GPU ORDER BY id"
            for gid, name, major, minor, sms in self._safe(sql):
                arch = f"sm_{major}{minor}" if type(major) is int and type(minor) is int else ""
                devices.setdefault(schema.text(gid), {"name": schema.text(name) or "", "arch": arch,
                                                "sms": sms if type(sms) is int else None})
        procs: dict[int, str | None] = {}
        if "PROCESSES" in self.tables:
            procs = {g: schema.text(n) for g, n in self._safe("SELECT globalPid, name FROM PROCESSES") if type(g) is int}
        return {"metadata": metadata, "devices": list(devices.values()), "procs": procs, "tables_read": tables_read}

    def _safe(self, sql: str) -> list[tuple[Any, ...]]:
        """Side tables are nice to have: a failure there must not cost the events."""
        try:
            return self.conn.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            self.warnings.append(f"could not read side table ({exc}): {sql[:60]}")
            return []
