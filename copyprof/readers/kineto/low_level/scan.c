/* Native scanner for one chunk of Kineto trace events: JSON bytes in, packed rows out.
 *
 * Why: the pure-Python reader (kineto_columns.py) spends ~3.3 s of CPU per GB of JSON
 * building msgspec Structs and then reading them back field by field into numpy arrays.
 * This scanner reads the same fields straight from the bytes into one packed row per
 * complete ("X") event, with no Python object per event (~0.93 s per GB on one core, ~1.1 s
 * with the numpy assembly that follows; benchmarks/README.md item 24). Events of the common
 * shapes take a one-pass reader over the chunk's bytes classified 64 at a time (fast_event:
 * ~0.5 s per GB on one core where read_event alone takes ~0.7), the others the general
 * reader (read_event).
 *
 * Contract (what keeps the two paths' tables identical): scan() either returns rows that
 * are exactly what the Python path would have produced, or a one-line reason string, and
 * then the caller decodes the chunk with the Python path. It accepts only a strict subset
 * of what msgspec accepts: a JSON array of objects, each with a "ph" the Python reader
 * knows, every value well-formed JSON (UTF-8 checked, no control characters, escapes
 * checked, depth <= 64), and the fields the reader uses in their common shapes: strings
 * without escapes for ph/cat/name/args.kind, int64 integers for ids, numbers for ts/dur.
 * Other values msgspec accepts in an id or time field (strings such as "9216" or "0x0",
 * floats, nulls, integers beyond int64) go to a side table with their byte offsets, and the
 * caller reconverts those columns with the Python path's own tolerant functions. Values of
 * a type the field cannot take (Inductor's "grid": "grid(100,)", a bool or container id, a
 * non-string cat, a non-object args) are skipped and counted per field, as the Python path
 * drops exactly those fields and keeps the event (one odd value must not cost a trace its
 * kernel or copy). Anything else (escaped keys or names, duplicate keys the reader uses,
 * floats out of range, ...) is declined, never guessed.
 * tests/readers/test_kineto_native.py checks the two paths against each other on real
 * traces and on generated and mutated events; test_kineto_native_modes.py the scanner's own
 * readers and byte-scan levels against each other. Rows, the side table and the value
 * readers are in values.h; the kept rows' table columns, made from the rows for the common
 * chunk (kept_columns), in kept.h.
 *
 * Floats go through PyOS_string_to_double (correctly rounded, locale-free, as msgspec's
 * parser is); integers written into float fields are converted from int64 as msgspec does.
 */
#include "values.h"

/* Codes of the args keys the reader uses: the ids (A_*), then these; also their bits in a
 * `seen` mask (duplicates are declined). */
enum { K_GRID = N_INTS, K_BLOCK, K_KIND, K_DIMS, K_TYPES };

static inline int key_is(const unsigned char *s, const char *lit, size_t n) { return memcmp(s, lit, n) == 0; }

/* Code of an args key (A_* or K_*), or -1 for a key the reader does not use. */
static inline int args_key(const unsigned char *k, Py_ssize_t n) {
    switch (n) {
    case 4:
        return key_is(k, "size", 4) ? A_SIZE : key_is(k, "rank", 4) ? A_RANK : key_is(k, "grid", 4) ? K_GRID
             : key_is(k, "kind", 4) ? K_KIND : -1;
    case 5: return key_is(k, "bytes", 5) ? A_BYTES : key_is(k, "block", 5) ? K_BLOCK : -1;
    case 6: return key_is(k, "device", 6) ? A_DEVICE : key_is(k, "stream", 6) ? A_STREAM : -1;
    case 8: return key_is(k, "graph id", 8) ? A_GRAPH_ID : -1;
    case 10:
        return key_is(k, "fromDevice", 10) ? A_FROM_DEVICE : key_is(k, "Input Dims", 10) ? K_DIMS
             : key_is(k, "Input type", 10) ? K_TYPES : -1;
    case 11:
        return key_is(k, "correlation", 11) ? A_CORRELATION : key_is(k, "External id", 11) ? A_EXTERNAL_ID
             : key_is(k, "external id", 11) ? A_EXTERNAL_ID_LEGACY : -1;
    case 13: return key_is(k, "graph node id", 13) ? A_GRAPH_NODE_ID : -1;
    default: return -1;
    }
}

