/* The native Kineto scanner's one-pass reader of the common event shapes (fast_event).
 * A room of its own so that each file stays readable; included by scan.c only, after the general
 * reader (read_event and its helpers), whose row defaults, field codes and rules it shares.
 */
#ifndef COPYPROF_FAST_EVENT_H
#define COPYPROF_FAST_EVENT_H

/* ---------- the common event, in one pass ---------- */

/* Why: read_event takes any event, one token per call of the lexer, with the cursor going
 * through memory between calls; on Kineto's common events (a kernel has 20 members and 18
 * numbers) that per-token cost was most of the scan. fast_event reads the common shapes in
 * one inlined pass over the chunk's blocks (byte_scan.h: the classes of 64 bytes at a time,
 * held in registers), recognising Kineto's ": " and ", " by their bytes, and its own keys and
 * wider separators by theirs too (known_keys.h), and leaves anything else to read_event,
 * which reads the event again from its '{'.
 *
 * The rows are the same by construction: fast_event takes only what read_event reads into
 * the same row, side-table entries and odd counts: keys and strings plain (printable ASCII,
 * no escapes); ids that int_at reads and times that float_at reads (so no side entry and no
 * odd count); args of such ids, [x, y, z] dims, a plain kind and record_shapes' raw "Input
 * Dims" / "Input type" texts (their side entries, in read_args' order); values the reader
 * does not use that are numbers, plain strings, or arrays and objects of them; "ph" before
 * the fields whose meaning it decides. It changes the tables (interned category and name,
 * side entries) only once the whole event is read. A change to what read_event accepts, or
 * to how it fills a row, must be made here too (tests/readers/test_kineto_native_modes.py runs
 * both readers on the same inputs).
 *
 * Bounds: it tests its position against the blocks' lim after every key and value, and in
 * between moves by a few bytes and reads a few bytes on: all inside the chunk, as lim is
 * BLOCK_SLACK bytes before its end. The chunk's last event or so is left to read_event. */
enum { FAST_LEFT = 1 };  /* fast_event's answer for an event it leaves to read_event */

static int fast_on = 1;          /* off: read_event reads every event (for tests) */
static Py_ssize_t fast_read = 0;  /* events fast_event read in the last scan (for tests) */

#if defined(__x86_64__)
#include "known_keys.h"

/* Four bytes as one word in memory order, to test a few bytes with one load and compare. */
typedef union { unsigned char b[4]; uint32_t w; } Word;
static const Word COLON_SPACE = {{':', ' ', 0, 0}}, COMMA_SPACE_QUOTE = {{',', ' ', '"', 0}},
                  FIRST2 = {{0xFF, 0xFF, 0, 0}}, FIRST3 = {{0xFF, 0xFF, 0xFF, 0}};

/* Whether the bytes at p start with those of `lit` (the bytes that `first` keeps). */
static ALWAYS_INLINE int bytes_are(const unsigned char *p, const Word *lit, const Word *first) {
    uint32_t have;
    memcpy(&have, p, 4);
    return (have & first->w) == lit->w;
}

/* After a key's closing quote: the start of its value, past ':' and whitespace (Kineto
 * writes ": "); NULL without the ':'. */
static ALWAYS_INLINE const unsigned char *fast_colon(Blocks *b, const unsigned char *p) {
    if (bytes_are(p, &COLON_SPACE, &FIRST2) && p[2] > ' ') return p + 2;
    if (*p != ':' && (!(p = solid_at(b, p)) || *p != ':')) return NULL;
    return solid_at(b, p + 1);
}

/* At a key's opening quote: its text (*k, *kn) and the start of its value; NULL unless the
 * key is plain. */
static ALWAYS_INLINE const unsigned char *fast_key(Blocks *b, const unsigned char *p,
                                                   const unsigned char **k, Py_ssize_t *kn) {
    const unsigned char *q = plain_end(b, p + 1);
    if (!q) return NULL;
    *k = p + 1; *kn = q - (p + 1);
    return fast_colon(b, q + 1);
}

