"""Structure-aware mutations of table formats: CSV cells, headers and rows; SQLite values, schema, rows, pages.

Why a module of its own: these formats break differently from JSON. A CSV reader meets text in
number columns, dropped or renamed columns, short rows and a missing final newline; a SQLite
reader meets whatever SQLite stores (it does not enforce column types: text, blobs and floats
in INTEGER columns), dropped views, renamed columns and damaged pages. Driven by a
``random.Random`` so that every input is reproducible (see mutate.make_input).
"""
from __future__ import annotations

import csv
import io
import random
import sqlite3
from pathlib import Path
from typing import Any

CELLS = ("", "-1", "0", "9223372036854775807", "9223372036854775808", "99999999999999999999999",
         "-9223372036854775809", "1.5", "nan", "inf", "-inf", "1e308", "abc", "Agent 99", "GPU -1", "CPU 0",
         "\udcff\udcfe", '"', "\n", ",", "0x10", " 12 ", "MEMORY_COPY_NONE", "MEMORY_COPY_DEVICE_TO_DEVICE",
         "KERNEL_DISPATCH", "../../evil", "x" * 3000)
SQL_VALUES: tuple[Any, ...] = (None, "text", b"\xff\xfe", 2**63 - 1, -(2**63), 1e308, -1, 0, 1.5, "", "12",
                               10**18, "../evil", -1e308)


# ------------------------------------------------------------------------ CSV
def csv_op(data: bytes, op: str, rng: random.Random) -> bytes:
    text = data.decode("utf-8", "surrogateescape")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows:
        return data
    header, body = rows[0], rows[1:]
    if op == "csv_cells" and body:
        for _ in range(rng.choice((1, 2, 5, 30))):
            row = body[rng.randrange(len(body))]
            if row:
                row[rng.randrange(len(row))] = rng.choice(CELLS)
    elif op == "csv_header":
        r = rng.random()
        width = len(header)
        if r < 0.3 and width:
            i = rng.randrange(width)
            header = header[:i] + header[i + 1:]
            body = [row[:i] + row[i + 1:] for row in body]
        elif r < 0.45 and width:
            header[rng.randrange(width)] = rng.choice(("", "Kernel_Name", "x", "\ufeffIndex", header[0]))
        elif r < 0.6:
            order = list(range(width))
            rng.shuffle(order)
            header = [header[i] for i in order]
            body = [[row[i] if i < len(row) else "" for i in order] for row in body]
        elif r < 0.7:
            body = []
        elif r < 0.8:
            header = [h.upper() for h in header]
        elif r < 0.9:
            header, body = body[0] if body else [], body[1:]
        else:
            header = header + ["Extra"]
    elif op == "csv_rows" and body:
        r = rng.random()
        if r < 0.25:
            i = rng.randrange(len(body))
            body[i:i] = [list(body[i])] * rng.choice((1, 5))
        elif r < 0.45:
            rng.shuffle(body)
        elif r < 0.6:  # end before start
            names = [h.strip().lower() for h in header]
            for a, b in (("start_timestamp", "end_timestamp"), ("beginns", "endns")):
                if a in names and b in names:
                    ia, ib = names.index(a), names.index(b)
                    for row in body:
                        if len(row) > max(ia, ib):
                            row[ia], row[ib] = row[ib], row[ia]
        elif r < 0.75:
            row = body[rng.randrange(len(body))]
            del row[rng.randrange(len(row) + 1):]
        elif r < 0.85:
            body[rng.randrange(len(body))] += ["x", "y"]
        else:
            body.insert(rng.randrange(len(body) + 1), [])
    out = io.StringIO(newline="")
    w = csv.writer(out, quoting=rng.choice((csv.QUOTE_MINIMAL, csv.QUOTE_ALL)),
                   lineterminator=rng.choice(("\n", "\n", "\r\n")))
    w.writerow(header)
    w.writerows(body)
    text = out.getvalue()
    if rng.random() < 0.1:
        text = text.rstrip("\n")  # no final newline
    return text.encode("utf-8", "surrogateescape")


# ------------------------------------------------------------------------ SQLite
def _sql_tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]


def sql_op(path: Path, op: str, rng: random.Random) -> None:
    """Damage a copied database in place through SQL (values, schema, rows) or its pages."""
    if op == "sql_pages":
        data = path.read_bytes()
        page = int.from_bytes(data[16:18], "big") or 4096
        b = bytearray(data)
        k = rng.randrange(max(1, len(b) // page))
        if rng.random() < 0.5:
            b[k * page: (k + 1) * page] = bytes(len(b[k * page: (k + 1) * page]))  # a zeroed page
        else:
            b[rng.randrange(16, 100)] ^= rng.randrange(1, 256)  # header field
        path.write_bytes(bytes(b))
        return
    conn = sqlite3.connect(path)
    try:
        tables = _sql_tables(conn)
        if not tables:
            return
        t = rng.choice(tables)
        cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
        if op == "sql_values" and cols:
            rowids = [r[0] for r in conn.execute(f'SELECT rowid FROM "{t}" LIMIT 5000')]
            if not rowids:
                return
            for _ in range(rng.choice((1, 2, 3))):
                c = rng.choice(cols)
                value = rng.choice(SQL_VALUES)
                picked = rowids if rng.random() < 0.2 else rng.sample(rowids, min(len(rowids), rng.choice((1, 3, 50))))
                conn.executemany(f'UPDATE OR IGNORE "{t}" SET "{c}" = ? WHERE rowid = ?', [(value, r) for r in picked])
        elif op == "sql_schema":
            views = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='view'")]
            c = rng.choice(cols) if cols else "x"
            stmt = rng.choice([f'DROP TABLE "{t}"', f'DELETE FROM "{t}"', f'ALTER TABLE "{t}" RENAME COLUMN "{c}" TO "x_{c}"',
                               f'ALTER TABLE "{t}" DROP COLUMN "{c}"', f'ALTER TABLE "{t}" RENAME TO "{t}_old"']
                              + [f'DROP VIEW "{v}"' for v in views])
            conn.execute(stmt)
        elif op == "sql_rows" and cols:
            r = rng.random()
            if r < 0.4:
                conn.execute(f'INSERT OR IGNORE INTO "{t}" SELECT * FROM "{t}" LIMIT {rng.choice((1, 10, 1000))}')
            elif r < 0.7 and {"start", "end"} <= set(cols):
                conn.execute(f'UPDATE "{t}" SET "start" = "end", "end" = "start"')  # end before start
            elif "start" in cols:
                conn.execute(f'UPDATE "{t}" SET "start" = (SELECT MAX("start") FROM "{t}") - "start"')  # disorder
            else:
                conn.execute(f'DELETE FROM "{t}" WHERE rowid % 2 = 0')
        conn.commit()
    except sqlite3.Error:
        pass  # the statement did not apply (constraint, old SQLite): the copy stays a valid seed variant
    finally:
        conn.close()
