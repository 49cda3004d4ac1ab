/*
 * peregistry_rotary_c._rotary: a fused CPU rotation for rotary position embeddings.
 *
 * For every row of x (R = rotary_dim contiguous elements) and its table rows c, s (R/2
 * elements each) it writes one row of a new C-contiguous output, for each pair (a, b):
 *
 *     a' = a*c - b*s        b' = b*c + a*s
 *
 * where the pairs are (i, i + R/2) ("half", GPT-NeoX/Llama) or (2i, 2i+1) ("interleaved",
 * RoFormer/GPT-J). This is Su et al., "RoFormer: Enhanced Transformer with Rotary Position
 * Embedding" (2021), eq. (34), evaluated as peregistry's generic rotation (and Hugging Face's
 * ``q*cos + rotate_half(q)*sin``) evaluates it: x converted to the tables' precision (float32 or
 * float64), each product rounded, then the sum rounded, then one rounding to x's dtype. Nothing
 * may fuse a multiply-add (that would change bits): the build passes -ffp-contract=off, and the
 * pragma below says it again for clang, whose default is to contract. bfloat16 x is widened
 * exactly and rounded once at the end (to nearest even, as c10::BFloat16 rounds), in one pass
 * over memory.
 *
 * Safety is this file's job, not the caller's: every buffer comes through the buffer protocol,
 * and before a byte is touched the plan (leading shape, element strides) is checked against
 * what each exporter said it holds: item size and format, alignment, the extent of every row the
 * plan reaches, writability and size of the output, and no overlap between output and inputs.
 * A plan it cannot serve raises ValueError or TypeError; it never reads or writes outside the
 * buffers it was given.
 *
 * Threads: rows are cut into chunks that workers take one at a time (an atomic counter), so a
 * worker slowed by a busy core simply takes fewer. A chunk is the rows that start in one aligned
 * stretch of the output's addresses (a huge page, for large outputs), so that two threads do not
 * fault on one new page at once. The workers are a pool of POSIX threads owned
 * by this module: created on first need, grown when a call asks for more, parked on a condition
 * variable between calls (no CPU), reset in a forked child (pthread_atfork). The calling thread
 * works too, with the GIL released. No thread is started per call, and no symbol of another
 * library (an OpenMP runtime) is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(_WIN32)
#error "peregistry-rotary-c needs POSIX threads and GCC/clang attributes (Windows is not supported)"
#endif

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#if defined(__clang__)
/* clang contracts a*b + c into an FMA by default (-ffp-contract=on); the rotation must round
 * each product. setup.py passes -ffp-contract=off too: this makes the source say it. */
#pragma STDC FP_CONTRACT OFF
#endif

/* Axes of x.shape[:-1]: NumPy 2 and torch allow 64 dimensions. */
#define MAX_NDIM 64
/* Workers, the caller included. */
#define MAX_THREADS 64
/* Below this many elements per thread, waking a worker costs more than it saves (a wake-up is
 * some microseconds; 2^16 float32 elements take about as long to rotate on one core). */
#define MIN_ELEMENTS_PER_THREAD (1 << 16)
/* Elements per chunk handed to a worker: small next to a worker's share (so a slow worker takes
 * fewer), big next to the cost of taking one (an atomic increment). */
#define CHUNK_ELEMENTS (1 << 15)
/* Chunks of a large output are its 2 MiB-aligned stretches of addresses: one transparent huge
 * page each (NumPy madvises huge pages for arrays of 4 MiB and more), whose first write has the
 * OS zero all of it. Threads faulting new pages next to each other cost far more CPU time than
 * the same faults taken far apart (docs/benchmarks.md, issue 43): hence one range of such chunks
 * per thread. Used where each thread gets at least two of them. */
#define HUGE_PAGE_BYTES ((Py_ssize_t)2 << 20)
/* Pairs per block of the interleaved layout (see NAME##_inter). */
#define PAIR_BLOCK 64