/* Body of an X event's args object (cursor at '{'). */
static int read_args(Cur *c, Row *r, Tables *t) {
    uint32_t seen = 0;
    if (c->p >= c->end) DECLINE(c, "missing value");
    if (*c->p == 'n') return lex_literal(c, "null", 4);  /* args: null reads as no args */
    if (*c->p != '{') return skip_odd(c, t, O_ARGS);
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
    for (;;) {
        const unsigned char *k; Py_ssize_t kn;
        if (read_key(c, &k, &kn) < 0) return -1;
        int code = args_key(k, kn);
        if (code >= 0) {
            if (seen & (1u << code)) DECLINE(c, "duplicate args key");
            seen |= 1u << code;
        }
        if (code >= 0 && code < N_INTS) {
            if (read_id(c, t, code, &r->ints[code]) < 0) return -1;
        } else if (code == K_GRID) {
            if (read_dims(c, t, O_GRID, r->grid) < 0) return -1;
        } else if (code == K_BLOCK) {
            if (read_dims(c, t, O_BLOCK, r->block) < 0) return -1;
        } else if (code == K_KIND) {
            unsigned char ch = c->p < c->end ? *c->p : 0;
            if (ch == '"') {
                const unsigned char *s; Py_ssize_t n;
                if (read_plain_string(c, &s, &n) < 0) return -1;
                r->kind_off = s - c->base; r->kind_len = (int32_t)n;
            } else if (ch == 'n') {
                if (lex_literal(c, "null", 4) < 0) return -1;
            } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
                const unsigned char *s; int is_int;
                int64_t v;  /* msgspec range-checks a float here (1e400 fails): decline all floats */
                if (lex_number(c, &s, &is_int) < 0) return -1;
                if (!is_int || int_value(s, c->p, &v) < 0) DECLINE(c, "args.kind is a float or beyond int64");
            } else if (ch == '[' || ch == '{' || ch == 't' || ch == 'f') {
                if (skip_odd(c, t, O_KIND) < 0) return -1;
            } else DECLINE(c, "args.kind of an unexpected type");
        } else if (code == K_DIMS || code == K_TYPES) {
            if (note_raw(c, t, code == K_DIMS ? S_DIMS : S_TYPES) < 0) return -1;
        } else if (skip_value(c, 2) < 0) return -1;
        int more = next_member(c);
        if (more < 0) return -1;
        if (!more) return 0;
    }
}

/* Event fields the reader uses, also their bits in a `seen` mask; F_PH is "ph", which says
 * whether the others matter. */
enum { F_CAT, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_ARGS, N_FIELDS, F_PH };

/* Code of an event key (F_*), or -1 for a key the reader does not use. */
static inline int event_key(const unsigned char *k, Py_ssize_t n) {
    switch (n) {
    case 2: return key_is(k, "ph", 2) ? F_PH : key_is(k, "ts", 2) ? F_TS : -1;
    case 3:
        return key_is(k, "cat", 3) ? F_CAT : key_is(k, "pid", 3) ? F_PID : key_is(k, "tid", 3) ? F_TID
             : key_is(k, "dur", 3) ? F_DUR : -1;
    case 4: return key_is(k, "name", 4) ? F_NAME : key_is(k, "args", 4) ? F_ARGS : -1;
    default: return -1;
    }
}

/* The value of event field `f` at the cursor, for an X event. */
static int read_field(Cur *c, int f, Row *r, Tables *t) {
    const unsigned char *s; Py_ssize_t n;
    switch (f) {
    case F_CAT:
        if (c->p < c->end && *c->p == 'n') { r->cat = -1; return lex_literal(c, "null", 4); }
        if (c->p < c->end && *c->p != '"') { r->cat = -1; return skip_odd(c, t, O_CAT); }
        if (read_plain_string(c, &s, &n) < 0) return -1;
        if ((r->cat = intern(&t->cats, s, n)) < 0) { PyErr_NoMemory(); return -2; }
        return 0;
    case F_NAME:
        if (c->p >= c->end || *c->p != '"') DECLINE(c, "name is not a string");
        if (read_plain_string(c, &s, &n) < 0) return -1;
        if ((r->name = intern(&t->names, s, n)) < 0) { PyErr_NoMemory(); return -2; }
        return 0;
    case F_PID: return read_id(c, t, S_PID, &r->pid);
    case F_TID: return read_id(c, t, S_TID, &r->tid);
    case F_TS: return read_float(c, t, S_TS, &r->ts);
    case F_DUR: return read_float(c, t, S_DUR, &r->dur);
    default: return read_args(c, r, t);
    }
}

