"""The Nsight Systems SQLite reader on damaged exports and on files that are not nsys exports:
rows before the damage are kept and ``meta.partial`` says what was lost, or one-line errors."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from copyprof.errors import CopyprofError
from copyprof.readers import nsys_sqlite
from copyprof.readers.nsys_sqlite import is_nsys, read_nsys
from tests.readers import nsys_db
from tests.readers.nsys_db import CLOVERLEAF, _db, _kernel, _need, gtid

handmade = nsys_db.handmade  # the fixture


def test_empty_activity_tables_give_empty_trace(tmp_path: Path) -> None:
    # A real nsys schema with no rows (e.g. nothing ran on the GPU) is valid: empty table + warning.
    path = tmp_path / "schema_only.sqlite"
    _db(path).close()
    t, = read_nsys(str(path))
    assert len(t.events) == 0
    assert t.meta.kind_counts == {"kernel": 0, "memcpy": 0, "memset": 0, "runtime": 0, "annotation": 0}
    assert any("no rows" in w for w in t.meta.warnings)


def test_corrupt_table_keeps_earlier_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Runtime rows are written last, so their leaf pages are the file's last pages; garbling the
    # final pages breaks the runtime scan part way. Rows before the damage must be kept, other
    # tables read in full, and meta.partial must say what happened.
    path = tmp_path / "corrupt.sqlite"
    conn = _db(path)
    conn.execute("INSERT INTO StringIds VALUES (1, 'k'), (2, 'cudaLaunchKernel_v7000')")
    _kernel(conn, 10, 20, 1, 7, 1, 1)
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId,"
                     " nameId, returnValue) VALUES (?, ?, 0, ?, ?, 2, 0)",
                     [(i, i + 1, gtid(7), i) for i in range(20000)])
    conn.commit()
    conn.close()
    data = bytearray(path.read_bytes())
    data[-3 * 4096:] = b"\xff" * (3 * 4096)
    path.write_bytes(bytes(data))
    monkeypatch.setattr(nsys_sqlite, "CHUNK", 500)  # small fetches so the damage is met mid-table
    t, = read_nsys(str(path))
    assert t.meta.kind_counts["kernel"] == 1
    assert 0 < t.meta.kind_counts["runtime"] < 20000
    assert t.meta.partial is not None and "CUPTI_ACTIVITY_KIND_RUNTIME stopped after" in t.meta.partial


def test_unreadable_table_is_reported_not_fatal(handmade: str) -> None:
    # One activity "table" that cannot be queried (here a view over a missing table): the other
    # four are kept, the broken kind is left out of kind_counts, and meta.partial names it.
    conn = sqlite3.connect(handmade)
    conn.executescript("DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET;"
                       " CREATE VIEW CUPTI_ACTIVITY_KIND_MEMSET AS SELECT * FROM gone;")
    conn.close()
    t, = read_nsys(handmade)
    assert t.meta.kind_counts == {"kernel": 2, "memcpy": 4, "runtime": 5, "annotation": 2}
    assert t.meta.partial is not None
    assert t.meta.partial.startswith("read 4 of 5 activity tables in full")
    assert "CUPTI_ACTIVITY_KIND_MEMSET unreadable" in t.meta.partial


def test_all_tables_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "broken.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
                       " CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM gone;")
    conn.close()
    with pytest.raises(CopyprofError, match="cannot read any activity table"):
        read_nsys(str(path))


def test_path_with_uri_characters(handmade: str, tmp_path: Path) -> None:
    # The read-only URI must escape '#', '?', '%' and spaces in the file name.
    odd = tmp_path / "run #1 ?50% done.sqlite"
    odd.write_bytes(Path(handmade).read_bytes())
    assert read_nsys(str(odd))[0].meta.kind_counts["memcpy"] == 4


# ---------------------------------------------------------------- bad input
def test_text_file_with_sqlite_extension(tmp_path: Path) -> None:
    path = tmp_path / "trace.sqlite"
    path.write_text("this is not a database\n" * 100)
    with pytest.raises(CopyprofError, match="not a readable SQLite database") as err:
        read_nsys(str(path))
    assert "\n" not in str(err.value) and err.value.path == str(path)


def test_zero_byte_file(tmp_path: Path) -> None:
    # SQLite opens a 0-byte file as an empty database: no tables -> not an nsys export.
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    with pytest.raises(CopyprofError, match="no Nsight Systems activity tables"):
        read_nsys(str(path))


def test_empty_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "empty_db.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 1")  # writes a valid header, no tables
    conn.close()
    with pytest.raises(CopyprofError, match="no Nsight Systems activity tables"):
        read_nsys(str(path))


def test_database_without_nsys_tables(tmp_path: Path) -> None:
    # e.g. a rocpd database or any other SQLite file: StringIds alone does not make an nsys export.
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
                       "CREATE TABLE rocpd_metadata (tag TEXT, value TEXT);")
    assert not is_nsys(conn)
    conn.close()
    with pytest.raises(CopyprofError, match="no Nsight Systems activity tables"):
        read_nsys(str(path))


def test_truncated_export(tmp_path: Path) -> None:
    # Half of the cloverleaf file: SQLite cannot even read its schema -> one-line CopyprofError.
    data = Path(_need(CLOVERLEAF)).read_bytes()
    path = tmp_path / "half.sqlite"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CopyprofError, match="malformed"):
        read_nsys(str(path))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CopyprofError):
        read_nsys(str(tmp_path / "nope.sqlite"))


def test_is_nsys_on_non_database(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    path.write_text("plain text")
    conn = sqlite3.connect(path)
    try:
        assert not is_nsys(conn)
    finally:
        conn.close()
