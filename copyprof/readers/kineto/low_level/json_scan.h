/* Validating JSON lexer and string interner for the native Kineto scanner (scan.c).
 *
 * Why validating: the scanner may only accept what msgspec (the Python path's decoder) also
 * accepts, so every value it passes over is checked, more strictly than msgspec does (UTF-8
 * in every string, escapes, control characters, number grammar, nesting depth); anything
 * else makes it decline the chunk. DECLINE records the first reason and its byte offset.
 */
#ifndef COPYPROF_JSON_SCAN_H
#define COPYPROF_JSON_SCAN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 64

typedef struct {
    const unsigned char *p;    /* cursor */
    const unsigned char *base;
    const unsigned char *end;
    const char *why;           /* reason for declining */
    Py_ssize_t why_at;
} Cur;

#define DECLINE(c, msg) do { if (!(c)->why) { (c)->why = (msg); (c)->why_at = (c)->p - (c)->base; } return -1; } while (0)

/* ---------- interning of short byte strings (names, categories) ---------- */

typedef struct {
    const unsigned char *s;
    Py_ssize_t len;
    uint64_t hash;
    int32_t code;
} Slot;

typedef struct {
    Slot *slots;
    Py_ssize_t cap;  /* power of two */
    Py_ssize_t n;
    Slot *order;     /* by code */
    Py_ssize_t order_cap;
} Interner;

/* Eight bytes per step (kernel names run to hundreds of bytes; byte-wise FNV-1a was a
 * quarter of the scan). Any decent mix will do: equal strings are still compared in full. */
static uint64_t hash_bytes(const unsigned char *s, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n, w;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s + i, (size_t)(n - i));
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static int interner_init(Interner *t) {
    t->cap = 256; t->n = 0; t->order_cap = 128;
    t->slots = PyMem_Calloc((size_t)t->cap, sizeof(Slot));
    t->order = PyMem_Malloc((size_t)t->order_cap * sizeof(Slot));
    return (t->slots && t->order) ? 0 : -1;
}

static void interner_free(Interner *t) { PyMem_Free(t->slots); PyMem_Free(t->order); }

static int interner_grow(Interner *t) {
    Py_ssize_t cap = t->cap * 2;
    Slot *slots = PyMem_Calloc((size_t)cap, sizeof(Slot));
    if (!slots) return -1;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        Slot *o = &t->order[i];
        Py_ssize_t j = (Py_ssize_t)(o->hash & (uint64_t)(cap - 1));
        while (slots[j].s) j = (j + 1) & (cap - 1);
        slots[j] = *o;
    }
    PyMem_Free(t->slots);
    t->slots = slots; t->cap = cap;
    return 0;
}

/* Code of the string, adding it when new; -1 on memory error. */
static int32_t intern(Interner *t, const unsigned char *s, Py_ssize_t len) {
    uint64_t h = hash_bytes(s, len);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->slots[j].s) {
        Slot *sl = &t->slots[j];
        if (sl->hash == h && sl->len == len && memcmp(sl->s, s, (size_t)len) == 0) return sl->code;
        j = (j + 1) & (t->cap - 1);
    }
    if (t->n >= INT32_MAX) return -1;
    if (t->n == t->order_cap) {
        Slot *o = PyMem_Realloc(t->order, (size_t)t->order_cap * 2 * sizeof(Slot));
        if (!o) return -1;
        t->order = o; t->order_cap *= 2;
    }
    Slot sl = {s, len, h, (int32_t)t->n};
    t->slots[j] = sl;
    t->order[t->n++] = sl;
    if (t->n * 2 > t->cap && interner_grow(t) < 0) return -1;
    return sl.code;
}

static PyObject *interned_list(Interner *t) {
    PyObject *out = PyList_New(t->n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)t->order[i].s, t->order[i].len, "strict");
        if (!s) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, s);
    }
    return out;
}

/* ---------- JSON lexing (validating) ---------- */

/* Whitespace between tokens. Kineto writes ": " and ", " between members, newlines and runs
 * of indentation between events and args: the whitespace test byte by byte was a fifth of the
 * scan (callgrind), so a lone space is one test and longer runs go 16 bytes at a time. Stops
 * at the first byte that is not ' ', '\n', '\r' or '\t' (the parser then judges it), as the
 * byte loop does. */