/* Chrome-trace phases the Python reader decodes (kineto_columns._OTHER_PHASES plus "X"). */
static const char PHASES[] = "BEiIbneCstfPONDMVvRc()STpFX";
static unsigned char IS_PHASE[256];  /* 1 for the bytes of PHASES; filled at module init */

static void row_defaults(Row *r) {
    r->cat = -1; r->name = -1; r->pid = -1; r->tid = -1; r->ts = NAN; r->dur = NAN;
    for (int i = 0; i < N_INTS; i++) r->ints[i] = -1;
    for (int i = 0; i < 3; i++) { r->grid[i] = -1; r->block[i] = -1; }
    r->kind_off = -1; r->kind_len = 0;
}

/* One event object (cursor at '{'). *is_x says whether it was a complete event.
 * Returns 0, -1 (decline) or -2 (Python error set). */
static int read_event(Cur *c, Row *r, Tables *t, int *is_x) {
    const unsigned char *deferred[N_FIELDS] = {0};
    uint32_t seen = 0;
    int ph = 0;  /* 0 not seen yet, 'X', or another phase */
    row_defaults(r);
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') DECLINE(c, "event without ph");
    for (;;) {
        const unsigned char *k; Py_ssize_t kn;
        if (read_key(c, &k, &kn) < 0) return -1;
        int f = event_key(k, kn);
        if (f == F_PH) {
            const unsigned char *s; Py_ssize_t n;
            if (ph) DECLINE(c, "duplicate ph");
            if (read_plain_string(c, &s, &n) < 0) return -1;
            if (n != 1 || !IS_PHASE[s[0]]) DECLINE(c, "unknown ph");
            ph = s[0];
        } else if (f >= 0) {
            if (seen & (1u << f)) {  /* matters only for X events; others ignore these keys */
                if (ph == 'X') DECLINE(c, "duplicate key");
                if (!ph) seen |= 1u << N_FIELDS;  /* decided when ph is known */
            }
            seen |= 1u << f;
            if (ph == 'X') {
                int rc = read_field(c, f, r, t);
                if (rc) return rc;
            } else {
                if (!ph) deferred[f] = c->p;  /* read again once ph says X */
                if (skip_value(c, 1) < 0) return -1;
            }
        } else if (skip_value(c, 1) < 0) return -1;
        int more = next_member(c);
        if (more < 0) return -1;
        if (!more) break;
    }
    if (!ph) DECLINE(c, "event without ph");
    *is_x = (ph == 'X');
    if (!*is_x) return 0;
    if (seen & (1u << N_FIELDS)) DECLINE(c, "duplicate key");
    const unsigned char *after = c->p;
    for (int f = 0; f < N_FIELDS; f++) {
        if (!deferred[f]) continue;
        c->p = deferred[f];
        int rc = read_field(c, f, r, t);
        if (rc) return rc;
    }
    c->p = after;
    if (r->name < 0) DECLINE(c, "X event without a name");
    return 0;
}

#include "fast_event.h"
#include "kept.h"

/* ---------- the module function ---------- */

/* The complete events' rows, written straight into the bytearray that scan returns (copying
 * them out of a buffer of their own moved ~200 bytes a row: ~7 % of a kernel chunk's scan).
 * Its first size comes from the chunk's length, at ROW_BYTES bytes an event, which Kineto's
 * complete events exceed (kernels ~800 bytes, cpu_ops and runtime calls 300 and more), so
 * that a chunk of them never grows it; a chunk of smaller events doubles it as it goes. The
 * pages the guess spares are never touched. At most 16 MB to start with: glibc maps blocks
 * of 32 MB and more afresh every time (a page fault per 4 kB written), smaller ones come from
 * its heap once one of their size was freed (always, with the reading commands' mallopt). */