/* After a member's value: the next key's opening quote (*more = 1; Kineto writes ", ") or
 * just past the object's '}' (*more = 0); NULL for anything else. */
static ALWAYS_INLINE const unsigned char *fast_next(Blocks *b, const unsigned char *p, int *more) {
    if (p >= b->lim) return NULL;
    *more = 1;
    if (bytes_are(p, &COMMA_SPACE_QUOTE, &FIRST3)) return p + 2;
    const unsigned char *q = sep_at(p);
    if (q) return q;
    if (!(p = solid_at(b, p))) return NULL;
    if (*p == '}') { *more = 0; return p + 1; }
    if (*p != ',' || !(p = solid_at(b, p + 1)) || *p != '"') return NULL;
    return p;
}

/* At a plain string's opening quote: its text (*s, *n) and the end; NULL for anything else. */
static ALWAYS_INLINE const unsigned char *fast_string(Blocks *b, const unsigned char *p,
                                                      const unsigned char **s, Py_ssize_t *n) {
    const unsigned char *q;
    if (*p != '"' || !(q = plain_end(b, p + 1))) return NULL;
    *s = p + 1; *n = q - (p + 1);
    return q + 1;
}

/* Past a number or a plain string the reader does not use; NULL for anything else. */
static ALWAYS_INLINE const unsigned char *fast_scalar(Blocks *b, const unsigned char *p) {
    const unsigned char *s; Py_ssize_t n; int is_int, bad;
    if (*p == '"') return fast_string(b, p, &s, &n);
    p = number_end(p, b->lim, &is_int, &bad);
    return bad ? NULL : p;
}

/* Where fast_skip_nested stops, and the blocks as it leaves them. */
typedef struct {
    const unsigned char *p;
    Blocks b;
} Skipped;

/* fast_skip of an array or object: numbers and plain strings in arrays and objects nested up
 * to FAST_DEPTH deep (record_shapes' "Input Strides": [[2048, 1], []], say). One loop over
 * the tokens with the open containers as bits (1: object); out of line, as these values are
 * rare in most events, with the blocks passed by value so that fast_event's stay in its
 * registers. */
#define FAST_DEPTH 16

static __attribute__((noinline)) Skipped fast_skip_nested(Blocks blocks, const unsigned char *p) {
    Blocks *b = &blocks;
    const unsigned char *k; Py_ssize_t kn;
    uint32_t objects = 0;
    int depth = 0;
    Skipped out = {NULL, blocks};
    for (;;) {
        /* at a value */
        if (*p == '[' || *p == '{') {
            int object = *p == '{';
            if (depth == FAST_DEPTH || !(p = solid_at(b, p + 1))) return out;
            if (*p == (object ? '}' : ']')) {
                p++;
            } else {
                objects = objects << 1 | (uint32_t)object;
                depth++;
                if (object && (*p != '"' || !(p = fast_key(b, p, &k, &kn)))) return out;
                continue;
            }
        } else if (!(p = fast_scalar(b, p))) {
            return out;
        }
        /* after a value: the next one in its container, or past the containers it closes */
        for (;;) {
            if (!depth) {
                out.p = p;
                out.b = blocks;
                return out;
            }
            int object = objects & 1;
            if (p >= b->lim || !(p = solid_at(b, p))) return out;
            if (*p == ',') break;
            if (*p != (object ? '}' : ']')) return out;
            p++;
            objects >>= 1;
            depth--;
        }
        if (!(p = solid_at(b, p + 1)) || ((objects & 1) && (*p != '"' || !(p = fast_key(b, p, &k, &kn)))))
            return out;
    }
}

/* Past a value the reader does not use: a number, a plain string, or arrays and objects of
 * those (read_event's skip_value accepts all of them); NULL for anything else. */
static ALWAYS_INLINE const unsigned char *fast_skip(Blocks *b, const unsigned char *p) {
    if (*p != '[' && *p != '{') return fast_scalar(b, p);
    Skipped s = fast_skip_nested(*b, p);
    if (s.p) *b = s.b;
    return s.p;
}

