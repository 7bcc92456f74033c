/* Byte scans for the native Kineto scanner: where a run of whitespace ends, where a string
 * needs a look, and the classes of a chunk's bytes 64 at a time (the blocks scan.c's one-pass
 * reader reads), with SSE2 / AVX2 on x86-64 (AVX2 chosen at run time) and byte loops
 * elsewhere. A room of its own so that each file stays readable; included by json_scan.h only.
 */
#ifndef COPYPROF_BYTE_SCAN_H
#define COPYPROF_BYTE_SCAN_H

#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---------- byte scans: where whitespace ends, where a string needs a look ---------- */

/* Much of the scan is finding where a run of whitespace ends and where the next byte that
 * needs a look inside a string is ('"', '\\', a control character, a byte >= 0x80): kernel
 * names run to hundreds of bytes, indentation to dozens. Both are asked of many bytes at
 * once at the best level this CPU has: SIMD_AVX2 (32 bytes per step; chosen at run time, as
 * x86-64's baseline is SSE2), SIMD_SSE2 (16), SIMD_SCALAR (a byte loop: other CPUs, and forced
 * by the module's simd() so that tests can compare the levels' results; it also leaves every
 * event to scan.c's general reader). Every load stays before `end`: the byte loop does the
 * last bytes. */
enum { SIMD_SCALAR, SIMD_SSE2, SIMD_AVX2 };
static int simd_level = SIMD_SCALAR;

/* Byte classes for the string loop: 0 plain, 1 needs a look ('"', '\\', control, >= 0x80). */
static unsigned char STR_SPECIAL[256];

static const unsigned char *look_end_bytes(const unsigned char *p, const unsigned char *end) {
    while (p < end && !STR_SPECIAL[*p]) p++;
    return p;
}

static const unsigned char *ws_end_bytes(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

#if defined(__x86_64__)
/* Which of the 16 bytes at p need a look inside a string: '"', '\\', and (signed) < 0x20,
 * which also catches >= 0x80 (bit i for byte i). */
static inline unsigned look16(const unsigned char *p) {
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                             _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)));
    return (unsigned)_mm_movemask_epi8(m);
}

/* Which of the 16 bytes at p are not whitespace. */
static inline unsigned solid16(const unsigned char *p) {
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\n'))),
                              _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\t'))));
    return ~(unsigned)_mm_movemask_epi8(ws) & 0xFFFFu;
}

static const unsigned char *look_end_sse2(const unsigned char *p, const unsigned char *end) {
    for (; end - p >= 16; p += 16) {
        unsigned bits = look16(p);
        if (bits) return p + __builtin_ctz(bits);
    }
    return look_end_bytes(p, end);
}

static const unsigned char *ws_end_sse2(const unsigned char *p, const unsigned char *end) {
    for (; end - p >= 16; p += 16) {
        unsigned bits = solid16(p);
        if (bits) return p + __builtin_ctz(bits);
    }
    return ws_end_bytes(p, end);
}

__attribute__((target("avx2")))
static const unsigned char *look_end_avx2(const unsigned char *p, const unsigned char *end) {
    const __m256i quote = _mm256_set1_epi8('"'), bs = _mm256_set1_epi8('\\'), ctl = _mm256_set1_epi8(0x20);
    for (; end - p >= 32; p += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)p);
        __m256i m = _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(x, quote), _mm256_cmpeq_epi8(x, bs)),
                                    _mm256_cmpgt_epi8(ctl, x));
        unsigned bits = (unsigned)_mm256_movemask_epi8(m);
        if (bits) return p + __builtin_ctz(bits);
    }
    return look_end_sse2(p, end);
}

__attribute__((target("avx2")))
static const unsigned char *ws_end_avx2(const unsigned char *p, const unsigned char *end) {
    /* The shuffle maps each byte to the whitespace byte with the same low four bits (' ',
     * '\t', '\n', '\r'; 0 where there is none, and for bytes >= 0x80), so a byte is
     * whitespace exactly when it equals its entry. */
    const __m256i table = _mm256_setr_epi8(' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0,
                                           ' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0);
    for (; end - p >= 32; p += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)p);
        unsigned bits = ~(unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_shuffle_epi8(table, x), x));
        if (bits) return p + __builtin_ctz(bits);
    }
    return ws_end_sse2(p, end);
}

/* The classes of 64 bytes at once (see Blocks below): bit i of ws is set when byte i is
 * whitespace, of look when it needs a look in a string. */
typedef struct { uint64_t ws, look; } Masks;

static Masks classify_sse2(const unsigned char *p) {
    Masks m = {0, 0};
    for (int i = 0; i < 64; i += 16) {
        m.ws |= (uint64_t)(~solid16(p + i) & 0xFFFFu) << i;
        m.look |= (uint64_t)look16(p + i) << i;
    }
    return m;
}