typedef struct { PyObject *buf; Row *rows; Py_ssize_t n, cap; } Rows;
enum { ROW_BYTES = 256, ROWS_MOST = (16 << 20) / sizeof(Row) };

/* Room for cap rows (cap > 0); -1 with an error set. */
static int rows_reserve(Rows *r, Py_ssize_t cap) {
    if (cap > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(Row)) { PyErr_NoMemory(); return -1; }
    if (!r->buf) r->buf = PyByteArray_FromStringAndSize(NULL, cap * (Py_ssize_t)sizeof(Row));
    else if (PyByteArray_Resize(r->buf, cap * (Py_ssize_t)sizeof(Row)) < 0) return -1;
    if (!r->buf) return -1;
    r->rows = (Row *)PyByteArray_AS_STRING(r->buf);
    r->cap = cap;
    return 0;
}

/* The bytearray's length cut to its n rows, its room left as it is (bytearray's own minor
 * downsize): giving the room back to malloc moved glibc's mmap threshold (set to the size of
 * an mmapped block when it is freed) below the next chunk's first guess, which then mapped
 * fresh pages every time (a page fault per 4 kB written: 1 GB of pieces scanned ~10 % slower
 * than with the copy). The room past the rows is not touched. */
static void rows_fit(PyObject *buf, Py_ssize_t n) {
    Py_SET_SIZE(buf, n * (Py_ssize_t)sizeof(Row));
    PyByteArray_AS_STRING(buf)[n * (Py_ssize_t)sizeof(Row)] = '\0';
}

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Cur c = {view.buf, view.buf, (const unsigned char *)view.buf + view.len, NULL, 0};
    Tables t;
    memset(&t, 0, sizeof t);
    Rows rows = {NULL, NULL, 0, 0};
    PyObject *result = NULL;
    if (interner_init(&t.cats) < 0 || interner_init(&t.names) < 0) { PyErr_NoMemory(); goto done; }
    if (rows_reserve(&rows, Py_MIN(view.len / ROW_BYTES, ROWS_MOST) + 16) < 0) goto done;
    int rc = 0;
    fast_read = 0;
#if defined(__x86_64__)
    Blocks blocks = {NULL, NULL, NULL, 0, 0};
    int fast = fast_on && simd_level && blocks_init(&blocks, c.base, view.len);
#endif
    /* The GIL stays held: PyOS_string_to_double and PyMem need it, and the readers run
     * chunks in separate processes, not threads. */
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '[') { c.why = "not an array"; rc = -1; }
    else {
        c.p++;
        skip_ws(&c);
        if (c.p < c.end && *c.p == ']') c.p++;
        else for (;;) {
            skip_ws(&c);
            if (c.p >= c.end || *c.p != '{') { if (!c.why) { c.why = "array item is not an object"; c.why_at = c.p - c.base; } rc = -1; break; }
            if (rows.n == rows.cap && rows_reserve(&rows, rows.cap * 2) < 0) { rc = -2; break; }
            int is_x = 0;
            t.row = rows.n;
            rc = FAST_LEFT;
#if defined(__x86_64__)
            if (fast && (rc = fast_event(&c, &blocks, &rows.rows[rows.n], &t, &is_x)) == 0) fast_read++;
#endif
            if (rc == FAST_LEFT) rc = read_event(&c, &rows.rows[rows.n], &t, &is_x);
            if (rc) break;
            if (is_x) rows.n++;
            skip_ws(&c);
            if (c.p >= c.end) { c.why = "unterminated array"; c.why_at = c.p - c.base; rc = -1; break; }
            if (*c.p == ',') { c.p++; continue; }
            if (*c.p == ']') { c.p++; break; }
            c.why = "expected ',' or ']'"; c.why_at = c.p - c.base; rc = -1; break;
        }
        if (!rc) { skip_ws(&c); if (c.p != c.end) { c.why = "text after the array"; c.why_at = c.p - c.base; rc = -1; } }
    }
    if (rc == -2) goto done;  /* out of memory (error set) */
    if (rc == -1) {
        result = PyUnicode_FromFormat("%s at byte %zd", c.why ? c.why : "declined", c.why_at);
        goto done;
    }
    {
        PyObject *buf = rows.buf;  /* the result owns it, or it is freed here */
        rows.buf = NULL;
        rows_fit(buf, rows.n);
        PyObject *side = buf ? PyBytes_FromStringAndSize((const char *)t.side, (Py_ssize_t)(t.n_side * sizeof(Side))) : NULL;
        PyObject *cats = side ? interned_list(&t.cats) : NULL;
        PyObject *names = cats ? interned_list(&t.names) : NULL;
        PyObject *odd = names ? PyBytes_FromStringAndSize((const char *)t.odd, (Py_ssize_t)sizeof t.odd) : NULL;
        if (odd) result = Py_BuildValue("(nNNNNN)", rows.n, buf, side, cats, names, odd);
        else { Py_XDECREF(buf); Py_XDECREF(side); Py_XDECREF(cats); Py_XDECREF(names); }
    }
