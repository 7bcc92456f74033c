/* Native scanner for one chunk of Kineto trace events: JSON bytes in, packed rows out.
 *
 * Why: the pure-Python reader (kineto_columns.py) spends ~3.3 s of CPU per GB of JSON
 * building msgspec Structs and then reading them back field by field into numpy arrays.
 * This scanner reads the same fields straight from the bytes into one packed row per
 * complete ("X") event, with no Python object per event (~0.93 s per GB on one core, ~1.1 s
 * with the numpy assembly that follows; benchmarks/README.md item 24).
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
 * traces and on generated and mutated events. Rows, the side table and the value readers
 * are in values.h.
 *
 * Floats go through PyOS_string_to_double (correctly rounded, locale-free, as msgspec's
 * parser is); integers written into float fields are converted from int64 as msgspec does.
 */
#include "values.h"

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
        int slot = -1, bit = -1;
        if (KEY("device")) slot = A_DEVICE;
        else if (KEY("fromDevice")) slot = A_FROM_DEVICE;
        else if (KEY("stream")) slot = A_STREAM;
        else if (KEY("correlation")) slot = A_CORRELATION;
        else if (KEY("External id")) slot = A_EXTERNAL_ID;
        else if (KEY("external id")) slot = A_EXTERNAL_ID_LEGACY;
        else if (KEY("bytes")) slot = A_BYTES;
        else if (KEY("size")) slot = A_SIZE;
        else if (KEY("graph id")) slot = A_GRAPH_ID;
        else if (KEY("graph node id")) slot = A_GRAPH_NODE_ID;
        else if (KEY("rank")) slot = A_RANK;
        else if (KEY("grid")) bit = N_INTS;
        else if (KEY("block")) bit = N_INTS + 1;
        else if (KEY("kind")) bit = N_INTS + 2;
        else if (KEY("Input Dims")) bit = N_INTS + 3;
        else if (KEY("Input type")) bit = N_INTS + 4;
        if (slot >= 0) bit = slot;
        if (bit >= 0) {
            if (seen & (1u << bit)) DECLINE(c, "duplicate args key");
            seen |= 1u << bit;
        }
        if (slot >= 0) {
            if (read_id(c, t, slot, &r->ints[slot]) < 0) return -1;
        } else if (bit == N_INTS) {
            if (read_dims(c, t, O_GRID, r->grid) < 0) return -1;
        } else if (bit == N_INTS + 1) {
            if (read_dims(c, t, O_BLOCK, r->block) < 0) return -1;
        } else if (bit == N_INTS + 2) {
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
        } else if (bit == N_INTS + 3 || bit == N_INTS + 4) {
            if (note_raw(c, t, bit == N_INTS + 3 ? S_DIMS : S_TYPES) < 0) return -1;
        } else if (skip_value(c, 2) < 0) return -1;
        int more = next_member(c);
        if (more < 0) return -1;
        if (!more) return 0;
    }
}

enum { F_CAT, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_ARGS, N_FIELDS };


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
        int f = -1;
        if (KEY("ph")) {
            const unsigned char *s; Py_ssize_t n;
            if (ph) DECLINE(c, "duplicate ph");
            if (read_plain_string(c, &s, &n) < 0) return -1;
            if (n != 1 || !memchr(PHASES, s[0], sizeof PHASES - 1)) DECLINE(c, "unknown ph");
            ph = s[0];
        } else if (KEY("cat")) f = F_CAT;
        else if (KEY("name")) f = F_NAME;
        else if (KEY("pid")) f = F_PID;
        else if (KEY("tid")) f = F_TID;
        else if (KEY("ts")) f = F_TS;
        else if (KEY("dur")) f = F_DUR;
        else if (KEY("args")) f = F_ARGS;
        if (f >= 0) {
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
        } else if (!KEY("ph") && skip_value(c, 1) < 0) return -1;
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

/* ---------- the module function ---------- */

typedef struct { Row *rows; Py_ssize_t n, cap; } Rows;

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Cur c = {view.buf, view.buf, (const unsigned char *)view.buf + view.len, NULL, 0};
    Tables t;
    memset(&t, 0, sizeof t);
    Rows rows = {NULL, 0, 0};
    PyObject *result = NULL;
    if (interner_init(&t.cats) < 0 || interner_init(&t.names) < 0) { PyErr_NoMemory(); goto done; }
    int rc = 0;
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
            if (rows.n == rows.cap) {
                Py_ssize_t cap = rows.cap ? rows.cap * 2 : 4096;
                Row *nr = PyMem_Realloc(rows.rows, (size_t)cap * sizeof(Row));
                if (!nr) { rc = -3; break; }
                rows.rows = nr; rows.cap = cap;
            }
            int is_x = 0;
            t.row = rows.n;
            rc = read_event(&c, &rows.rows[rows.n], &t, &is_x);
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
    if (rc == -3) { PyErr_NoMemory(); goto done; }
    if (rc == -2) goto done;  /* the interner ran out of memory (error set) */
    if (rc == -1) {
        result = PyUnicode_FromFormat("%s at byte %zd", c.why ? c.why : "declined", c.why_at);
        goto done;
    }
    {
        PyObject *buf = PyByteArray_FromStringAndSize((const char *)rows.rows, (Py_ssize_t)(rows.n * sizeof(Row)));
        PyObject *side = buf ? PyBytes_FromStringAndSize((const char *)t.side, (Py_ssize_t)(t.n_side * sizeof(Side))) : NULL;
        PyObject *cats = side ? interned_list(&t.cats) : NULL;
        PyObject *names = cats ? interned_list(&t.names) : NULL;
        PyObject *odd = names ? PyBytes_FromStringAndSize((const char *)t.odd, (Py_ssize_t)sizeof t.odd) : NULL;
        if (odd) result = Py_BuildValue("(nNNNNN)", rows.n, buf, side, cats, names, odd);
        else { Py_XDECREF(buf); Py_XDECREF(side); Py_XDECREF(cats); Py_XDECREF(names); }
    }
done:
    PyMem_Free(rows.rows);
    interner_free(&t.cats);
    interner_free(&t.names);
    PyMem_Free(t.side);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *row_size(PyObject *self, PyObject *unused) {
    return Py_BuildValue("(nnn)", (Py_ssize_t)sizeof(Row), (Py_ssize_t)sizeof(Side), (Py_ssize_t)N_ODD);
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_O,
     "scan(buffer) -> (n, rows: bytearray, side: bytes, cats: list[str], names: list[str], odd: bytes) | reason: str"},
    {"row_size", row_size, METH_NOARGS, "Sizes of a row and a side entry in bytes, and the number of odd-value counters (checked against kineto_native.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "scanner",
    "Native scanner for Kineto event chunks (see kineto_native.py).", -1, METHODS};

PyMODINIT_FUNC PyInit_scanner(void) {
    json_scan_init();
    return PyModule_Create(&MODULE);
}
