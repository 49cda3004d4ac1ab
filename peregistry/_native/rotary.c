/*
 * peregistry._rotary_kernel: the fused CPU rotation behind the eager torch and NumPy paths.
 *
 * For every row x of a C-contiguous (rows, dim) array and its table rows c, s (rotary_dim/2
 * entries each) it writes, for each pair (a, b):
 *
 *     a' = a*c - b*s        b' = b*c + a*s
 *
 * where the pairs are (i, i + rotary_dim/2) ("half", GPT-NeoX/Llama) or (2i, 2i+1)
 * ("interleaved", RoFormer/GPT-J); features from rotary_dim on are copied unchanged. This is
 * Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021), eq. (34),
 * evaluated as Hugging Face's ``q*cos + rotate_half(q)*sin`` is: each product rounded, then the
 * sum rounded, in the tables' precision (float32 or float64). The file is built with
 * -ffp-contract=off so no fused multiply-add changes a bit. bfloat16 inputs are widened
 * exactly, rotated in float32 and rounded once (to nearest even, as c10::BFloat16 rounds), in
 * one pass over memory: one read of x, one write of the output, the tables staying in cache.
 * (float16 is left to the adapters: GCC does not vectorise _Float16 conversions.)
 *
 * The tables may broadcast against x's leading axes: row r of x (a multi-index over
 * x.shape[:-1]) reads its table row at sum(index[k] * stride[k]), with stride 0 on broadcast
 * axes. Rows are handed out in chunks to up to `threads` workers (the GIL released meanwhile),
 * each taking the next chunk when done, so a worker slowed by a busy core takes fewer. The
 * workers are the caller's OpenMP team when the caller passes the runtime's GOMP_parallel
 * entry point (the torch adapter passes torch's own, so the kernel runs on torch's intra-op
 * threads instead of competing with them for cores), else POSIX threads.
 *
 * The interface is deliberately framework-free (addresses or buffer-protocol objects, shapes
 * and strides as Python ints): the fast paths that call it (torch's and NumPy's) own all
 * validation, and the generic Array API rotation stays the reference it is tested against.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define MAX_NDIM 16
#define MAX_THREADS 64
/* Below this many elements per thread, starting a thread costs more than it saves. */
#define MIN_ELEMENTS_PER_THREAD (1 << 16)
/* Elements per chunk handed to a worker: small next to a worker's share, big next to the cost
 * of taking one (an atomic increment). */
#define CHUNK_ELEMENTS (1 << 15)

enum { DT_FLOAT32 = 0, DT_FLOAT64 = 1, DT_BFLOAT16 = 2 };

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* One binary, several code paths, chosen once at import by what the CPU has: AVX-512 (with
 * 512-bit vectors: the bfloat16 conversions are most of the work), AVX2, and the SSE2 baseline.
 * None enables FMA, and -ffp-contract=off forbids contraction anyway, so every path rounds
 * exactly as the reference does and they all give the same bits. */
#define X86_DISPATCH 1
#define ISA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,prefer-vector-width=512")))
#define ISA_AVX2 __attribute__((target("avx2")))
#else
#define X86_DISPATCH 0
#endif

#define INLINE static inline __attribute__((always_inline))
/* Pairs per block of the interleaved layout (see NAME##_inter). */
#define PAIR_BLOCK 64

typedef struct {
    const char *x;
    char *out;
    const char *cos;
    const char *sin;
    int xdtype, wdtype, interleaved;
    Py_ssize_t dim, rotary_dim, ndim;
    Py_ssize_t shape[MAX_NDIM];
    Py_ssize_t cstride[MAX_NDIM];
    Py_ssize_t sstride[MAX_NDIM];
    Py_ssize_t row0, row1;
} Job;

