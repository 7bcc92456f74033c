/* Validating JSON lexer for the native Kineto scanner (scan.c); the string interner
 * (interner.h) and the byte scans (byte_scan.h) are included from here.
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
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define MAX_DEPTH 64

/* For the few small helpers of the hottest paths, which GCC otherwise leaves out of line
 * for their many call sites. */
#define ALWAYS_INLINE inline __attribute__((always_inline))

typedef struct {
    const unsigned char *p;    /* cursor */
    const unsigned char *base;
    const unsigned char *end;
    const char *why;           /* reason for declining */
    Py_ssize_t why_at;
} Cur;

#define DECLINE(c, msg) do { if (!(c)->why) { (c)->why = (msg); (c)->why_at = (c)->p - (c)->base; } return -1; } while (0)

#include "interner.h"
#include "byte_scan.h"

/* ---------- JSON lexing (validating) ---------- */

/* Whitespace between tokens: stops at the first byte that is not ' ', '\n', '\r' or '\t'
 * (the parser then judges it), or at end. Kineto writes ": " and ", " between members:
 * no whitespace and a lone space are settled by the first tests, inline. */
static inline const unsigned char *ws_from(const unsigned char *p, const unsigned char *end) {
    if (p < end && *p > ' ') return p;
    if (end - p > 1 && *p == ' ' && p[1] > ' ') return p + 1;
    return ws_end(p, end);
}

static inline void skip_ws(Cur *c) { c->p = ws_from(c->p, c->end); }

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

/* At '"', with p the first byte that needs a look: validates the string; s and len give the
 * raw text between the quotes; *esc is set when it holds an escape. The general case of
 * lex_string. */
static int lex_string_long(Cur *c, const unsigned char *p, const unsigned char **s, Py_ssize_t *len, int *esc) {
    const unsigned char *end = c->end;
    *esc = 0;
    for (;;) {
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
        p = string_stop(p, end);
    }
    *s = c->p + 1;
    *len = p - (c->p + 1);
    c->p = p + 1;
    return 0;
}

/* At '"': validates the string (as lex_string_long). Keys and most values are plain ASCII:
 * when the first byte that needs a look is the closing quote, the string is valid and done
 * here, inline, without a call (per-key overhead was a sixth of the scan). */
static inline int lex_string(Cur *c, const unsigned char **s, Py_ssize_t *len, int *esc) {
    const unsigned char *p = c->p + 1, *q = string_stop(p, c->end);
    if (q < c->end && *q == '"') {
        *esc = 0; *s = p; *len = q - p;
        c->p = q + 1;
        return 0;
    }
    return lex_string_long(c, q, s, len, esc);
}

/* ---------- numbers ---------- */

/* Digit runs go byte by byte: Kineto's numbers are short, and a loop whose exit the CPU
 * predicts lets it run ahead to the next token, where counting the digits of a word at
 * once (tried) puts the count on the path to the next token's address and was slower
 * (tried again for fast_event's ids, 16 bytes at once and the value eight digits at a time:
 * 280 -> 298 ns per kernel event; for the values it skips: no change). */

/* The run of ASCII digits from p on (before end): its length in *n, and its value, exact
 * when *n <= 19 (callers reject longer runs). */
static inline uint64_t digits_at(const unsigned char *p, const unsigned char *end, Py_ssize_t *n) {
    const unsigned char *q = p;
    uint64_t v = 0;
    for (; q < end && (unsigned)(*q - '0') < 10; q++) v = v * 10 + (unsigned)(*q - '0');
    *n = q - p;
    return v;
}

static inline Py_ssize_t digit_run(const unsigned char *p, const unsigned char *end) {
    const unsigned char *q = p;
    while (q < end && (unsigned)(*q - '0') < 10) q++;
    return q - p;
}

static const uint64_t POW10_INT[] = {1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
                                     100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL,
                                     1000000000000ULL, 10000000000000ULL, 100000000000000ULL,
                                     1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
                                     1000000000000000000ULL, 10000000000000000000ULL};