enum { DT_FLOAT32 = 0, DT_FLOAT64 = 1, DT_BFLOAT16 = 2 };

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* One binary, several code paths, chosen at import by what the CPU has (__builtin_cpu_supports,
 * which GCC and clang both provide): AVX-512 with 512-bit vectors (the bfloat16 conversions are
 * most of the work), AVX2, and the SSE2 baseline. Target attributes, not -mavx2, so that the
 * wheel runs on any x86-64. -ffp-contract=off holds on every path (LLVM's avx512f implies FMA;
 * contraction is still forbidden), so all paths give the same bits: the tests compare them. */
#define X86_DISPATCH 1
#if defined(__clang__)
#define ISA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl"), min_vector_width(512)))
#else
#define ISA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,prefer-vector-width=512")))
#endif
#define ISA_AVX2 __attribute__((target("avx2")))
#else
/* aarch64 (NEON is its baseline) and anything else: one path, the compiler's default. */
#define X86_DISPATCH 0
#endif

#if defined(__clang__)
#define IVDEP
#else
#define IVDEP _Pragma("GCC ivdep")
#endif

#define INLINE static inline __attribute__((always_inline))

/* One call's work: validated by rotate() before any worker sees it. Offsets in elements. */
typedef struct {
    const char *x;
    char *out;
    const char *cos;
    const char *sin;
    int xdtype, wdtype, interleaved;
    Py_ssize_t rd, ndim;
    Py_ssize_t shape[MAX_NDIM];
    Py_ssize_t xstride[MAX_NDIM];
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
        IVDEP for (Py_ssize_t i = 0; i < h; i++) {                                              \
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

/* Rows [row0, row1) of a job, for one combination and one instruction set. The row offsets of
 * x and of both tables follow an odometer over the leading axes (any strides: broadcast axes
 * have stride 0, reversed ones a negative stride). The half width is specialised for the usual
 * head sizes (64 and 128 features), so those loops are fully unrolled and vectorised. */
#define DEFINE_ROWS(NAME, XT, WT, ISA, ATTR)                                                    \
    ATTR static void NAME##_rows_##ISA(const Job *job) {                                        \
        const Py_ssize_t nd = job->ndim, rd = job->rd, h = rd / 2;                              \
        const XT *xb = (const XT *)job->x;                                                      \
        const WT *cb = (const WT *)job->cos, *sb = (const WT *)job->sin;                        \
        Py_ssize_t idx[MAX_NDIM];                                                               \
        Py_ssize_t xoff = 0, coff = 0, soff = 0, rem = job->row0;                               \
        for (Py_ssize_t k = nd - 1; k >= 0; k--) { /* multi-index of the first row */          \
            idx[k] = rem % job->shape[k];                                                       \
            rem /= job->shape[k];                                                               \
            xoff += idx[k] * job->xstride[k];                                                   \
            coff += idx[k] * job->cstride[k];                                                   \
            soff += idx[k] * job->sstride[k];                                                   \
        }                                                                                       \
        for (Py_ssize_t r = job->row0; r < job->row1; r++) {                                    \
            const XT *x = xb + xoff;                                                            \
            XT *o = (XT *)job->out + r * rd;                                                    \
            const WT *c = cb + coff, *s = sb + soff;                                            \
            if (job->interleaved) {                                                             \
                if (h == 32) NAME##_inter(x, o, c, s, 32);                                      \
                else if (h == 64) NAME##_inter(x, o, c, s, 64);                                 \
                else NAME##_inter(x, o, c, s, h);                                               \
            } else {                                                                            \
                if (h == 32) NAME##_half(x, o, c, s, 32);                                       \
                else if (h == 64) NAME##_half(x, o, c, s, 64);                                  \
                else NAME##_half(x, o, c, s, h);                                                \
            }                                                                                   \
            for (Py_ssize_t k = nd - 1; k >= 0; k--) { /* next row: advance the odometer */     \
                xoff += job->xstride[k];                                                        \
                coff += job->cstride[k];                                                        \
                soff += job->sstride[k];                                                        \
                if (++idx[k] < job->shape[k])                                                   \
                    break;                                                                      \
                xoff -= idx[k] * job->xstride[k];                                               \
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
/* float64 -> bfloat16 through float32, as torch's copy converts (c10::BFloat16(float)). */
#define F64_BF16(v) bf16_store((float)(v))

/* The instruction set in use: 0 baseline, 1 AVX2, 2 AVX-512 (found at import; tests may lower
 * it with _set_isa to compare the paths). */
static int isa = 0;
static int isa_max = 0;
static const char *const isa_names[] = {"baseline", "avx2", "avx512"};

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

/* x's storage type, then the arithmetic (the tables') type: the six combinations the generic
 * rotation computes (it converts x to the tables' dtype, rotates, converts back once). */
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
    default: break; /* unreachable: rotate() validated the codes */
    }
}

/* ---- the worker pool ------------------------------------------------------------------------ */

/* The shared state of one call. Chunk c holds the rows that start in the c-th `span`-byte
 * stretch of the output's addresses counted from an address aligned to `span` (`first` bytes
 * after the output's start; chunk 0 holds the rows before it), so no two chunks start a row in
 * the same page of `span` bytes. The chunks are cut into one contiguous range per thread: a
 * thread takes the chunks of its own range in order, then those left in the others' ranges (a
 * thread slowed by a busy core, or one that never woke, simply does fewer). */
typedef struct {
    Job job;
    Py_ssize_t rows, row_bytes, span, first, nchunks;
    int nranges;
    atomic_int joined;                  /* threads that took a range number so far */
    Py_ssize_t range_end[MAX_THREADS];  /* range r: chunks [range_end[r - 1], range_end[r]) */
    atomic_llong next[MAX_THREADS];     /* the next chunk of each range */
} Work;

/* The first row of chunk c (rows if past the end): the first row starting at or after byte
 * first + (c - 1) * span of the output. */
static Py_ssize_t chunk_row(const Work *w, Py_ssize_t c) {
    if (c <= 0)
        return 0;
    Py_ssize_t at = w->first + (c - 1) * w->span;
    Py_ssize_t r = (at + w->row_bytes - 1) / w->row_bytes;
    return r < w->rows ? r : w->rows;
}

/* Chunks of `span` bytes of the output at `out`, in `nranges` ranges of about equal size. */
static void plan_chunks(Work *w, const char *out, Py_ssize_t out_bytes, Py_ssize_t span,
                        int nranges) {
    w->span = span;
    w->first = (Py_ssize_t)((span - (Py_ssize_t)((uintptr_t)out % (uintptr_t)span)) % span);
    /* chunk 0, then one per stretch that starts before the end of the output */
    w->nchunks = 1 + (out_bytes > w->first ? (out_bytes - w->first + span - 1) / span : 0);
    w->nranges = nranges;
    atomic_init(&w->joined, 0);
    for (int r = 0; r < nranges; r++) {
        w->range_end[r] = w->nchunks * (r + 1) / nranges;
        atomic_init(&w->next[r], r == 0 ? 0 : w->nchunks * r / nranges);
    }
}

static void work(Work *w) {
    Job j = w->job;
    const int me = atomic_fetch_add_explicit(&w->joined, 1, memory_order_relaxed) % w->nranges;
    for (int k = 0; k < w->nranges; k++) {
        const int r = (me + k) % w->nranges;
        for (;;) {
            long long c = atomic_fetch_add_explicit(&w->next[r], 1, memory_order_relaxed);
            if (c >= w->range_end[r])
                break;
            j.row0 = chunk_row(w, (Py_ssize_t)c);
            j.row1 = chunk_row(w, (Py_ssize_t)c + 1);
            if (j.row0 < j.row1)
                run(&j);
        }
    }
}

/* One call at a time uses the pool (a second Python thread calling meanwhile rotates on its own
 * thread: the cores are busy anyway), so the pool's state is that one call's. */
static pthread_mutex_t pool_busy = PTHREAD_MUTEX_INITIALIZER;
static struct {
    pthread_mutex_t lock; /* guards the fields below */
    pthread_cond_t wake;  /* workers wait here for tickets */
    pthread_cond_t done;  /* the caller waits here for the workers that joined */
    Work *work;           /* the current call's work, or NULL */
    unsigned long generation; /* one per call: a worker joins a call at most once */
    int tickets;          /* workers still invited to the current call */
    int running;          /* workers inside work() for the current call */
    int size;             /* threads created (all alive: they never exit) */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
          NULL, 0, 0, 0, 0};

static void *worker_main(void *arg) {
    (void)arg;
    unsigned long served = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.tickets == 0 || pool.generation == served)
            pthread_cond_wait(&pool.wake, &pool.lock);
        served = pool.generation;
        pool.tickets--;
        pool.running++;
        Work *w = pool.work;
        pthread_mutex_unlock(&pool.lock);
        work(w);
        pthread_mutex_lock(&pool.lock);
        if (--pool.running == 0)
            pthread_cond_signal(&pool.done);
    }
    return NULL; /* unreachable: workers live as long as the process */
}

