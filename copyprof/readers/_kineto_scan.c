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
 * caller reconverts those columns with the Python path's own tolerant functions. Anything
 * else (escaped keys or names, duplicate keys the reader uses, bools, floats out of range,
 * ...) is declined, never guessed. tests/test_kineto_native.py checks the two
 * paths against each other on real traces and on generated and mutated events.
 *
 * Floats go through PyOS_string_to_double (correctly rounded, locale-free, as msgspec's
 * parser is); integers written into float fields are converted from int64 as msgspec does.
 */
#include "_json_scan.h"

#define N_INTS 11
/* Order of the integer args columns; kineto_native.py names them in the same order. */
enum { A_DEVICE, A_FROM_DEVICE, A_STREAM, A_CORRELATION, A_EXTERNAL_ID, A_EXTERNAL_ID_LEGACY,
       A_BYTES, A_SIZE, A_GRAPH_ID, A_GRAPH_NODE_ID, A_RANK };

typedef struct {
    int32_t cat;       /* index into the chunk's distinct categories, -1 absent/null */
    int32_t name;      /* index into the chunk's distinct names */
    int64_t pid, tid;
    double ts, dur;    /* NaN when absent or null */
    int64_t ints[N_INTS];
    int64_t grid[3], block[3];
    int64_t kind_off;  /* byte offset of args.kind's text when it is a string, else -1 */
    int64_t kind_len;
} Row;

/* An id or time value in another shape than an int64 integer / a number (a string such as
 * roctracer's "bytes": "9216" or "stream": "0x0", a float id, a null id, an integer beyond
 * int64): where its text is. The row holds -1 / NaN there; if the row is kept, the caller
 * decodes these texts as msgspec would and reruns the Python path's own tolerant conversion
 * on that column, so the column is exactly what that path gives. */
typedef struct {
    int64_t row;    /* index among the chunk's complete events */
    int32_t field;  /* A_* for args ids, then S_PID, S_TID, S_TS, S_DUR */
    int32_t len;
    int64_t off;    /* byte offset of the value's JSON text */
} Side;
enum { S_PID = N_INTS, S_TID, S_TS, S_DUR };


/* Fields whose value may be of a type the reader cannot use: the value is ignored (the field
 * reads as absent, as in the Python path, which drops it and converts the rest of the event)
 * and counted. Codes are indexes into kineto_chunk.ODD_FIELDS: the event fields, then the
 * integer args in A_* order, then args.kind, args.grid, args.block. */
enum { O_CAT, O_NAME, O_PID, O_TID, O_TS, O_DUR, O_ARGS, O_ARG0, O_KIND = O_ARG0 + N_INTS, O_GRID, O_BLOCK, N_ODD };

typedef struct {
    Interner cats, names;
    Side *side;
    Py_ssize_t n_side, cap_side;
    Py_ssize_t row;  /* index of the event being read among the complete ones */
    int64_t odd[N_ODD];
} Tables;

/* Code in ODD_FIELDS of a Side.field code (args ids, then S_PID, S_TID, S_TS, S_DUR). */
static int odd_code(int field) {
    switch (field) {
    case S_PID: return O_PID;
    case S_TID: return O_TID;
    case S_TS: return O_TS;
    case S_DUR: return O_DUR;
    default: return O_ARG0 + field;
    }
}

/* Skips a value of a type the field cannot take and counts it. Declines what the Python
 * path's generic decode would reject inside it (it decodes such a chunk generically, and
 * that decode range-checks every number): a float out of double range, or number text too
 * long to judge here. */
static int skip_number_checked(Cur *c) {
    const unsigned char *s; int is_int;
    if (lex_number(c, &s, &is_int) < 0) return -1;
    size_t len = (size_t)(c->p - s);
    if (len > 300) DECLINE(c, "number text too long");
    if (is_int) return 0;
    char buf[400];
    memcpy(buf, s, len); buf[len] = 0;
    double v = PyOS_string_to_double(buf, NULL, NULL);
    if (v == -1.0 && PyErr_Occurred()) { PyErr_Clear(); DECLINE(c, "unparsable number"); }
    if (!isfinite(v)) DECLINE(c, "number out of range");
    return 0;
}

static int skip_checked(Cur *c, int depth) {
    if (c->p >= c->end) DECLINE(c, "missing value");
    unsigned char ch = *c->p;
    if (ch == '-' || (ch >= '0' && ch <= '9')) return skip_number_checked(c);
    if (ch != '[' && ch != '{') return skip_value(c, depth);
    if (depth >= MAX_DEPTH) DECLINE(c, "nesting too deep");
    unsigned char close = ch == '[' ? ']' : '}';
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) { c->p++; return 0; }
    for (;;) {
        skip_ws(c);
        if (close == '}') {
            const unsigned char *s; Py_ssize_t n; int esc;
            if (c->p >= c->end || *c->p != '"') DECLINE(c, "expected a key");
            if (lex_string(c, &s, &n, &esc) < 0) return -1;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') DECLINE(c, "expected ':'");
            c->p++;
            skip_ws(c);
        }
        if (skip_checked(c, depth + 1) < 0) return -1;
        skip_ws(c);
        if (c->p >= c->end) DECLINE(c, "unterminated container");
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == close) { c->p++; return 0; }
        DECLINE(c, "expected ',' or a closing bracket");
    }
}