static inline void skip_ws(Cur *c) {
    const unsigned char *p = c->p, *end = c->end;
    if (p >= end || *p > ' ') return;
    if (*p == ' ' && end - p > 1 && p[1] > ' ') { c->p = p + 1; return; }
#ifdef __SSE2__
    {
        const __m128i space = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r'),
                      tab = _mm_set1_epi8('\t');
        while (end - p >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)p);
            __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, space), _mm_cmpeq_epi8(x, nl)),
                                      _mm_or_si128(_mm_cmpeq_epi8(x, cr), _mm_cmpeq_epi8(x, tab)));
            unsigned bits = ~(unsigned)_mm_movemask_epi8(ws) & 0xFFFFu;
            if (bits) { c->p = p + __builtin_ctz(bits); return; }
            p += 16;
        }
    }
#endif
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    c->p = p;
}

static int hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Length of a valid UTF-8 sequence starting at s (first byte >= 0x80), or 0. */
static int utf8_len(const unsigned char *s, const unsigned char *end) {
    unsigned char b = s[0];
    int n; uint32_t cp;
    if (b >= 0xC2 && b <= 0xDF) { n = 2; cp = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) { n = 3; cp = b & 0x0F; }
    else if (b >= 0xF0 && b <= 0xF4) { n = 4; cp = b & 0x07; }
    else return 0;
    if (end - s < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    return n;
}

/* Byte classes for the string loop: 0 plain, 1 needs a look ('"', '\\', control, >= 0x80). */
static unsigned char STR_SPECIAL[256];

#ifdef __SSE2__
/* Which of the 16 bytes at p need a look inside a string: '"', '\\', and (signed) < 0x20,
 * which also catches >= 0x80 (bit i for byte i). */
static inline unsigned needs_a_look16(const unsigned char *p) {
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                             _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)));
    return (unsigned)_mm_movemask_epi8(m);
}
#endif

/* At '"': validates the string; s and len give the raw text between the quotes; *esc is set
 * when it holds an escape. The general case of lex_string. */
static int lex_string_long(Cur *c, const unsigned char **s, Py_ssize_t *len, int *esc) {
    const unsigned char *p = c->p + 1, *end = c->end;
    *esc = 0;
    for (;;) {
#ifdef __SSE2__
        while (end - p >= 16) {
            unsigned bits = needs_a_look16(p);
            if (bits) { p += __builtin_ctz(bits); break; }
            p += 16;
        }
#endif
        while (p < end && !STR_SPECIAL[*p]) p++;
        if (p >= end) { c->p = p; DECLINE(c, "unterminated string"); }
        unsigned char ch = *p;
        if (ch == '"') break;
        if (ch == '\\') {
            *esc = 1;
            if (end - p < 2) { c->p = p; DECLINE(c, "unterminated escape"); }
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6) { c->p = p; DECLINE(c, "short \\u escape"); }
                int v = 0;
                for (int i = 2; i < 6; i++) {
                    int h = hexval(p[i]);
                    if (h < 0) { c->p = p; DECLINE(c, "bad \\u escape"); }
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) { c->p = p; DECLINE(c, "surrogate escape"); }
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
            } else { c->p = p; DECLINE(c, "bad escape"); }
        } else if (ch < 0x20) {
            c->p = p; DECLINE(c, "control character in string");
        } else {
            int n = utf8_len(p, end);
            if (!n) { c->p = p; DECLINE(c, "invalid UTF-8"); }
            p += n;
        }
    }
    *s = c->p + 1;
    *len = p - (c->p + 1);
    c->p = p + 1;
    return 0;
}

/* At '"': validates the string (as lex_string_long). Keys and most values are short plain
 * ASCII: when the first byte of the next 16 that needs a look is the closing quote, the
 * string is valid and done here, inline, without a call (per-key overhead was a sixth of
 * the scan). */
static inline int lex_string(Cur *c, const unsigned char **s, Py_ssize_t *len, int *esc) {
#ifdef __SSE2__
    const unsigned char *p = c->p + 1;
    if (c->end - p >= 16) {
        unsigned bits = needs_a_look16(p);
        if (bits) {
            int i = __builtin_ctz(bits);
            if (p[i] == '"') {
                *esc = 0; *s = p; *len = i;
                c->p = p + i + 1;
                return 0;
            }
        }
    }
#endif
    return lex_string_long(c, s, len, esc);
}

/* Validates a JSON number at the cursor; *is_int when it has no fraction or exponent. */
static int lex_number(Cur *c, const unsigned char **start, int *is_int) {
    const unsigned char *p = c->p, *end = c->end;
    *start = p; *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) { c->p = p; DECLINE(c, "bad number"); }
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') { while (p < end && *p >= '0' && *p <= '9') p++; }
    else { c->p = p; DECLINE(c, "bad number"); }
    if (p < end && *p == '.') {
        *is_int = 0; p++;
        if (p >= end || *p < '0' || *p > '9') { c->p = p; DECLINE(c, "bad number"); }
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0; p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') { c->p = p; DECLINE(c, "bad number"); }
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    c->p = p;
    return 0;
}