/* [x, y, z], three ids that int_at reads, into dims; NULL for any other value (read_dims
 * reads those). */
static ALWAYS_INLINE const unsigned char *fast_dims(Blocks *b, const unsigned char *p, int64_t dims[3]) {
    int64_t v[3];
    if (*p != '[') return NULL;
    for (int i = 0; i < 3; i++) {
        if (!(p = solid_at(b, p + 1)) || !(p = int_at(p, b->lim, &v[i])) || !(p = solid_at(b, p)) ||
            *p != (i < 2 ? ',' : ']'))
            return NULL;
    }
    memcpy(dims, v, sizeof v);
    return p + 1;
}

/* What fast_event writes to the tables once the whole event is read: the texts of the
 * category and name, and (Raw, apart, so that these stay in registers) the raw args "Input
 * Dims" / "Input type" of record_shapes traces, in the order read_args notes them in the
 * side table. */
typedef struct {
    const unsigned char *cat, *name;
    Py_ssize_t cat_n, name_n;
    const Tables *t;        /* for fast_name's guess */
    int32_t name_code;      /* the name's code where fast_name's guess held, else -1 */
    Py_ssize_t name_slot;   /* the name's slot in t->next_name, -1 none */
} Pending;

#include "name_guess.h"

typedef struct {
    int n;
    struct { int field; const unsigned char *start, *end; } text[2];  /* one of each: duplicates are left */
} Raw;

/* fast_skip of a record_shapes text, noted in raw; out of line, as fast_skip_nested. */
static __attribute__((noinline)) Skipped fast_raw(Blocks blocks, const unsigned char *p, Raw *raw, int field) {
    Skipped s = fast_skip_nested(blocks, p);
    if (s.p) {
        raw->text[raw->n].field = field;
        raw->text[raw->n].start = p;
        raw->text[raw->n++].end = s.p;
    }
    return s;
}

/* An X event's args object (as read_args reads it): ids, grid and block, a plain kind, the
 * raw record_shapes texts, and values it does not use; NULL for anything else (duplicates,
 * other shapes). */
static ALWAYS_INLINE const unsigned char *fast_args(Blocks *b, const unsigned char *p, Row *r, Raw *raw) {
    const unsigned char *k, *s; Py_ssize_t kn, n;
    uint32_t seen = 0;
    int more;
    if (*p != '{') return NULL;
    if (p < b->lim && args_open_at(p)) p += 14;
    else if (!(p = solid_at(b, p + 1))) return NULL;
    if (*p == '}') return p + 1;
    if (*p != '"') return NULL;
    int want = KNOWN_ARGS;  /* the known key predicted next (known_keys.h) */
    do {
        int code;
        if (p < b->lim && known_at(p, want)) {
            code = KNOWN[want].code;
            p += KNOWN[want].len;
            want = KNOWN[want].next;
        } else {
            if (!(p = fast_key(b, p, &k, &kn))) return NULL;
            code = args_key(k, kn);
            want = KNOWN[known_index(k, kn, KNOWN_ARGS, N_KNOWN)].next;
        }
        if (code >= 0) {
            if (seen & (1u << code)) return NULL;
            seen |= 1u << code;
        }
        if (code >= 0 && code < N_INTS) p = int_at(p, b->lim, &r->ints[code]);
        else if (code == K_GRID) p = fast_dims(b, p, r->grid);
        else if (code == K_BLOCK) p = fast_dims(b, p, r->block);
        else if (code == K_KIND) {
            if ((p = fast_string(b, p, &s, &n))) { r->kind_off = s - b->base; r->kind_len = n; }
        } else if (code >= 0) {
            Skipped sk = fast_raw(*b, p, raw, code == K_DIMS ? S_DIMS : S_TYPES);
            if ((p = sk.p)) *b = sk.b;
        } else p = fast_skip(b, p);
        if (!p || !(p = fast_next(b, p, &more))) return NULL;
    } while (more);
    return p;
}