static int skip_odd(Cur *c, Tables *t, int code) {
    if (skip_checked(c, 2) < 0) return -1;
    t->odd[code]++;
    return 0;
}

/* Another value msgspec accepts in an id/time field (int | float | str | None): a string,
 * a float in range, a null, an integer beyond int64; noted in the side table. Declines
 * other types and numbers out of double range (msgspec fails on them: 1e400, true, []). */
static int read_odd(Cur *c, Tables *t, int field) {
    const unsigned char *start = c->p, *s; Py_ssize_t n; int esc, is_int;
    unsigned char ch = c->p < c->end ? *c->p : 0;
    if (ch == '"') {
        if (lex_string(c, &s, &n, &esc) < 0) return -1;
    } else if (ch == 'n') {
        if (lex_literal(c, "null", 4) < 0) return -1;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        if (lex_number(c, &s, &is_int) < 0) return -1;
        if (!is_int || c->p - s > 18) {
            char buf[400];
            size_t len = (size_t)(c->p - s);
            if (len >= sizeof buf) DECLINE(c, "number text too long");
            memcpy(buf, s, len); buf[len] = 0;
            double v = PyOS_string_to_double(buf, NULL, NULL);
            if (v == -1.0 && PyErr_Occurred()) { PyErr_Clear(); DECLINE(c, "unparsable number"); }
            if (!isfinite(v)) DECLINE(c, "number out of range");
        }
    } else if (ch == '[' || ch == '{' || ch == 't' || ch == 'f') {
        return skip_odd(c, t, odd_code(field));  /* msgspec: int | float | str | None rejects these */
    } else DECLINE(c, "number field of an unexpected type");
    if (c->p - start > INT32_MAX) DECLINE(c, "value too long");
    if (t->n_side == t->cap_side) {
        Py_ssize_t cap = t->cap_side ? t->cap_side * 2 : 256;
        Side *grown = PyMem_Realloc(t->side, (size_t)cap * sizeof(Side));
        if (!grown) DECLINE(c, "out of memory");
        t->side = grown; t->cap_side = cap;
    }
    Side e = {t->row, field, (int32_t)(c->p - start), start - c->base};
    t->side[t->n_side++] = e;
    return 0;
}

/* An id field: an int64 integer, or -1 and a side-table entry (read_odd). */
static int read_id(Cur *c, Tables *t, int field, int64_t *out) {
    const unsigned char *start = c->p;
    unsigned char ch = start < c->end ? *start : 0;
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        const unsigned char *s; int is_int;
        if (lex_number(c, &s, &is_int) < 0) return -1;
        if (is_int && int_value(s, c->p, out) == 0) return 0;
        c->p = start;
    }
    *out = -1;
    return read_odd(c, t, field);
}

/* ts / dur: a number (NaN for null), or NaN and a side-table entry (read_odd). */
static int read_float(Cur *c, Tables *t, int field, double *out) {
    *out = NAN;
    if (c->p < c->end && *c->p == 'n') return lex_literal(c, "null", 4);
    const unsigned char *s; int is_int;
    if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) return read_odd(c, t, field);
    if (lex_number(c, &s, &is_int) < 0) return -1;
    if (is_int) {  /* msgspec reads an integer, then converts it */
        int64_t v;
        if (int_value(s, c->p, &v) < 0) { c->p = s; return read_odd(c, t, field); }
        *out = (double)v;
        return 0;
    }
    if (fast_float(s, c->p, out)) return 0;
    char buf[400];
    size_t n = (size_t)(c->p - s);
    if (n >= sizeof buf) DECLINE(c, "number text too long");
    memcpy(buf, s, n); buf[n] = 0;
    char *e;
    double v = PyOS_string_to_double(buf, &e, NULL);
    if (v == -1.0 && PyErr_Occurred()) { PyErr_Clear(); DECLINE(c, "unparsable float"); }
    if ((size_t)(e - buf) != n || !isfinite(v)) DECLINE(c, "float out of range");
    *out = v;
    return 0;
}

static int read_dims(Cur *c, Tables *t, int code, int64_t dims[3]) {
    dims[0] = dims[1] = dims[2] = -1;
    if (c->p < c->end && *c->p == 'n') return lex_literal(c, "null", 4);
    if (c->p >= c->end) DECLINE(c, "missing value");
    unsigned char ch = *c->p;
    if (ch == '"' || ch == '{' || ch == 't' || ch == 'f' || ch == '-' || (ch >= '0' && ch <= '9'))
        return skip_odd(c, t, code);  /* Inductor's "grid": "grid(100,)" */
    if (*c->p != '[') DECLINE(c, "grid/block is not an array");
    int64_t v[3]; int k = 0;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') { c->p++; return 0; }
    for (;;) {
        skip_ws(c);
        int64_t x;
        if (read_int(c, &x) < 0) return -1;
        if (k < 3) v[k] = x;
        k++;
        skip_ws(c);
        if (c->p >= c->end) DECLINE(c, "unterminated array");
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == ']') { c->p++; break; }
        DECLINE(c, "expected ',' or ']'");
    }
    if (k == 3) { dims[0] = v[0]; dims[1] = v[1]; dims[2] = v[2]; }  /* other lengths: unknown */
    return 0;
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

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_kineto_scan",
    "Native scanner for Kineto event chunks (see kineto_native.py).", -1, METHODS};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    json_scan_init();
    return PyModule_Create(&MODULE);
}