/* Grow the pool to `want` threads (or as many as the system gives). Called with pool_busy
 * held, without the GIL. The new threads block every signal: Python handles signals on its
 * main thread, and a worker must never run a handler. */
static void pool_grow(int want) {
    sigset_t all, old;
    sigfillset(&all);
    /* (but a fault must still reach the default action, or faulthandler's report) */
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* The kernels keep a few KiB on the stack; a small stack keeps idle workers cheap. */
    pthread_attr_setstacksize(&attr, 256 * 1024);
    while (pool.size < want) {
        pthread_t t;
        if (pthread_create(&t, &attr, worker_main, NULL) != 0)
            break; /* fewer workers: the caller and those there are take every chunk */
        pthread_mutex_lock(&pool.lock);
        pool.size++;
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Run `w` on the caller and up to `helpers` workers; returns once every chunk is done. */
static void pool_run(Work *w, int helpers) {
    if (helpers > 0 && pthread_mutex_trylock(&pool_busy) == 0) {
        if (pool.size < helpers)
            pool_grow(helpers);
        pthread_mutex_lock(&pool.lock);
        pool.work = w;
        pool.generation++;
        pool.tickets = helpers < pool.size ? helpers : pool.size;
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
        work(w);
        pthread_mutex_lock(&pool.lock);
        /* Every chunk is taken: a worker that has not woken yet (its core busy) is not waited
         * for, only those already inside work() (they finish their last chunk). */
        pool.tickets = 0;
        while (pool.running > 0)
            pthread_cond_wait(&pool.done, &pool.lock);
        pool.work = NULL;
        pthread_mutex_unlock(&pool.lock);
        pthread_mutex_unlock(&pool_busy);
    } else {
        work(w);
    }
}

/* fork(): the child has only the forking thread, so it starts with an empty pool. Taking both
 * locks before the fork makes the child's copies consistent (no call is half-dispatched). */
static void atfork_prepare(void) {
    pthread_mutex_lock(&pool_busy);
    pthread_mutex_lock(&pool.lock);
}

static void atfork_parent(void) {
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool_busy);
}

static void atfork_child(void) {
    pool.work = NULL;
    pool.tickets = 0;
    pool.running = 0;
    pool.size = 0;
    /* The parent's workers may have been waiting on these: start them afresh. */
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool_busy);
}