INLINE float bf16_load(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even, as c10::BFloat16 does; NaN becomes 0xFFFF, as in ATen's vectorized
 * CPU conversion (cvtfp32_bf16), which is what torch's own float32 -> bfloat16 copy writes. */
INLINE uint16_t bf16_store(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return (f != f) ? (uint16_t)0xFFFFu : (uint16_t)r;
}

/* One row of one layout, for one (storage type, arithmetic type) combination. */
#define DEFINE_ROW(NAME, XT, WT, LOAD, STORE)                                                   \
    INLINE void NAME##_half(const XT *restrict x, XT *restrict o, const WT *restrict c,         \
                            const WT *restrict s, Py_ssize_t h) {                               \
        _Pragma("GCC ivdep") for (Py_ssize_t i = 0; i < h; i++) {                               \
            WT a = LOAD(x[i]), b = LOAD(x[i + h]);                                              \
            WT ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];                      \
            o[i] = STORE(ac - bs);                                                              \
            o[i + h] = STORE(bc + as);                                                          \
        }                                                                                       \
    }                                                                                           \
    /* Interleaved pairs go through small blocks of separated a/b (and a'/b'), so that the   \
     * arithmetic is the half layout's: alternating subtract/add lanes would let GCC (12, with  \
     * FMA-capable targets) form fmaddsub even under -ffp-contract=off. */                     \
    INLINE void NAME##_inter(const XT *restrict x, XT *restrict o, const WT *restrict c,        \
                             const WT *restrict s, Py_ssize_t h) {                              \
        WT a[PAIR_BLOCK], b[PAIR_BLOCK], p[PAIR_BLOCK], q[PAIR_BLOCK];                          \
        for (Py_ssize_t i0 = 0; i0 < h; i0 += PAIR_BLOCK) {                                     \
            const Py_ssize_t n = h - i0 < PAIR_BLOCK ? h - i0 : PAIR_BLOCK;                     \
            for (Py_ssize_t i = 0; i < n; i++) {                                                \
                a[i] = LOAD(x[2 * (i0 + i)]);                                                   \
                b[i] = LOAD(x[2 * (i0 + i) + 1]);                                               \
            }                                                                                   \
            for (Py_ssize_t i = 0; i < n; i++) {                                                \
                WT ac = a[i] * c[i0 + i], bs = b[i] * s[i0 + i];                                \
                WT bc = b[i] * c[i0 + i], as = a[i] * s[i0 + i];                                \
                p[i] = ac - bs;                                                                 \
                q[i] = bc + as;                                                                 \
            }                                                                                   \
            for (Py_ssize_t i = 0; i < n; i++) {                                                \
                o[2 * (i0 + i)] = STORE(p[i]);                                                  \
                o[2 * (i0 + i) + 1] = STORE(q[i]);                                              \
            }                                                                                   \
        }                                                                                       \
    }

/* Rows [row0, row1) of a job, for one combination and one instruction set; the half width is
 * specialised for the usual head sizes (64 and 128 features), so those loops are fully unrolled
 * and vectorised. */
#define DEFINE_ROWS(NAME, XT, WT, ISA, ATTR)                                                    \
    ATTR static void NAME##_rows_##ISA(const Job *job) {                                        \
        const Py_ssize_t nd = job->ndim, h = job->rotary_dim / 2, dim = job->dim;               \
        const Py_ssize_t tail = (dim - job->rotary_dim) * (Py_ssize_t)sizeof(XT);               \
        const WT *cos = (const WT *)job->cos, *sin = (const WT *)job->sin;                      \
        Py_ssize_t idx[MAX_NDIM];                                                               \
        Py_ssize_t coff = 0, soff = 0, rem = job->row0;                                         \
        for (Py_ssize_t k = nd - 1; k >= 0; k--) { /* multi-index of the first row */          \
            idx[k] = rem % job->shape[k];                                                       \
            rem /= job->shape[k];                                                               \
            coff += idx[k] * job->cstride[k];                                                   \
            soff += idx[k] * job->sstride[k];                                                   \
        }                                                                                       \
        for (Py_ssize_t r = job->row0; r < job->row1; r++) {                                    \
            const XT *x = (const XT *)job->x + r * dim;                                         \
            XT *o = (XT *)job->out + r * dim;                                                   \
            const WT *c = cos + coff, *s = sin + soff;                                          \
            if (job->interleaved) {                                                             \
                if (h == 32) NAME##_inter(x, o, c, s, 32);                                      \
                else if (h == 64) NAME##_inter(x, o, c, s, 64);                                 \
                else NAME##_inter(x, o, c, s, h);                                               \
            } else {                                                                            \
                if (h == 32) NAME##_half(x, o, c, s, 32);                                       \
                else if (h == 64) NAME##_half(x, o, c, s, 64);                                  \
                else NAME##_half(x, o, c, s, h);                                                \
            }                                                                                   \
            if (tail)                                                                           \
                memcpy(o + job->rotary_dim, x + job->rotary_dim, (size_t)tail);                 \
            for (Py_ssize_t k = nd - 1; k >= 0; k--) { /* next row: advance the odometer */     \
                coff += job->cstride[k];                                                        \
                soff += job->sstride[k];                                                        \
                if (++idx[k] < job->shape[k])                                                   \
                    break;                                                                      \
                coff -= idx[k] * job->cstride[k];                                               \
                soff -= idx[k] * job->sstride[k];                                               \
                idx[k] = 0;                                                                     \
            }                                                                                   \
        }                                                                                       \
    }

