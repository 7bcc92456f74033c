/* Packed rows, the side table and the typed value readers of the native Kineto scanner
 * (scan.c): what one field's value becomes in a row, for every shape the Python path
 * (kineto_columns.py) accepts there — an int64 id, a number, a side-table entry for the other
 * shapes msgspec accepts, an ignored and counted value of an unexpected type — or a decline.
 * Split from scan.c to keep each file readable; included by it only.
 */
#ifndef COPYPROF_KINETO_VALUES_H
#define COPYPROF_KINETO_VALUES_H

#include "json_scan.h"


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
    int32_t field;  /* A_* for args ids, then S_PID, S_TID, S_TS, S_DUR; S_DIMS, S_TYPES: raw text */
    int32_t len;
    int64_t off;    /* byte offset of the value's JSON text */
} Side;
enum { S_PID = N_INTS, S_TID, S_TS, S_DUR, S_DIMS, S_TYPES };


/* Fields whose value may be of a type the reader cannot use: the value is ignored (the field
 * reads as absent, as in the Python path, which drops it and converts the rest of the event)
 * and counted. Codes are indexes into kineto_chunk.ODD_FIELDS: the event fields, then the
 * integer args in A_* order, then args.kind, args.grid, args.block. */
enum { O_CAT, O_NAME, O_PID, O_TID, O_TS, O_DUR, O_ARGS, O_ARG0, O_KIND = O_ARG0 + N_INTS, O_GRID, O_BLOCK, N_ODD };

#define NEXT_NAME_BITS 10

typedef struct {
    Interner cats, names;
    Side *side;
    Py_ssize_t n_side, cap_side;
    Py_ssize_t row;  /* index of the event being read among the complete ones */
    int64_t odd[N_ODD];
    /* fast_event's guesses of names (name_guess.h): code + 1 (0: none) of the name read last
     * after last_name among those that begin with the same 32 bytes, by name_slot */
    int32_t last_name;
    int32_t next_name[1 << NEXT_NAME_BITS];
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
    return skip_members(c, depth, ch == '[' ? ']' : '}', skip_checked);
}

static int skip_odd(Cur *c, Tables *t, int code) {
    if (skip_checked(c, 2) < 0) return -1;
    t->odd[code]++;
    return 0;
}

/* Note the value from `start` to the cursor in the side table: its row, field, length and
 * offset, for the Python side to read. */
static int note_side(Cur *c, Tables *t, int field, const unsigned char *start) {
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
    return note_side(c, t, field, start);
}

/* An id field: an int64 integer, or -1 and a side-table entry (read_odd). */
static int read_id(Cur *c, Tables *t, int field, int64_t *out) {
    if (quick_int(c, out)) return 0;
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
    if (quick_float(c, out)) return 0;
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


#endif

/* The raw JSON text of a value the Python side reads itself (args "Input Dims" / "Input type"
 * of record_shapes traces): skipped here, its offset and length noted in the side table. */
static int note_raw(Cur *c, Tables *t, int field) {
    const unsigned char *start = c->p;
    if (skip_value(c, 2) < 0) return -1;
    return note_side(c, t, field, start);
}
