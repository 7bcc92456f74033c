/* Kineto's own args keys and separators, recognised by their bytes (fast_args's shortcut).
 * A room of its own so that each file stays readable; included by fast_event.h only, after
 * scan.c's args_key, whose codes it takes.
 *
 * Why: a kernel event's args has twelve members, seven of which the reader does not use
 * ("queued", "registers per thread", ...), with six spaces of padding before half of them.
 * Read one at a time, each member cost a find of its key's end, a check of ": ", a dispatch on
 * the key's length and a walk over its separator: ~150 ns of a ~390 ns kernel event. Kineto
 * writes these keys in one order, so fast_args predicts the next key (the one Kineto writes
 * after the last one recognised) and checks the text '"key": ' at the cursor with one 32-byte
 * compare: when it is there, the key is plain, known, and its value starts right after it.
 *
 * The result is the same as the member-by-member path by construction: a match means these
 * bytes exactly, whose key args_key itself coded at init; anything else (another key, other
 * whitespace, an escape) goes to that path, as before. Only what is skipped changes, never
 * what is read or declined. */
#ifndef COPYPROF_KNOWN_KEYS_H
#define COPYPROF_KNOWN_KEYS_H

#if defined(__x86_64__)
/* The keys, in the order Kineto writes them: an event's members, then its args (a kernel's,
 * then a memcpy's extra ones, then cpu_op's and cuda_runtime's). Each predicts the one after it
 * in its group, the last one the first. */
static const char *const KNOWN_TEXT[] = {
    "ph", "cat", "name", "pid", "tid", "ts", "dur", "args",
    "queued", "device", "context", "stream", "correlation", "registers per thread", "shared memory",
    "blocks per SM", "warps per SM", "grid", "block", "est. achieved occupancy %",
    "bytes", "memory bandwidth (GB/s)", "External id", "Record function id", "Ev Idx", "cbid",
};
/* The groups: [KNOWN_EVENT, KNOWN_ARGS) event keys (event_key's codes), [KNOWN_ARGS, N_KNOWN)
 * args keys (args_key's codes). */
enum { KNOWN_EVENT = 0, KNOWN_ARGS = 8, N_KNOWN = sizeof KNOWN_TEXT / sizeof *KNOWN_TEXT, KNOWN_NONE = N_KNOWN };

/* A key's text as it stands before its value: '"', the key, '"', ':', ' '. */
typedef struct {
    __m128i lit[2];  /* the text, zero after it */
    uint32_t need;   /* bit i: byte i belongs to the text */
    int len;         /* its length (at most 32) */
    int code;        /* event_key's / args_key's code of the key, -1 for a key the reader does not use */
    int next;        /* the key Kineto writes after it (KNOWN_NONE: none predicted) */
} Known;

static Known KNOWN[N_KNOWN + 1];  /* KNOWN[KNOWN_NONE] matches nothing (need: all 32 bytes, text zeros) */

/* Fills KNOWN from KNOWN_TEXT; called once at module init. */
static void known_init(void) {
    for (int i = 0; i <= N_KNOWN; i++) {
        unsigned char text[32] = {0};
        size_t n = 32;
        if (i < N_KNOWN) {
            size_t kn = strlen(KNOWN_TEXT[i]);
            text[0] = '"';
            memcpy(text + 1, KNOWN_TEXT[i], kn);
            memcpy(text + 1 + kn, "\": ", 3);
            n = kn + 4;
            const unsigned char *key = (const unsigned char *)KNOWN_TEXT[i];
            KNOWN[i].code = i < KNOWN_ARGS ? event_key(key, (Py_ssize_t)kn) : args_key(key, (Py_ssize_t)kn);
        }
        memcpy(KNOWN[i].lit, text, 32);
        KNOWN[i].len = (int)n;
        KNOWN[i].need = n >= 32 ? 0xFFFFFFFFu : (1u << n) - 1;
        KNOWN[i].next = i + 1 == KNOWN_ARGS ? KNOWN_EVENT : i + 1 == N_KNOWN ? KNOWN_ARGS : i + 1;
    }
    KNOWN[KNOWN_NONE].next = KNOWN_NONE;
    KNOWN[KNOWN_NONE].code = -1;  /* never matched (a member starts at its key's quote), and no code if it were */
}

/* Whether the 32 bytes at p begin with key i's text (p below the blocks' lim, so that 32
 * bytes are there). SSE2, x86-64's baseline: the same at every level that reads in one pass. */
static ALWAYS_INLINE int known_at(const unsigned char *p, int i) {
    const Known *k = &KNOWN[i];
    uint32_t lo = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), k->lit[0]));
    uint32_t hi = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + 16)), k->lit[1]));
    return ((lo | hi << 16) & k->need) == k->need;
}

/* The index in [from, to) of a key read the long way (to predict the one after it);
 * KNOWN_NONE for others. */
static int known_index(const unsigned char *k, Py_ssize_t kn, int from, int to) {
    for (int i = from; i < to; i++)
        if (KNOWN[i].len == kn + 4 && memcmp(KNOWN_TEXT[i], k, (size_t)kn) == 0) return i;
    return KNOWN_NONE;
}

/* Kineto's other separators between members, ',' then whitespace up to the key's quote:
 * in args, six spaces; between an event's lines, a newline and four spaces. */
static const unsigned char WIDE_SEP[8] = {',', ' ', ' ', ' ', ' ', ' ', ' ', '"'},
                           LINE_SEP[8] = {',', '\n', ' ', ' ', ' ', ' ', '"', 0};

/* Where the key's quote is after the separator at p, if it is one of these; NULL for
 * others (p below the blocks' lim, so that 8 bytes are there). */
static ALWAYS_INLINE const unsigned char *sep_at(const unsigned char *p) {
    uint64_t have, wide, line;
    memcpy(&have, p, 8);
    memcpy(&wide, WIDE_SEP, 8);
    memcpy(&line, LINE_SEP, 8);
    if (have == wide) return p + 7;
    if ((have & 0x00FFFFFFFFFFFFFFULL) == line) return p + 6;
    return NULL;
}

/* Kineto's opening of an args object: '{', a newline, twelve spaces, the first key's quote. */
static const unsigned char ARGS_OPEN[16] = "{\n            \"";

/* Whether the 15 bytes at p are ARGS_OPEN's (p below the blocks' lim, so that 16 are there). */
static ALWAYS_INLINE int args_open_at(const unsigned char *p) {
    __m128i x = _mm_loadu_si128((const __m128i *)p), want = _mm_loadu_si128((const __m128i *)ARGS_OPEN);
    return ((uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(x, want)) & 0x7FFFu) == 0x7FFFu;
}
#endif

#endif