/* int64 value of an integer's text (already validated); -1 when it does not fit. */
static int int_value(const unsigned char *s, const unsigned char *e, int64_t *out) {
    int neg = (*s == '-');
    if (neg) s++;
    uint64_t v = 0;
    for (; s < e; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (neg) { if (v > (uint64_t)INT64_MAX + 1) return -1; *out = v ? (int64_t)(0 - v) : 0; }
    else { if (v > (uint64_t)INT64_MAX) return -1; *out = (int64_t)v; }
    return 0;
}

static int lex_literal(Cur *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) DECLINE(c, "invalid literal");
    c->p += n;
    return 0;
}

static int skip_value(Cur *c, int depth);

/* How a container's members are skipped: skip_value (any JSON) or values.h's skip_checked
 * (numbers checked as msgspec would read them). */
typedef int (*SkipFn)(Cur *c, int depth);

/* Skip the array or object at c->p (its opening bracket), each member with `skip`. */
static int skip_members(Cur *c, int depth, unsigned char close, SkipFn skip) {
    if (depth >= MAX_DEPTH) DECLINE(c, "nesting too deep");
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
        if (skip(c, depth + 1) < 0) return -1;
        skip_ws(c);
        if (c->p >= c->end) DECLINE(c, "unterminated container");
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == close) { c->p++; return 0; }
        DECLINE(c, "expected ',' or a closing bracket");
    }
}

static int skip_container(Cur *c, int depth, unsigned char close) {
    return skip_members(c, depth, close, skip_value);
}

static int skip_value(Cur *c, int depth) {
    if (c->p >= c->end) DECLINE(c, "missing value");
    const unsigned char *s; Py_ssize_t n; int esc, is_int;
    switch (*c->p) {
    case '"': return lex_string(c, &s, &n, &esc);
    case '{': return skip_container(c, depth, '}');
    case '[': return skip_container(c, depth, ']');
    case 't': return lex_literal(c, "true", 4);
    case 'f': return lex_literal(c, "false", 5);
    case 'n': return lex_literal(c, "null", 4);
    default: return lex_number(c, &s, &is_int);
    }
}

/* ---------- typed readers ---------- */

/* The common id in one pass: an integer of at most 18 digits (so within int64), no leading
 * zero, followed by a byte that cannot continue a number. 1 when read (cursor after it);
 * 0 leaves the cursor for the validating path (lex_number + int_value), which decides the
 * rest (longer integers, floats, bad grammar) as before. */
static inline int quick_int(Cur *c, int64_t *out) {
    const unsigned char *p = c->p, *end = c->end;
    int neg = (p < end && *p == '-');
    p += neg;
    const unsigned char *d = p;
    uint64_t v = 0;
    while (p < end && p - d < 19 && (unsigned)(*p - '0') < 10) v = v * 10 + (unsigned)(*p++ - '0');
    Py_ssize_t nd = p - d;
    if (nd == 0 || nd > 18 || (nd > 1 && *d == '0') || p >= end) return 0;
    if (*p == '.' || *p == 'e' || *p == 'E' || (unsigned)(*p - '0') < 10) return 0;
    *out = neg ? -(int64_t)v : (int64_t)v;
    c->p = p;
    return 1;
}

static int read_int(Cur *c, int64_t *out) {
    const unsigned char *s; int is_int;
    if (quick_int(c, out)) return 0;
    if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) DECLINE(c, "expected an integer");
    if (lex_number(c, &s, &is_int) < 0) return -1;
    if (!is_int) DECLINE(c, "expected an integer");
    if (int_value(s, c->p, out) < 0) DECLINE(c, "integer beyond int64");
    return 0;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Clinger's fast path: a decimal whose digits form an integer m <= 2^53 and whose power of
 * ten k has |k| <= 22 is m * 10^k or m / 10^-k, both operands exact doubles, so one IEEE
 * operation gives the correctly rounded value (what any correct parser returns). Kineto's
 * ts ("5155787927025.163": 16 digits, 10^-3) and dur take it; other numbers go to dtoa. */
