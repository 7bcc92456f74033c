/* The kept rows' table columns of a scanned chunk, in C: the twin of kineto/chunk.py's
 * kept_rows, _kept_names, assemble and _narrow for the common chunk. Included by scan.c only.
 *
 * Why: after the scan, the numpy assembly of a chunk (select the kept 192-byte rows, copy
 * each strided field out, derive device/stream/times/ids, renumber the names, narrow every
 * column) made ~320 numpy calls per 4 MB piece: ~0.2 s of CPU per GB, ~45 % of the scan's
 * own time. kept_columns makes the same columns in one pass over the rows, into a block of
 * int64 columns (144 bytes a row, less than the row itself, freed on return), and one pass
 * over each column to narrow it: ~0.03 s per GB.
 *
 * Contract: the result is exactly what chunk.py's rules give, value and dtype, or None, and
 * the caller (native.py) then assembles the chunk with those rules in numpy. It answers None
 * for what needs the Python path's tolerant conversions or the per-rank counts: a side-table
 * entry (an id or time in another shape than a plain number) on a kept row, an args.rank
 * anywhere. native.py also declines chunks whose string pids name a rank. Its rules, each
 * the twin of one in chunk.py (a change there must be made here too;
 * tests/readers/test_kineto_native.py compares both on every input it has,
 * test_kineto_native_kept.py at the rules' edges):
 *   kept_rows: a row counts in its kind when its category is known (other: not); it is kept
 *     unless it is a cpu_op whose name is not a host copy op;
 *   _kept_names: names renumbered in first-seen order over the kept rows;
 *   assemble: rows whose ts * 1000 no int64 holds are bad and dropped after the names and
 *     the graph launches are counted; dur that no int64 holds or is negative is 0; the
 *     device and stream fallbacks; external id and bytes fallbacks; times in ns with rint;
 *   _narrow: each compact column in the narrowest signed type holding its values. */
#ifndef COPYPROF_KEPT_H
#define COPYPROF_KEPT_H

/* Kind codes of events.KINDS that the rules name (chunk.py: MEMCPY, _RUNTIME, CPU_OP). */
enum { KIND_MEMCPY = 1, KIND_RUNTIME = 3, KIND_CPU_OP = 5, N_KINDS = 7 };

/* The columns, in assemble's order (native.py's FINISHED names them). */
enum { C_KIND, C_ON_GPU, C_DEVICE, C_STREAM, C_START, C_DUR, C_CORRELATION, C_EXTERNAL_ID, C_BYTES,
       C_GRID, C_BLOCK = C_GRID + 3, C_GRAPH_ID = C_BLOCK + 3, C_GRAPH_NODE_ID, C_RANK_KEY, N_COLS };
/* Their item size before narrowing (kind_idx int8, on_gpu bool, start_ns int64 never narrow;
 * device, grid and block are int32, as assemble casts them), and which ones narrow. */