__attribute__((target("avx2")))
static Masks classify_avx2(const unsigned char *p) {
    const __m256i table = _mm256_setr_epi8(' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0,
                                           ' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0);
    const __m256i quote = _mm256_set1_epi8('"'), bs = _mm256_set1_epi8('\\'), ctl = _mm256_set1_epi8(0x20);
    Masks m = {0, 0};
    for (int i = 0; i < 64; i += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(p + i));
        __m256i look = _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(x, quote), _mm256_cmpeq_epi8(x, bs)),
                                       _mm256_cmpgt_epi8(ctl, x));
        m.ws |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_shuffle_epi8(table, x), x)) << i;
        m.look |= (uint64_t)(uint32_t)_mm256_movemask_epi8(look) << i;
    }
    return m;
}

static Masks (*classify)(const unsigned char *p) = classify_sse2;
#endif

typedef const unsigned char *(*ScanFn)(const unsigned char *p, const unsigned char *end);
/* The first byte at or after p (before end) that needs a look in a string / is not
 * whitespace, or end. */
static ScanFn look_end = look_end_bytes, ws_end = ws_end_bytes;

/* The best level this CPU has. */
static int simd_best(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? SIMD_AVX2 : SIMD_SSE2;
#else
    return SIMD_SCALAR;
#endif
}

/* Scans at `level` from now on; -1 (nothing changed) when this CPU does not have it. */
static int simd_use(int level) {
    if (level < SIMD_SCALAR || level > simd_best()) return -1;
    simd_level = level;
    look_end = look_end_bytes; ws_end = ws_end_bytes;
#if defined(__x86_64__)
    if (level == SIMD_SSE2) { look_end = look_end_sse2; ws_end = ws_end_sse2; classify = classify_sse2; }
    if (level == SIMD_AVX2) { look_end = look_end_avx2; ws_end = ws_end_avx2; classify = classify_avx2; }
#endif
    return 0;
}

/* The first byte at or after p (before end) that needs a look in a string, or end. Most
 * strings are keys and short values whose closing quote is in the next 16 bytes: that case
 * is answered here, inline, without a call. */
static inline const unsigned char *string_stop(const unsigned char *p, const unsigned char *end) {
#if defined(__x86_64__)
    if (simd_level && end - p >= 16) {
        unsigned bits = look16(p);
        if (bits) return p + __builtin_ctz(bits);
        p += 16;
    }
#endif
    return look_end(p, end);
}

/* ---------- blocks: the classes of a chunk, 64 bytes at a time ---------- */

/* scan.c's fast path reads a chunk's common events with the classes of its bytes in aligned
 * blocks of 64 (Masks), each block classified once, and finds where whitespace or a string
 * ends with a shift and a count of trailing zeros on the masks it holds in registers. The
 * blocks' addresses do not depend on the tokens, so the CPU classifies ahead while it reads
 * (finding every token by a fresh vector load and count instead made each token wait for
 * the one before, and was slower for fewer instructions). Blocks end at lim, at least
 * BLOCK_SLACK bytes before the chunk's end, so that a reader at a position below lim may
 * look at the few bytes after it without a test of the end. */
#if defined(__x86_64__)
#define BLOCK_SLACK 32

typedef struct {
    const unsigned char *base, *lim;  /* blocks are at base + 64 k, below lim */
    const unsigned char *blk;         /* the block whose classes the masks hold */
    uint64_t ws, look;
} Blocks;

/* Classifies the block that holds p; 0 when p is at or past lim. */
static ALWAYS_INLINE int block_at(Blocks *b, const unsigned char *p) {
    if (p >= b->lim) return 0;
    b->blk = b->base + ((p - b->base) & ~(Py_ssize_t)63);
    Masks m = classify(b->blk);
    b->ws = m.ws; b->look = m.look;
    return 1;
}

/* For a chunk of len bytes at base: 0 when it is too short for the fast path. */
static int blocks_init(Blocks *b, const unsigned char *base, Py_ssize_t len) {
    b->base = base;
    b->lim = base + (len > BLOCK_SLACK ? (len - BLOCK_SLACK) & ~(Py_ssize_t)63 : 0);
    return block_at(b, base);
}

/* The first byte at or after p that is not whitespace; NULL at lim. */
static ALWAYS_INLINE const unsigned char *solid_at(Blocks *b, const unsigned char *p) {
    if (*p > ' ') return p;
    if (*p == ' ' && p[1] > ' ') return p + 1;
    for (;;) {
        size_t off = (size_t)(p - b->blk);
        if (off < 64) {
            uint64_t m = ~b->ws >> off;
            if (m) return p + __builtin_ctzll(m);
            p = b->blk + 64;
        }
        if (!block_at(b, p)) return NULL;
    }
}

/* With p just after a string's opening quote: its closing quote when the string is plain
 * (printable ASCII, no escapes: valid, and the same bytes as its value); NULL for any
 * other string, or at lim. Past the block, a long string (a kernel name) is scanned by
 * look_end, without the whitespace class, and the block where it ends classified. */
static ALWAYS_INLINE const unsigned char *plain_end(Blocks *b, const unsigned char *p) {
    size_t off = (size_t)(p - b->blk);
    uint64_t m;
    if (off < 64 && (m = b->look >> off)) {
        p += __builtin_ctzll(m);
    } else {
        p = look_end(off < 64 ? b->blk + 64 : p, b->lim);
        if (!block_at(b, p)) return NULL;
    }
    return *p == '"' ? p : NULL;
}

#endif

#endif