done:
    Py_XDECREF(rows.buf);
    interner_free(&t.cats);
    interner_free(&t.names);
    PyMem_Free(t.side);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *row_size(PyObject *self, PyObject *unused) {
    return Py_BuildValue("(nnn)", (Py_ssize_t)sizeof(Row), (Py_ssize_t)sizeof(Side), (Py_ssize_t)N_ODD);
}

static const char *const SIMD_NAMES[] = {"scalar", "sse2", "avx2"};

/* Which byte scans and event reader the next scans use, for tests that compare them. */
static PyObject *simd(PyObject *self, PyObject *args) {
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|s", &name)) return NULL;
    if (name) {
        int level = -1;
        for (int i = 0; i < (int)(sizeof SIMD_NAMES / sizeof *SIMD_NAMES); i++)
            if (strcmp(name, SIMD_NAMES[i]) == 0) level = i;
        if (level < 0 || simd_use(level) < 0) return PyErr_Format(PyExc_ValueError, "no %s scans on this CPU", name);
    }
    return PyUnicode_FromString(SIMD_NAMES[simd_level]);
}

static PyObject *fast_events(PyObject *self, PyObject *args) {
    int on = -1;
    if (!PyArg_ParseTuple(args, "|p", &on)) return NULL;
    if (on >= 0) fast_on = on;
    return PyBool_FromLong(fast_on);
}

static PyObject *fast_count(PyObject *self, PyObject *unused) { return PyLong_FromSsize_t(fast_read); }

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_O,
     "scan(buffer) -> (n, rows: bytearray, side: bytes, cats: list[str], names: list[str], odd: bytes) | reason: str"},
    {"kept_columns", kept_columns, METH_VARARGS,
     "kept_columns(data, rows, side, cat_kind, cat_gpu, host, names) -> None | (counts: bytearray, other, bad, "
     "(kept names, [(name, kept runtime rows)]), (columns: tuple[bytearray], item sizes, name codes: bytearray, "
     "memcpy rows: bytearray, their args.kind: list[str])): a scanned chunk's table columns (kept.h); None "
     "where the chunk needs the numpy assembly (native.py)"},
    {"simd", simd, METH_VARARGS,
     "simd([level]) -> str: the byte scans in use ('scalar', 'sse2', 'avx2'; the best the CPU has by default); "
     "with a level, use it from the next scan on (ValueError where the CPU lacks it). For tests."},
    {"fast_events", fast_events, METH_VARARGS,
     "fast_events([on]) -> bool: whether common events take the one-pass reader (scalar scans never do); "
     "with a bool, set it. For tests."},
    {"fast_count", fast_count, METH_NOARGS, "fast_count() -> int: events the one-pass reader read in the last scan. For tests."},
    {"row_size", row_size, METH_NOARGS, "Sizes of a row and a side entry in bytes, and the number of odd-value counters (checked against kineto_native.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "scanner",
    "Native scanner for Kineto event chunks (see kineto_native.py).", -1, METHODS};

PyMODINIT_FUNC PyInit_scanner(void) {
    json_scan_init();
    for (const char *ph = PHASES; *ph; ph++) IS_PHASE[(unsigned char)*ph] = 1;
    simd_use(simd_best());
#if defined(__x86_64__)
    known_init();
#endif
    return PyModule_Create(&MODULE);
}