#define ID(v) (v)
#define TO_F32(v) ((float)(v))
#define TO_F64(v) ((double)(v))
#define BF16_F64(v) ((double)bf16_load(v))
#define F64_BF16(v) bf16_store((float)(v))

#define NOATTR
#if X86_DISPATCH
#define DEFINE_ALL(NAME, XT, WT, LOAD, STORE)                                                   \
    DEFINE_ROW(NAME, XT, WT, LOAD, STORE)                                                       \
    DEFINE_ROWS(NAME, XT, WT, base, NOATTR)                                                     \
    DEFINE_ROWS(NAME, XT, WT, avx2, ISA_AVX2)                                                   \
    DEFINE_ROWS(NAME, XT, WT, avx512, ISA_AVX512)                                               \
    static void NAME##_rows(const Job *job) {                                                   \
        if (isa == 2) NAME##_rows_avx512(job);                                                  \
        else if (isa == 1) NAME##_rows_avx2(job);                                               \
        else NAME##_rows_base(job);                                                             \
    }
#else
#define DEFINE_ALL(NAME, XT, WT, LOAD, STORE)                                                   \
    DEFINE_ROW(NAME, XT, WT, LOAD, STORE)                                                       \
    DEFINE_ROWS(NAME, XT, WT, base, NOATTR)                                                     \
    static void NAME##_rows(const Job *job) { NAME##_rows_base(job); }
#endif

/* The instruction set in use: 0 baseline, 1 AVX2, 2 AVX-512 (set once, at import). */
static int isa = 0;

DEFINE_ALL(f32_f32, float, float, ID, ID)
DEFINE_ALL(f32_f64, float, double, TO_F64, (float))
DEFINE_ALL(f64_f64, double, double, ID, ID)
DEFINE_ALL(f64_f32, double, float, TO_F32, (double))
DEFINE_ALL(bf16_f32, uint16_t, float, bf16_load, bf16_store)
DEFINE_ALL(bf16_f64, uint16_t, double, BF16_F64, F64_BF16)

static void run(const Job *job) {
    switch (job->xdtype * 2 + job->wdtype) {
    case DT_FLOAT32 * 2 + DT_FLOAT32: f32_f32_rows(job); break;
    case DT_FLOAT32 * 2 + DT_FLOAT64: f32_f64_rows(job); break;
    case DT_FLOAT64 * 2 + DT_FLOAT64: f64_f64_rows(job); break;
    case DT_FLOAT64 * 2 + DT_FLOAT32: f64_f32_rows(job); break;
    case DT_BFLOAT16 * 2 + DT_FLOAT32: bf16_f32_rows(job); break;
    case DT_BFLOAT16 * 2 + DT_FLOAT64: bf16_f64_rows(job); break;
    default: break; /* unreachable: rotate() validated the combination */
    }
}

/* The shared state of one call: workers take chunks of rows until none are left. */
typedef struct {
    Job job;
    Py_ssize_t rows, chunk;
    atomic_llong next;
} Work;

static void work(void *arg) {
    Work *w = (Work *)arg;
    Job j = w->job;
    for (;;) {
        long long c = atomic_fetch_add_explicit(&w->next, 1, memory_order_relaxed);
        if (c >= (w->rows + w->chunk - 1) / w->chunk)
            break;
        j.row0 = (Py_ssize_t)c * w->chunk;
        j.row1 = j.row0 + w->chunk < w->rows ? j.row0 + w->chunk : w->rows;
        run(&j);
    }
}

static void *work_thread(void *arg) {
    work(arg);
    return NULL;
}