/* The event at p (its '{'), into r and, for an X event, e and raw; the end of the event, or
 * NULL to leave it to read_event. */
static ALWAYS_INLINE const unsigned char *fast_members(Blocks *b, const unsigned char *p, Row *r, int *ph,
                                                       Pending *e, Raw *raw) {
    const unsigned char *k, *s; Py_ssize_t kn, n;
    uint32_t seen = 0;
    int more, early = 0;  /* early: a field came before "ph" */
    if (!(p = solid_at(b, p + 1)) || *p != '"') return NULL;  /* "{}": read_event declines it */
    int want = KNOWN_EVENT;  /* the known key predicted next (known_keys.h) */
    do {
        int f;
        if (p < b->lim && known_at(p, want)) {
            f = KNOWN[want].code;
            p += KNOWN[want].len;
            want = KNOWN[want].next;
        } else {
            if (!(p = fast_key(b, p, &k, &kn))) return NULL;
            f = event_key(k, kn);
            want = KNOWN[known_index(k, kn, KNOWN_EVENT, KNOWN_ARGS)].next;
        }
        if (f == F_PH) {
            if (*ph || !(p = fast_string(b, p, &s, &n)) || n != 1 || !IS_PHASE[s[0]]) return NULL;
            *ph = s[0];
        } else if (f >= 0 && *ph == 'X') {
            if (seen & (1u << f)) return NULL;
            seen |= 1u << f;
            switch (f) {
            case F_CAT: p = fast_string(b, p, &e->cat, &e->cat_n); break;
            case F_NAME: p = fast_name(b, p, e); break;
            case F_PID: p = int_at(p, b->lim, &r->pid); break;
            case F_TID: p = int_at(p, b->lim, &r->tid); break;
            case F_TS: p = float_at(p, b->lim, &r->ts); break;
            case F_DUR: p = float_at(p, b->lim, &r->dur); break;
            default: p = fast_args(b, p, r, raw);
            }
        } else {
            early |= (f >= 0 && !*ph);
            p = fast_skip(b, p);
        }
        if (!p || !(p = fast_next(b, p, &more))) return NULL;
    } while (more);
    /* read_event reads the fields that came before "ph" once it says X (metadata events,
     * which put "name" first, ignore them as read_event does) */
    return early && *ph == 'X' ? NULL : p;
}

/* One event object (cursor at '{'), as read_event reads it, when it has the common shapes:
 * 0 (read, cursor after it; *is_x as read_event sets it), FAST_LEFT (cursor and tables
 * unchanged), or as read_event, -1 (declined: the side table could not grow) or -2 (Python
 * error set). */
static int fast_event(Cur *c, Blocks *blocks, Row *r, Tables *t, int *is_x) {
    if (c->p >= blocks->lim) return FAST_LEFT;
    Blocks b = *blocks;  /* in registers while the event is read */
    Pending e = {.cat = NULL, .t = t, .name_code = -1, .name_slot = -1};
    Raw raw;
    int ph = 0;
    raw.n = 0;
    row_defaults(r);
    const unsigned char *p = fast_members(&b, c->p, r, &ph, &e, &raw);
    *blocks = b;
    if (!p || !ph || (ph == 'X' && !e.name)) return FAST_LEFT;
    *is_x = (ph == 'X');
    if (*is_x) {
        if ((e.cat && (r->cat = intern(&t->cats, e.cat, e.cat_n)) < 0) ||
            (r->name = e.name_code >= 0 ? e.name_code : intern(&t->names, e.name, e.name_n)) < 0) {
            PyErr_NoMemory();
            return -2;
        }
        if (e.name_slot >= 0) t->next_name[e.name_slot] = r->name + 1;
        t->last_name = r->name;
        for (int i = 0; i < raw.n; i++) {
            c->p = raw.text[i].end;
            if (note_side(c, t, raw.text[i].field, raw.text[i].start) < 0) return -1;
        }
    }
    c->p = p;
    return 0;
}
#endif

#endif