static const int COL_SIZE[N_COLS] = {1, 1, 4, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 8, 8, 8};
static const unsigned char NARROWS[N_COLS] = {0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/* chunk.fits_int64(f, 1000.0): finite and |f| < 2**63 / 1000, the limit divided as there. */
static inline int fits_ns(double f) { return isfinite(f) && fabs(f) < 9223372036854775808.0 / 1000.0; }

/* A kept row's value in every column, into column k of the int64 block v (assemble's
 * derivations; the int32 casts wrap as numpy's do). */
static ALWAYS_INLINE void derive(const Row *r, int kind, int gpu, int64_t *v, Py_ssize_t stride, Py_ssize_t k) {
    const int64_t *a = r->ints;
    int64_t dev = a[A_DEVICE] >= 0 ? a[A_DEVICE] : a[A_FROM_DEVICE];
    dev = dev >= 0 ? dev : r->pid;
    double dur = fits_ns(r->dur) && !(r->dur < 0) ? r->dur : 0.0;
    v += k;
    v[C_KIND * stride] = kind;
    v[C_ON_GPU * stride] = gpu;
    v[C_DEVICE * stride] = gpu ? (int32_t)dev : -1;
    v[C_STREAM * stride] = gpu && a[A_STREAM] >= 0 ? a[A_STREAM] : r->tid;
    v[C_START * stride] = (int64_t)rint(r->ts * 1000.0);
    v[C_DUR * stride] = (int64_t)rint(dur * 1000.0);
    v[C_CORRELATION * stride] = a[A_CORRELATION];
    v[C_EXTERNAL_ID * stride] = a[A_EXTERNAL_ID] != -1 ? a[A_EXTERNAL_ID] : a[A_EXTERNAL_ID_LEGACY];
    v[C_BYTES * stride] = a[A_BYTES] != -1 ? a[A_BYTES] : a[A_SIZE];
    for (int i = 0; i < 3; i++) {
        v[(C_GRID + i) * stride] = (int32_t)r->grid[i];
        v[(C_BLOCK + i) * stride] = (int32_t)r->block[i];
    }
    v[C_GRAPH_ID * stride] = a[A_GRAPH_ID];
    v[C_GRAPH_NODE_ID * stride] = a[A_GRAPH_NODE_ID];
    v[C_RANK_KEY * stride] = -1;  /* no args.rank and no rank-naming pid: kept_columns declines those */
}

/* events.narrowest_int of n values: from the OR of v ^ (v >> 63) (v for v >= 0, -v - 1
 * below), as a signed type of b bits holds them all exactly when that OR is below
 * 2**(b - 1): one OR per value instead of a min and a max. */
static int narrowest(const int64_t *v, Py_ssize_t n) {
    uint64_t m = 0;
    for (Py_ssize_t k = 0; k < n; k++) m |= (uint64_t)(v[k] ^ (v[k] >> 63));
    return m < (1u << 7) ? 1 : m < (1u << 15) ? 2 : m < (1ull << 31) ? 4 : 8;
}

/* A column of n int64 values as a bytearray of items of `size` bytes. */
static PyObject *column(const int64_t *v, Py_ssize_t n, int size) {
    PyObject *b = PyByteArray_FromStringAndSize(NULL, n * size);
    if (!b) return NULL;
    char *out = PyByteArray_AS_STRING(b);
    switch (size) {
    case 1: for (Py_ssize_t k = 0; k < n; k++) ((int8_t *)out)[k] = (int8_t)v[k]; break;
    case 2: for (Py_ssize_t k = 0; k < n; k++) ((int16_t *)out)[k] = (int16_t)v[k]; break;
    case 4: for (Py_ssize_t k = 0; k < n; k++) ((int32_t *)out)[k] = (int32_t)v[k]; break;
    default: memcpy(out, v, (size_t)n * 8);
    }
    return b;
}

/* The chunk's tables, as kept_columns' arguments give them. */
typedef struct {
    const Row *rows;
    Py_ssize_t n;
    const unsigned char *cat_kind, *cat_gpu, *host;  /* per category: kind + 1 (0 unknown), on_gpu;
                                                        per name: a host copy op */
    Py_ssize_t n_cats, n_names;
} Chunk;

/* A row's kind (-1 not counted) and whether it is kept; -2 for a code out of range. */
static inline int row_kind(const Chunk *ch, const Row *r, int *kept) {
    if (r->cat >= ch->n_cats || r->name < 0 || r->name >= ch->n_names) return -2;
    int kind = r->cat < 0 ? -1 : (int)ch->cat_kind[r->cat] - 1;
    *kept = kind >= 0 && (kind != KIND_CPU_OP || ch->host[r->name]);
    return kind;
}

/* What the pass over the rows makes: counts, names in first-seen order, the good kept rows'
 * values (v: N_COLS columns of n int64, column-major) and name codes. */
typedef struct {
    int64_t counts[N_KINDS], other, bad;
    int32_t *remap;     /* per name: its code among the kept names, -1 not seen */
    int32_t *order;     /* per kept name: its index in the chunk's names */
    int64_t *runtime;   /* per kept name: kept runtime rows (bad ones too, as assemble counts) */
    Py_ssize_t *good;   /* per good kept row: its index among the rows */
    int64_t *v;
    int32_t *codes;
    Py_ssize_t n_kept_names, n_good, n_memcpy;
} Pass;

/* The pass over the rows: 0, 1 (decline: an args.rank) or -1 (error set). */
static int read_rows(const Chunk *ch, Pass *p) {
    for (Py_ssize_t i = 0; i < ch->n; i++) {
        const Row *r = &ch->rows[i];
        int kept, kind = row_kind(ch, r, &kept);
        if (kind == -2) { PyErr_SetString(PyExc_ValueError, "a code beyond the chunk's tables"); return -1; }
        if (r->ints[A_RANK] >= 0) return 1;
        if (kind < 0) { p->other++; continue; }
        p->counts[kind]++;
        if (!kept) continue;
        int32_t code = p->remap[r->name];
        if (code < 0) {
            code = p->remap[r->name] = (int32_t)p->n_kept_names;
            p->order[p->n_kept_names] = r->name;
            p->runtime[p->n_kept_names++] = 0;
        }
        if (kind == KIND_RUNTIME) p->runtime[code]++;
        if (!fits_ns(r->ts)) { p->bad++; continue; }
        derive(r, kind, ch->cat_gpu[r->cat], p->v, ch->n, p->n_good);
        p->codes[p->n_good] = code;
        p->n_memcpy += kind == KIND_MEMCPY;
        p->good[p->n_good++] = i;
    }
    return 0;
}

/* Whether a side-table entry other than record_shapes' texts is on a kept row, or is an
 * args.rank: then the chunk needs the Python path's conversions (native.py). */
static int side_needs_python(const Chunk *ch, const Side *side, Py_ssize_t n_side) {
    for (Py_ssize_t j = 0; j < n_side; j++) {
        if (side[j].field == S_DIMS || side[j].field == S_TYPES) continue;
        if (side[j].field == A_RANK || side[j].row < 0 || side[j].row >= ch->n) return 1;
        int kept;
        if (row_kind(ch, &ch->rows[side[j].row], &kept) == -2 || kept) return 1;
    }
    return 0;
}

/* The columns (bytearrays of the good rows, narrowed) with their item sizes, the name codes,
 * the memcpy rows and their args.kind texts. NULL with an error set. */
static PyObject *columns(const Chunk *ch, const Pass *p, const unsigned char *data, Py_ssize_t data_len) {
    PyObject *cols = PyTuple_New(N_COLS), *sizes = PyTuple_New(N_COLS);
    PyObject *codes = PyByteArray_FromStringAndSize((const char *)p->codes, p->n_good * 4);
    PyObject *memcpy_rows = PyByteArray_FromStringAndSize(NULL, p->n_memcpy * 8);
    PyObject *kinds = PyList_New(p->n_memcpy);
    if (!cols || !sizes || !codes || !memcpy_rows || !kinds) goto fail;
    for (int c = 0; c < N_COLS; c++) {
        const int64_t *v = p->v + c * ch->n;
        int size = NARROWS[c] && p->n_good ? narrowest(v, p->n_good) : COL_SIZE[c];
        PyObject *b = column(v, p->n_good, size), *s = PyLong_FromLong(size);
        if (!b || !s) { Py_XDECREF(b); Py_XDECREF(s); goto fail; }
        PyTuple_SET_ITEM(cols, c, b);
        PyTuple_SET_ITEM(sizes, c, s);
    }
    int64_t *memcpy_at = (int64_t *)PyByteArray_AS_STRING(memcpy_rows);
    const int64_t *kind = p->v + C_KIND * ch->n;
    for (Py_ssize_t k = 0, m = 0; m < p->n_memcpy; k++) {
        if (kind[k] != KIND_MEMCPY) continue;
        const Row *r = &ch->rows[p->good[k]];
        PyObject *text = r->kind_off >= 0 && r->kind_off + r->kind_len <= data_len
            ? PyUnicode_DecodeUTF8((const char *)data + r->kind_off, r->kind_len, "strict")
            : PyUnicode_FromStringAndSize("", 0);
        if (!text) goto fail;
        memcpy_at[m] = k;
        PyList_SET_ITEM(kinds, m++, text);
    }
    return Py_BuildValue("(NNNNN)", cols, sizes, codes, memcpy_rows, kinds);
fail:
    Py_XDECREF(cols); Py_XDECREF(sizes); Py_XDECREF(codes); Py_XDECREF(memcpy_rows); Py_XDECREF(kinds);
    return NULL;
}

/* The kept names, and (name, kept runtime rows) of those with any. NULL with an error set. */
static PyObject *kept_names(const Pass *p, PyObject *names) {
    PyObject *kept = PyList_New(p->n_kept_names), *runtime = PyList_New(0);
    if (!kept || !runtime) goto fail;
    for (Py_ssize_t k = 0; k < p->n_kept_names; k++) {
        PyObject *name = PyList_GET_ITEM(names, p->order[k]);
        Py_INCREF(name);
        PyList_SET_ITEM(kept, k, name);
        if (!p->runtime[k]) continue;
        PyObject *pair = Py_BuildValue("(OL)", name, (long long)p->runtime[k]);
        if (!pair || PyList_Append(runtime, pair) < 0) { Py_XDECREF(pair); goto fail; }
        Py_DECREF(pair);
    }
    return Py_BuildValue("(NN)", kept, runtime);
fail:
    Py_XDECREF(kept); Py_XDECREF(runtime);
    return NULL;
}

/* kept_columns(data, rows, side, cat_kind, cat_gpu, host, names): see the module's METHODS. */
static PyObject *kept_columns(PyObject *self, PyObject *args) {
    Py_buffer data, rows, side, cat_kind, cat_gpu, host;
    PyObject *names, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*O!", &data, &rows, &side, &cat_kind, &cat_gpu, &host,
                          &PyList_Type, &names))
        return NULL;
    Chunk ch = {rows.buf, rows.len / (Py_ssize_t)sizeof(Row), cat_kind.buf, cat_gpu.buf, host.buf,
                cat_kind.len, PyList_GET_SIZE(names)};
    Pass p;
    memset(&p, 0, sizeof p);
    if (rows.len % (Py_ssize_t)sizeof(Row) || side.len % (Py_ssize_t)sizeof(Side) || cat_gpu.len != cat_kind.len
        || host.len != ch.n_names) {
        PyErr_SetString(PyExc_ValueError, "kept_columns: tables of the wrong sizes");
        goto done;
    }
    if (side_needs_python(&ch, side.buf, side.len / (Py_ssize_t)sizeof(Side))) { Py_INCREF(Py_None); result = Py_None; goto done; }
    p.remap = PyMem_Malloc((size_t)(ch.n_names ? ch.n_names : 1) * sizeof(int32_t));
    p.order = PyMem_Malloc((size_t)(ch.n_names ? ch.n_names : 1) * sizeof(int32_t));
    p.runtime = PyMem_Malloc((size_t)(ch.n_names ? ch.n_names : 1) * sizeof(int64_t));
    p.good = PyMem_Malloc((size_t)(ch.n ? ch.n : 1) * sizeof(Py_ssize_t));
    p.codes = PyMem_Malloc((size_t)(ch.n ? ch.n : 1) * sizeof(int32_t));
    p.v = PyMem_Malloc((size_t)(ch.n ? ch.n : 1) * N_COLS * sizeof(int64_t));
    if (!p.remap || !p.order || !p.runtime || !p.good || !p.codes || !p.v) { PyErr_NoMemory(); goto done; }
    memset(p.remap, 0xFF, (size_t)ch.n_names * sizeof(int32_t));  /* -1: not seen */
    int rc = read_rows(&ch, &p);
    if (rc) {
        if (rc > 0) { Py_INCREF(Py_None); result = Py_None; }
        goto done;
    }
    PyObject *cols = columns(&ch, &p, data.buf, data.len);
    PyObject *kept = cols ? kept_names(&p, names) : NULL;
    PyObject *counts = kept ? PyByteArray_FromStringAndSize((const char *)p.counts, sizeof p.counts) : NULL;
    if (counts) result = Py_BuildValue("(NLLNN)", counts, (long long)p.other, (long long)p.bad, kept, cols);
    else { Py_XDECREF(cols); Py_XDECREF(kept); }
done:
    PyMem_Free(p.remap); PyMem_Free(p.order); PyMem_Free(p.runtime); PyMem_Free(p.good);
    PyMem_Free(p.codes); PyMem_Free(p.v);
    PyBuffer_Release(&data); PyBuffer_Release(&rows); PyBuffer_Release(&side);
    PyBuffer_Release(&cat_kind); PyBuffer_Release(&cat_gpu); PyBuffer_Release(&host);
    return result;
}

#endif