/* libgomp's entry point for `#pragma omp parallel` (also exported by LLVM's and Intel's
 * OpenMP runtimes): runs fn(data) on a team of num_threads threads, the caller included. */
typedef void (*gomp_parallel_fn)(void (*fn)(void *), void *data, unsigned num_threads,
                                 unsigned flags);

static int read_sizes(PyObject *seq, Py_ssize_t n, Py_ssize_t *dst, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd entries, got %zd", what, n,
                     PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        dst[k] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, k));
        if (dst[k] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* The address of the first element of `o`: `o` itself if an int, else the buffer `o` exports
 * (held in `view` until release_all; `writable` for the output). */
static int address_of(PyObject *o, int writable, Py_buffer *view, int *held, uintptr_t *addr) {
    if (PyLong_Check(o)) {
        unsigned long long a = PyLong_AsUnsignedLongLong(o);
        if (a == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        *addr = (uintptr_t)a;
        return 0;
    }
    if (PyObject_GetBuffer(o, view, writable ? PyBUF_STRIDED : PyBUF_STRIDED_RO) < 0)
        return -1;
    *held = 1;
    *addr = (uintptr_t)view->buf;
    return 0;
}

static void release_all(Py_buffer *views, const int *held) {
    for (int k = 0; k < 4; k++)
        if (held[k])
            PyBuffer_Release(&views[k]);
}

static PyObject *rotate_at(uintptr_t x, uintptr_t out, uintptr_t cos, uintptr_t sin, int xdtype,
                           int wdtype, Py_ssize_t dim, Py_ssize_t rotary_dim, int interleaved,
                           PyObject *shape_o, PyObject *cstr_o, PyObject *sstr_o, int threads,
                           unsigned long long gomp);

PyDoc_STRVAR(rotate_doc,
"rotate(x, out, cos, sin, xdtype, wdtype, dim, rotary_dim, interleaved, shape, cos_strides,\n"
"       sin_strides, threads, gomp_parallel=0) -> None\n\n"
"Rotate the C-contiguous rows of length `dim` at `x` into `out` (same layout, no overlap);\n"
"`x`, `out`, `cos`, `sin` are addresses (ints) or objects exporting a buffer (a NumPy array:\n"
"its first element). `shape` is x.shape[:-1]; `cos_strides`/`sin_strides` are the tables' element\n"
"strides over those axes (0 where they broadcast), their last axis contiguous with\n"
"rotary_dim/2 entries. dtype codes: 0 float32, 1 float64, 2 bfloat16 (x), and 0 or 1 for\n"
"the tables. Up to `threads` workers: the OpenMP team of the runtime whose GOMP_parallel is at\n"
"address `gomp_parallel`, or POSIX threads if it is 0. The caller guarantees the addresses\n"
"are valid for these extents.");

static PyObject *rotate(PyObject *self, PyObject *args) {
    PyObject *obj[4];
    unsigned long long gomp = 0;
    int xdtype, wdtype, interleaved, threads;
    Py_ssize_t dim, rotary_dim;
    PyObject *shape_o, *cstr_o, *sstr_o;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOiinnpOOOi|K", &obj[0], &obj[1], &obj[2], &obj[3], &xdtype,
                          &wdtype, &dim, &rotary_dim, &interleaved, &shape_o, &cstr_o, &sstr_o,
                          &threads, &gomp))
        return NULL;
    Py_buffer views[4];
    int held[4] = {0, 0, 0, 0};
    uintptr_t addr[4];
    for (int k = 0; k < 4; k++) {
        if (address_of(obj[k], k == 1, &views[k], &held[k], &addr[k]) < 0) {
            release_all(views, held);
            return NULL;
        }
    }
    PyObject *result = rotate_at(addr[0], addr[1], addr[2], addr[3], xdtype, wdtype, dim,
                                 rotary_dim, interleaved, shape_o, cstr_o, sstr_o, threads, gomp);
    release_all(views, held);
    return result;
}