/* The end of the JSON number at p, its grammar checked; *is_int when it has no fraction or
 * exponent. Where the grammar fails, *bad is set and the result is where. */
static ALWAYS_INLINE const unsigned char *number_end(const unsigned char *p, const unsigned char *end, int *is_int, int *bad) {
    Py_ssize_t n;
    *is_int = 1; *bad = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return p;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') p += digit_run(p, end);
    else return p;
    if (p < end && *p == '.') {
        *is_int = 0; p++;
        if (!(n = digit_run(p, end))) return p;
        p += n;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0; p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (!(n = digit_run(p, end))) return p;
        p += n;
    }
    *bad = 0;
    return p;
}

/* Validates a JSON number at the cursor; *is_int when it has no fraction or exponent. */
static int lex_number(Cur *c, const unsigned char **start, int *is_int) {
    int bad;
    *start = c->p;
    c->p = number_end(c->p, c->end, is_int, &bad);
    if (bad) DECLINE(c, "bad number");
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

/* The common id at p: an integer of at most 18 digits (so within int64), no leading zero,
 * followed by a byte that cannot continue a number. The end of its text, or NULL for the
 * validating path (lex_number + int_value), which decides the rest (longer integers, floats,
 * bad grammar). */
static inline const unsigned char *int_at(const unsigned char *p, const unsigned char *end, int64_t *out) {
    int neg = (p < end && *p == '-');
    p += neg;
    Py_ssize_t nd;
    uint64_t v = digits_at(p, end, &nd);
    if (nd == 0 || nd > 18 || (nd > 1 && *p == '0') || p + nd >= end) return NULL;
    unsigned char next = p[nd];
    if (next == '.' || next == 'e' || next == 'E') return NULL;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return p + nd;
}

/* int_at at the cursor: 1 when read (cursor after it), 0 leaves the cursor. */
static inline int quick_int(Cur *c, int64_t *out) {
    const unsigned char *q = int_at(c->p, c->end, out);
    if (!q) return 0;
    c->p = q;
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

/* The common ts / dur at p: digits, an optional fraction, no exponent, the digits forming
 * an integer m <= 2^53 (so at most 16 significant digits, as 10^16 > 2^53): fast_float's case
 * and value, read while it is lexed (the grammar checked as lex_number checks it). The end
 * of its text, or NULL for the validating path (which gives the same value where this path
 * declines a case, such as a text of more than 19 digits with leading zeros). */
static inline const unsigned char *float_at(const unsigned char *p, const unsigned char *end, double *out) {
    int neg = (p < end && *p == '-');
    p += neg;
    Py_ssize_t n_int, n_frac = 0;
    uint64_t m = digits_at(p, end, &n_int), frac = 0;
    if (n_int == 0 || (n_int > 1 && *p == '0')) return NULL;
    const unsigned char *dot = p + n_int;
    int fraction = (dot < end && *dot == '.');
    if (fraction) {
        frac = digits_at(dot + 1, end, &n_frac);
        if (!n_frac) return NULL;
    }
    const unsigned char *after = dot + fraction + n_frac;
    if (after >= end || *after == 'e' || *after == 'E' || n_int + n_frac > 19) return NULL;
    m = m * POW10_INT[n_frac] + frac;
    if (m > (1ULL << 53)) return NULL;
    double v = n_frac ? (double)m / POW10[n_frac] : (double)m;
    /* "-0" is the integer 0, read as msgspec reads an integer in a float field: +0.0 */
    *out = neg && (m || fraction) ? -v : v;
    return after;
}

/* float_at at the cursor: 1 when read (cursor after it), 0 leaves the cursor. */
static inline int quick_float(Cur *c, double *out) {
    const unsigned char *q = float_at(c->p, c->end, out);
    if (!q) return 0;
    c->p = q;
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

/* Fills the string loop's byte classes; called once at module init. */
static void json_scan_init(void) {
    for (int i = 0; i < 256; i++) STR_SPECIAL[i] = (i == '"' || i == '\\' || i < 0x20 || i >= 0x80);
}

#endif
