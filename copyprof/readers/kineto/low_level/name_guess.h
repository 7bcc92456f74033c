/* The native Kineto scanner's guess of a complete event's name from the name before it
 * (fast_event's shortcut for kernel names). A room of its own so that each file stays
 * readable; included by fast_event.h only.
 *
 * Why: a kernel name runs to hundreds of bytes (~350 on average in a vLLM trace), and reading
 * it cost a scan for its closing quote (look_end: ~12 % of a kernel chunk's scan) and then
 * the interner's lookup, which compares it in full anyway. A chunk has few distinct names
 * (37 in 54k kernels) that recur in the order the model launches them, so the name that
 * followed the previous event's name last time, among the names that begin with the same
 * 32 bytes, is this event's name 99.9 % of the time in that trace. fast_name checks the
 * guess by one comparison of the name's bytes and its closing quote, and takes its code
 * without a scan or a lookup.
 *
 * The result is the same as plain_end's by construction: a guess is a name fast_event read
 * before (plain_end found it plain: printable ASCII without escapes), so bytes equal to it
 * followed by '"' are a plain string that ends there, whose code is that name's; the blocks
 * are left classified where plain_end leaves them. A wrong or missing guess reads the name
 * as before. Which guesses are made changes the speed only. */
#ifndef COPYPROF_NAME_GUESS_H
#define COPYPROF_NAME_GUESS_H

#if defined(__x86_64__)
/* Slot in Tables.next_name of the name at p (just after its opening quote; 32 bytes there),
 * given the code of the name before it. */
static ALWAYS_INLINE size_t name_slot(const unsigned char *p, int32_t last) {
    uint64_t w[4];
    memcpy(w, p, sizeof w);
    uint64_t h = (w[0] * 0x9E3779B97F4A7C15ULL) ^ (w[1] * 0xC2B2AE3D27D4EB4FULL) ^ (w[2] * 0x165667B19E3779F9ULL)
               ^ (w[3] * 0xD6E8FEB86659FD93ULL) ^ ((uint64_t)(uint32_t)last * 0xFF51AFD7ED558CCDULL);
    return (size_t)(h >> (64 - NEXT_NAME_BITS));
}

/* At a name's opening quote: as fast_string, and where the guess holds, its code in
 * e->name_code (else -1); e->name_slot is where the name read goes in Tables.next_name (-1:
 * nowhere, too close to the blocks' lim for the 32 bytes name_slot reads). */
static ALWAYS_INLINE const unsigned char *fast_name(Blocks *b, const unsigned char *p, Pending *e) {
    e->name_slot = -1;
    if (p < b->lim && *p == '"') {
        const Tables *t = e->t;
        size_t slot = name_slot(p + 1, t->last_name);
        int32_t code = t->next_name[slot] - 1;
        e->name_slot = (Py_ssize_t)slot;
        if (code >= 0) {
            const Slot *s = &t->names.order[code];
            const unsigned char *q = p + 1 + s->len;
            if (q < b->lim && *q == '"' && memcmp(p + 1, s->s, (size_t)s->len) == 0) {
                if ((size_t)(q - b->blk) >= 64) block_at(b, q);  /* where plain_end would leave the blocks */
                e->name = p + 1; e->name_n = s->len; e->name_code = code;
                return q + 1;
            }
        }
    }
    return fast_string(b, p, &e->name, &e->name_n);
}
#endif

#endif