static PyObject *rotate_at(uintptr_t x, uintptr_t out, uintptr_t cos, uintptr_t sin, int xdtype,
                           int wdtype, Py_ssize_t dim, Py_ssize_t rotary_dim, int interleaved,
                           PyObject *shape_o, PyObject *cstr_o, PyObject *sstr_o, int threads,
                           unsigned long long gomp) {
    if (xdtype < 0 || xdtype > 2) {
        PyErr_Format(PyExc_ValueError, "xdtype: unsupported code %d", xdtype);
        return NULL;
    }
    if (wdtype != DT_FLOAT32 && wdtype != DT_FLOAT64) {
        PyErr_Format(PyExc_ValueError, "wdtype: unsupported code %d (0 or 1)", wdtype);
        return NULL;
    }
    if (rotary_dim < 0 || rotary_dim % 2 || rotary_dim > dim) {
        PyErr_Format(PyExc_ValueError, "rotary_dim: %zd must be even and within [0, %zd]",
                     rotary_dim, dim);
        return NULL;
    }
    Job job;
    memset(&job, 0, sizeof job);
    job.ndim = PySequence_Size(shape_o);
    if (job.ndim < 0)
        return NULL;
    if (job.ndim > MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "shape: at most %d axes, got %zd", MAX_NDIM, job.ndim);
        return NULL;
    }
    if (read_sizes(shape_o, job.ndim, job.shape, "shape") < 0
        || read_sizes(cstr_o, job.ndim, job.cstride, "cos_strides") < 0
        || read_sizes(sstr_o, job.ndim, job.sstride, "sin_strides") < 0)
        return NULL;
    Py_ssize_t rows = 1;
    for (Py_ssize_t k = 0; k < job.ndim; k++) {
        if (job.shape[k] < 0) {
            PyErr_SetString(PyExc_ValueError, "shape: negative size");
            return NULL;
        }
        if (job.shape[k] > 0 && rows > PY_SSIZE_T_MAX / job.shape[k]) {
            PyErr_SetString(PyExc_OverflowError, "shape: too many elements");
            return NULL;
        }
        rows *= job.shape[k];
    }
    if (dim < 0 || (dim > 0 && rows > PY_SSIZE_T_MAX / dim)) {
        PyErr_Format(PyExc_ValueError, "dim: %zd is negative or too large for shape", dim);
        return NULL;
    }
    job.x = (const char *)(uintptr_t)x;
    job.out = (char *)(uintptr_t)out;
    job.cos = (const char *)(uintptr_t)cos;
    job.sin = (const char *)(uintptr_t)sin;
    job.xdtype = xdtype;
    job.wdtype = wdtype;
    job.interleaved = interleaved;
    job.dim = dim;
    job.rotary_dim = rotary_dim;
    if (rows == 0 || dim == 0)
        Py_RETURN_NONE;

    Py_ssize_t n = (rows * dim) / MIN_ELEMENTS_PER_THREAD;
    if (n > threads)
        n = threads;
    if (n > rows)
        n = rows;
    if (n > MAX_THREADS)
        n = MAX_THREADS;
    if (n < 1)
        n = 1;
    Work w;
    w.job = job;
    w.rows = rows;
    w.chunk = CHUNK_ELEMENTS / dim > 0 ? CHUNK_ELEMENTS / dim : 1;
    atomic_init(&w.next, 0);
    Py_BEGIN_ALLOW_THREADS
    if (n == 1) {
        job.row0 = 0;
        job.row1 = rows;
        run(&job);
    } else if (gomp) {
        ((gomp_parallel_fn)(uintptr_t)gomp)(work, &w, (unsigned)n, 0);
    } else {
        pthread_t tids[MAX_THREADS];
        int started[MAX_THREADS];
        for (Py_ssize_t t = 1; t < n; t++)
            started[t] = pthread_create(&tids[t], NULL, work_thread, &w) == 0;
        work(&w); /* the chunks of a thread that could not start are taken by the others */
        for (Py_ssize_t t = 1; t < n; t++)
            if (started[t])
                pthread_join(tids[t], NULL);
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"rotate", rotate, METH_VARARGS, rotate_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "peregistry._rotary_kernel",
    "The fused CPU rotation kernel (see rotate.__doc__).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rotary_kernel(void) {
#if X86_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl"))
        isa = 2;
    else if (__builtin_cpu_supports("avx2"))
        isa = 1;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    static const char *const isa_names[] = {"baseline", "avx2", "avx512"};
    if (PyModule_AddStringConstant(m, "ISA", isa_names[isa]) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