/* ---- validation ------------------------------------------------------------------------------ */

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
        PyObject *item = PySequence_Fast_GET_ITEM(fast, k);
        if (!PyLong_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s: entries must be ints, got %.100s", what,
                         Py_TYPE(item)->tp_name);
            Py_DECREF(fast);
            return -1;
        }
        dst[k] = PyLong_AsSsize_t(item);
        if (dst[k] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

static const Py_ssize_t item_sizes[3] = {4, 8, 2};

/* Whether a buffer's struct format is the type of dtype code `code` (native byte order). */
static int format_matches(const char *fmt, int code) {
    if (fmt == NULL) /* the exporter gave none: unsigned bytes, so only the itemsize tells */
        return 1;
    if (*fmt == '@' || *fmt == '=')
        fmt++;
#if PY_LITTLE_ENDIAN
    else if (*fmt == '<')
        fmt++;
#else
    else if (*fmt == '>')
        fmt++;
#endif
    if (fmt[0] == '\0' || fmt[1] != '\0')
        return 0;
    switch (code) {
    case DT_FLOAT32: return fmt[0] == 'f';
    case DT_FLOAT64: return fmt[0] == 'd';
    case DT_BFLOAT16: return fmt[0] == 'h' || fmt[0] == 'H'; /* bfloat16 viewed as 16-bit ints */
    default: return 0;
    }
}

/* The bytes an exporter vouches for, relative to view->buf: [*lo, *hi), empty if lo == hi. A
 * strided view is a view of one allocation (NumPy, torch, memoryview), so every byte between its
 * first and last element belongs to it. */
static int exporter_extent(const Py_buffer *v, Py_ssize_t *lo, Py_ssize_t *hi) {
    *lo = *hi = 0;
    if (v->len == 0)
        return 0;
    if (v->strides == NULL || v->ndim == 0) {
        *hi = v->len;
        return 0;
    }
    Py_ssize_t a = 0, b = 0;
    for (int k = 0; k < v->ndim; k++) {
        Py_ssize_t span;
        if (v->shape[k] == 0)
            return 0;
        if (__builtin_mul_overflow(v->shape[k] - 1, v->strides[k], &span))
            return -1;
        if (span < 0 ? __builtin_add_overflow(a, span, &a) : __builtin_add_overflow(b, span, &b))
            return -1;
    }
    if (__builtin_add_overflow(b, v->itemsize, &b))
        return -1;
    *lo = a;
    *hi = b;
    return 0;
}

/* The bytes the plan reads of one operand, relative to its buf: the rows at offsets
 * sum(idx[k] * stride[k]) elements, `width` elements each, over every multi-index (rows > 0).
 * A linear function over a box is extreme at its corners: min and max per axis. */
static int plan_extent(const Py_ssize_t *shape, const Py_ssize_t *stride, Py_ssize_t ndim,
                       Py_ssize_t width, Py_ssize_t itemsize, Py_ssize_t *lo, Py_ssize_t *hi) {
    Py_ssize_t a = 0, b = 0;
    for (Py_ssize_t k = 0; k < ndim; k++) {
        Py_ssize_t span;
        if (__builtin_mul_overflow(shape[k] - 1, stride[k], &span))
            return -1;
        if (span < 0 ? __builtin_add_overflow(a, span, &a) : __builtin_add_overflow(b, span, &b))
            return -1;
    }
    if (__builtin_add_overflow(b, width, &b) || __builtin_mul_overflow(a, itemsize, &a)
        || __builtin_mul_overflow(b, itemsize, &b))
        return -1;
    *lo = a;
    *hi = b;
    return 0;
}

static int overlaps(const char *a0, const char *a1, const char *b0, const char *b1) {
    return (uintptr_t)a0 < (uintptr_t)b1 && (uintptr_t)b0 < (uintptr_t)a1;
}

static const char *const names[4] = {"x", "out", "cos", "sin"};

/* Export operand k of obj (out writable), checking its item size, format and alignment. */
static int get_view(PyObject *obj, int k, int code, Py_buffer *view) {
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected an object with the buffer protocol (a NumPy "
                     "array), got %.100s", names[k], Py_TYPE(obj)->tp_name);
        return -1;
    }
    int flags = k == 1 ? PyBUF_RECORDS : PyBUF_RECORDS_RO;
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        if (k == 1) { /* say "read-only" if that is why (exporters word it differently) */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            if (PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO) == 0) {
                PyBuffer_Release(view);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                PyErr_SetString(PyExc_ValueError, "out: the buffer is read-only");
                return -1;
            }
            PyErr_Clear();
            PyErr_Restore(type, value, tb);
        }
        return -1;
    }
    const Py_ssize_t isz = item_sizes[code];
    if (view->itemsize != isz || !format_matches(view->format, code)) {
        PyErr_Format(PyExc_TypeError, "%s: expected items of %zd bytes (%s), got format '%s' of "
                     "%zd bytes", names[k], isz,
                     code == DT_FLOAT32 ? "float32" : code == DT_FLOAT64 ? "float64" : "bfloat16",
                     view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    if ((uintptr_t)view->buf % (uintptr_t)isz) {
        PyErr_Format(PyExc_ValueError, "%s: the buffer is not aligned to its %zd-byte items",
                     names[k], isz);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* ---- the entry point ------------------------------------------------------------------------- */

PyDoc_STRVAR(rotate_doc,
"rotate(x, out, cos, sin, shape, x_strides, cos_strides, sin_strides, rotary_dim, interleaved,\n"
"       xdtype, wdtype, threads, /) -> int\n\n"
"Rotate the rows of x into out (Su et al. 2021, eq. 34; see the module) and return the number\n"
"of threads asked to work (at most `threads`: fewer for small inputs).\n\n"
"x, cos, sin: objects exporting a buffer (NumPy arrays; bfloat16 as int16/uint16); offsets are\n"
"in elements from each buffer's first element. `shape` is x.shape[:-1]; row i (a multi-index\n"
"over `shape`) of x starts at sum(i[k] * x_strides[k]) and holds `rotary_dim` contiguous\n"
"elements; its table rows start at sum(i[k] * cos_strides[k]) (sin_strides for sin) and hold\n"
"rotary_dim/2 (stride 0 where a table broadcasts). out: a writable C-contiguous buffer of\n"
"exactly prod(shape) * rotary_dim items of x's dtype, overlapping no input. dtype codes:\n"
"0 float32, 1 float64, 2 bfloat16 (x only); tables 0 or 1. Up to `threads` threads work,\n"
"the caller's and the module's pool. Every extent is checked against what each exporter holds:\n"
"a plan it cannot serve raises ValueError (TypeError for a wrong type), nothing is touched.");

static PyObject *rotate(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "rotate() takes 13 positional arguments (%zd given)", nargs);
        return NULL;
    }
    Job job;
    memset(&job, 0, sizeof job);
    long codes[2];
    for (int k = 0; k < 2; k++) {
        codes[k] = PyLong_AsLong(args[10 + k]);
        if (codes[k] == -1 && PyErr_Occurred())
            return NULL;
    }
    if (codes[0] < 0 || codes[0] > 2) {
        PyErr_Format(PyExc_ValueError, "xdtype: unsupported code %ld (0, 1 or 2)", codes[0]);
        return NULL;
    }
    if (codes[1] != DT_FLOAT32 && codes[1] != DT_FLOAT64) {
        PyErr_Format(PyExc_ValueError, "wdtype: unsupported code %ld (0 or 1)", codes[1]);
        return NULL;
    }
    job.xdtype = (int)codes[0];
    job.wdtype = (int)codes[1];
    job.rd = PyLong_AsSsize_t(args[8]);
    if (job.rd == -1 && PyErr_Occurred())
        return NULL;
    if (job.rd < 2 || job.rd % 2) {
        PyErr_Format(PyExc_ValueError, "rotary_dim: %zd must be even and at least 2", job.rd);
        return NULL;
    }
    job.interleaved = PyObject_IsTrue(args[9]);
    if (job.interleaved < 0)
        return NULL;
    long threads = PyLong_AsLong(args[12]);
    if (threads == -1 && PyErr_Occurred())
        return NULL;
    if (threads < 1) {
        PyErr_Format(PyExc_ValueError, "threads: %ld must be at least 1", threads);
        return NULL;
    }

    job.ndim = PySequence_Size(args[4]);
    if (job.ndim < 0)
        return NULL;
    if (job.ndim > MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "shape: at most %d axes, got %zd", MAX_NDIM, job.ndim);
        return NULL;
    }
    if (read_sizes(args[4], job.ndim, job.shape, "shape") < 0
        || read_sizes(args[5], job.ndim, job.xstride, "x_strides") < 0
        || read_sizes(args[6], job.ndim, job.cstride, "cos_strides") < 0
        || read_sizes(args[7], job.ndim, job.sstride, "sin_strides") < 0)
        return NULL;
    Py_ssize_t rows = 1;
    for (Py_ssize_t k = 0; k < job.ndim; k++) {
        if (job.shape[k] < 0) {
            PyErr_SetString(PyExc_ValueError, "shape: negative size");
            return NULL;
        }
        if (__builtin_mul_overflow(rows, job.shape[k], &rows)) {
            PyErr_SetString(PyExc_ValueError, "shape: too many elements");
            return NULL;
        }
    }
    Py_ssize_t out_items;
    if (__builtin_mul_overflow(rows, job.rd, &out_items)) {
        PyErr_SetString(PyExc_ValueError, "shape: too many elements");
        return NULL;
    }

    /* Export the four buffers, then check the plan against each. */
    Py_buffer views[4];
    int held = 0;
    const int code_of[4] = {job.xdtype, job.xdtype, job.wdtype, job.wdtype};
    const Py_ssize_t *strides_of[4] = {job.xstride, NULL, job.cstride, job.sstride};
    const Py_ssize_t width_of[4] = {job.rd, job.rd, job.rd / 2, job.rd / 2};
    Py_ssize_t lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) {
        if (get_view(args[k], k, code_of[k], &views[k]) < 0)
            goto fail;
        held = k + 1;
    }
    const Py_ssize_t out_bytes = out_items * item_sizes[job.xdtype];
    if (views[1].len != out_bytes || !PyBuffer_IsContiguous(&views[1], 'C')) {
        PyErr_Format(PyExc_ValueError, "out: expected a C-contiguous buffer of %zd bytes, got %zd "
                     "bytes%s", out_bytes, views[1].len,
                     PyBuffer_IsContiguous(&views[1], 'C') ? "" : " (not C-contiguous)");
        goto fail;
    }
    if (rows > 0) {
        hi[1] = out_bytes;
        for (int k = 0; k < 4; k++) {
            if (k == 1)
                continue;
            Py_ssize_t elo, ehi;
            if (plan_extent(job.shape, strides_of[k], job.ndim, width_of[k],
                            item_sizes[code_of[k]], &lo[k], &hi[k]) < 0
                || exporter_extent(&views[k], &elo, &ehi) < 0) {
                PyErr_Format(PyExc_ValueError, "%s: offsets overflow", names[k]);
                goto fail;
            }
            if (lo[k] < elo || hi[k] > ehi) {
                PyErr_Format(PyExc_ValueError, "%s: the plan reaches bytes [%zd, %zd) of a buffer "
                             "that holds [%zd, %zd)", names[k], lo[k], hi[k], elo, ehi);
                goto fail;
            }
        }
        const char *o0 = (const char *)views[1].buf, *o1 = o0 + out_bytes;
        for (int k = 0; k < 4; k++) {
            const char *b = (const char *)views[k].buf;
            if (k != 1 && overlaps(o0, o1, b + lo[k], b + hi[k])) {
                PyErr_Format(PyExc_ValueError, "out overlaps %s", names[k]);
                goto fail;
            }
        }
    }
    job.x = (const char *)views[0].buf;
    job.out = (char *)views[1].buf;
    job.cos = (const char *)views[2].buf;
    job.sin = (const char *)views[3].buf;

    Py_ssize_t n = 1;
    if (rows > 0) {
        n = out_items / MIN_ELEMENTS_PER_THREAD;
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
        w.job.row0 = 0;
        w.job.row1 = rows;
        w.rows = rows;
        w.row_bytes = job.rd * item_sizes[job.xdtype];
        /* stretches of CHUNK_ELEMENTS elements (a power of two: whole 4 KiB pages), or whole
         * huge pages where every thread gets two or more of them */
        Py_ssize_t span = CHUNK_ELEMENTS * item_sizes[job.xdtype];
        if (out_bytes / HUGE_PAGE_BYTES >= 2 * n)
            span = HUGE_PAGE_BYTES;
        plan_chunks(&w, job.out, out_bytes, span, (int)n);
        Py_BEGIN_ALLOW_THREADS
        if (n == 1)
            run(&w.job);
        else
            pool_run(&w, (int)n - 1);
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 4; k++)
        PyBuffer_Release(&views[k]);
    return PyLong_FromSsize_t(n);

