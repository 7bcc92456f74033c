/* Interning of short byte strings (event names, categories) for the native Kineto scanner:
 * each distinct string gets a code in order of first appearance, and the chunk's names come
 * back as one list. A room of its own so that each file stays readable; included by json_scan.h only.
 */
#ifndef COPYPROF_INTERNER_H
#define COPYPROF_INTERNER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---------- interning of short byte strings (names, categories) ---------- */

typedef struct {
    const unsigned char *s;
    Py_ssize_t len;
    uint64_t hash;
    int32_t code;
} Slot;

/* A string looked up lately (see intern). */
typedef struct {
    const unsigned char *s;
    Py_ssize_t len;
    int32_t code;
} Recent;

#define RECENT_BITS 8
#define N_RECENT (1 << RECENT_BITS)

typedef struct {
    Slot *slots;
    Py_ssize_t cap;  /* power of two */
    Py_ssize_t n;
    Slot *order;     /* by code */
    Py_ssize_t order_cap;
    Recent recent[N_RECENT];
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
    memset(t->recent, 0, sizeof t->recent);
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

/* Slot in Interner.recent of a string, from its length and first and last eight bytes
 * (three bytes of a shorter one), which tell most names of a trace apart. */
static inline size_t recent_slot(const unsigned char *s, Py_ssize_t len) {
    uint64_t head = 0, tail = 0;
    if (len >= 8) {
        memcpy(&head, s, 8);
        memcpy(&tail, s + len - 8, 8);
    } else if (len) {
        head = s[0] | (uint64_t)s[len / 2] << 8;
        tail = s[len - 1];
    }
    uint64_t h = (head * 0x9E3779B97F4A7C15ULL) ^ (tail * 0xC2B2AE3D27D4EB4FULL) ^ (uint64_t)len;
    return (size_t)((h * 0xFF51AFD7ED558CCDULL) >> (64 - RECENT_BITS));
}

/* Code of the string, adding it when new; -1 on memory error. A kernel name of hundreds of
 * bytes recurs thousands of times in a chunk: it is first looked up among the strings seen
 * lately, where a hit costs one comparison instead of hashing the whole name; a hit gives
 * the code the table holds, so codes are the same either way. */
static int32_t intern(Interner *t, const unsigned char *s, Py_ssize_t len) {
    Recent *r = &t->recent[recent_slot(s, len)];
    if (r->s && r->len == len && memcmp(r->s, s, (size_t)len) == 0) return r->code;
    uint64_t h = hash_bytes(s, len);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->slots[j].s) {
        Slot *sl = &t->slots[j];
        if (sl->hash == h && sl->len == len && memcmp(sl->s, s, (size_t)len) == 0) {
            r->s = s; r->len = len; r->code = sl->code;
            return sl->code;
        }
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
    r->s = s; r->len = len; r->code = sl.code;
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

#endif