static int fast_float(const unsigned char *s, const unsigned char *e, double *out) {
    int neg = 0, digits = 0, exp10 = 0;
    uint64_t m = 0;
    if (*s == '-') { neg = 1; s++; }
    for (; s < e && *s >= '0' && *s <= '9'; s++) {
        if (m || *s != '0') digits++;
        if (digits > 16) return 0;
        m = m * 10 + (unsigned)(*s - '0');
    }
    if (s < e && *s == '.') {
        for (s++; s < e && *s >= '0' && *s <= '9'; s++) {
            if (m || *s != '0') digits++;
            if (digits > 16) return 0;
            m = m * 10 + (unsigned)(*s - '0');
            exp10--;
        }
    }
    if (s != e) return 0;  /* an exponent: leave it to dtoa */
    if (m > (1ULL << 53) || exp10 < -22) return 0;
    double v = exp10 ? (double)m / POW10[-exp10] : (double)m;
    *out = neg ? -v : v;
    return 1;
}

/* The common ts / dur in one pass: digits, an optional fraction, no exponent, at most 16
 * significant digits and a power of ten within 10^-22: fast_float's case, read while it is
 * lexed (the grammar checked as lex_number checks it). 1 when read; 0 leaves the cursor for
 * the validating path. */
static inline int quick_float(Cur *c, double *out) {
    const unsigned char *p = c->p, *end = c->end;
    int neg = (p < end && *p == '-'), digits = 0, exp10 = 0;
    p += neg;
    if (p >= end || (unsigned)(*p - '0') >= 10 || (*p == '0' && p + 1 < end && (unsigned)(p[1] - '0') < 10)) return 0;
    uint64_t m = 0;
    for (; p < end && (unsigned)(*p - '0') < 10; p++) {
        if (m || *p != '0') digits++;
        m = m * 10 + (unsigned)(*p - '0');
        if (digits > 16) return 0;
    }
    int fraction = (p < end && *p == '.');
    if (fraction) {
        p++;
        if (p >= end || (unsigned)(*p - '0') >= 10) return 0;
        for (; p < end && (unsigned)(*p - '0') < 10; p++) {
            if (m || *p != '0') digits++;
            m = m * 10 + (unsigned)(*p - '0');
            exp10--;
            if (digits > 16) return 0;
        }
    }
    if (p >= end || *p == 'e' || *p == 'E' || m > (1ULL << 53) || exp10 < -22) return 0;
    double v = exp10 ? (double)m / POW10[-exp10] : (double)m;
    /* "-0" is the integer 0, read as msgspec reads an integer in a float field: +0.0 */
    *out = neg && (m || fraction) ? -v : v;
    c->p = p;
    return 1;
}

/* A string without escapes (the fields the reader keys on). */
static int read_plain_string(Cur *c, const unsigned char **s, Py_ssize_t *n) {
    int esc;
    if (c->p >= c->end || *c->p != '"') DECLINE(c, "expected a string");
    if (lex_string(c, s, n, &esc) < 0) return -1;
    if (esc) DECLINE(c, "escaped string in a field the reader uses");
    return 0;
}

/* A member's key, up to its value (cursor after the ':'). Escaped keys are declined: msgspec
 * matches field names after unescaping, and the scanner compares raw bytes. */
static int read_key(Cur *c, const unsigned char **k, Py_ssize_t *kn) {
    int esc;
    skip_ws(c);
    if (c->p >= c->end || *c->p != '"') DECLINE(c, "expected a key");
    if (lex_string(c, k, kn, &esc) < 0) return -1;
    if (esc) DECLINE(c, "escaped key");
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') DECLINE(c, "expected ':'");
    c->p++;
    skip_ws(c);
    return 0;
}

/* After a member's value: 1 when another member follows (','), 0 at the object's '}'. */
static int next_member(Cur *c) {
    skip_ws(c);
    if (c->p >= c->end) DECLINE(c, "unterminated object");
    if (*c->p == ',') { c->p++; return 1; }
    if (*c->p == '}') { c->p++; return 0; }
    DECLINE(c, "expected ',' or '}'");
}

static inline int key_is(const unsigned char *s, Py_ssize_t n, const char *lit, Py_ssize_t ln) {
    return n == ln && memcmp(s, lit, (size_t)ln) == 0;
}
#define KEY(lit) key_is(k, kn, lit, (Py_ssize_t)sizeof(lit) - 1)

/* Fills the string loop's byte classes; called once at module init. */
static void json_scan_init(void) {
    for (int i = 0; i < 256; i++) STR_SPECIAL[i] = (i == '"' || i == '\\' || i < 0x20 || i >= 0x80);
}

#endif