fail:
    for (int k = 0; k < held; k++)
        PyBuffer_Release(&views[k]);
    return NULL;
}

PyDoc_STRVAR(pool_threads_doc, "pool_threads() -> int\n\nThreads the pool has created so far "
             "(they are reused by every call; the caller's own thread is not counted).");

static PyObject *pool_threads(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    pthread_mutex_lock(&pool.lock);
    int n = pool.size;
    pthread_mutex_unlock(&pool.lock);
    return PyLong_FromLong(n);
}

PyDoc_STRVAR(set_isa_doc, "_set_isa(name) -> str\n\nUse the code path `name` ('baseline', "
             "'avx2', 'avx512'; one this CPU has) from now on and return the previous one. For "
             "tests that compare the paths' bits; not thread-safe against running calls.");

static PyObject *set_isa(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    for (int k = 0; k <= isa_max; k++) {
        if (strcmp(name, isa_names[k]) == 0) {
            const char *old = isa_names[isa];
            isa = k;
            return PyUnicode_FromString(old);
        }
    }
    PyErr_Format(PyExc_ValueError, "_set_isa: %s is not one of this CPU's paths (up to %s)", name,
                 isa_names[isa_max]);
    return NULL;
}

static PyMethodDef methods[] = {
    {"rotate", (PyCFunction)(void (*)(void))rotate, METH_FASTCALL, rotate_doc},
    {"pool_threads", pool_threads, METH_NOARGS, pool_threads_doc},
    {"_set_isa", set_isa, METH_O, set_isa_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "peregistry_rotary_c._rotary",
    "The fused CPU rotation kernel of peregistry-rotary-c (see rotate.__doc__).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rotary(void) {
#if X86_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl"))
        isa = 2;
    else if (__builtin_cpu_supports("avx2"))
        isa = 1;
#endif
    isa_max = isa;
    static int atfork_done = 0;
    if (!atfork_done) {
        if (pthread_atfork(atfork_prepare, atfork_parent, atfork_child) != 0) {
            PyErr_SetString(PyExc_ImportError, "pthread_atfork failed");
            return NULL;
        }
        atfork_done = 1;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "ISA", isa_names[isa]) < 0
        || PyModule_AddIntConstant(m, "MAX_THREADS", MAX_THREADS) < 0
        || PyModule_AddIntConstant(m, "MIN_ELEMENTS_PER_THREAD", MIN_ELEMENTS_PER_THREAD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
