# The kernel module's declarations: its cimports, the C it calls from this folder's headers
# (conversions, memory helpers, the ISA level, the three kernel shapes, the peak loop) and the
# OpenMP probe. A .pxi, not a .pxd: Cython reads a .pxd only for the module named after it, and
# one body is built as four modules (dgrad_<level>).

from cpython.buffer cimport (PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE, PyBuffer_Release,
                             PyObject_GetBuffer)
from cpython.exc cimport PyErr_CheckSignals
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset

cdef extern from "pypto_convert.h" nogil:
    void pypto_widen(const uint16_t *src, float *dst, int64_t n, int dtype)
    void pypto_narrow(const float *src, uint16_t *dst, int64_t n, int dtype)
    uint16_t pypto_float_to_half(float f)
    float pypto_half_to_float(uint16_t h)
    float pypto_bf16_to_float(uint16_t h)
    uint16_t pypto_float_to_bf16(float f)

cdef extern from "pypto_memops.h" nogil:
    void pypto_gather32(const void *src, int64_t stride, int64_t n, void *dst)
    void pypto_pair16(const uint16_t *a, const uint16_t *b, int64_t n, uint32_t *dst)
    void pypto_magnitudes(const uint16_t *x, int64_t n, uint16_t *least_minus_one,
                          uint16_t *most)
    int pypto_bf16_least_exponent(uint16_t least_minus_one)
    void pypto_frame_row_f32(const uint16_t *src, int64_t lo, int64_t hi, int64_t n, float *dst,
                             int dtype)
    void pypto_zero32(void *dst, int64_t n)
    void pypto_zero_every(uint16_t *dst, int64_t n, int64_t step)
    void pypto_prefetch_row(const uint16_t *p, int64_t n, int for_write)
    void pypto_frame_row_pairs(const uint16_t *a, const uint16_t *b, int64_t lo, int64_t hi,
                               int64_t n, uint32_t *dst)

cdef extern from "pypto_fpenv.h" nogil:
    ctypedef unsigned long long pypto_fpenv
    pypto_fpenv pypto_fp_enter()
    void pypto_fp_leave(pypto_fpenv saved)

cdef extern from "pypto_isa.h" nogil:
    int __builtin_popcountll(unsigned long long bits)
    enum: PYPTO_MR
    enum: PYPTO_NR
    enum: PYPTO_NR_HALF
    enum: PYPTO_NR_QUARTER
    enum: PYPTO_HAVE_BF16_DOT
    enum: PYPTO_HAVE_CHAN_VEC
    enum: PYPTO_HAVE_FEW
    enum: PYPTO_FEW_MR
    enum: PYPTO_FEW_NR
    enum: PYPTO_CV_M
    enum: PYPTO_CV_N
    enum: PYPTO_CV_STORE
    enum: PYPTO_CV_L0_BYTES
    enum: PYPTO_HAVE_CV_WIDE
    enum: PYPTO_HAVE_CV_WIDE_F32
    enum: PYPTO_PIXEL_COLS
    enum: PYPTO_PIXEL_K
    enum: PYPTO_SERIAL_MACS
    enum: PYPTO_CVW_M
    enum: PYPTO_CVW_N
    enum: PYPTO_HAVE_CV_HALF
    enum: PYPTO_HAVE_CV_PAIR
    enum: PYPTO_HAVE_CV_STREAM
    enum: PYPTO_CV_STREAM_CH
    const char *pypto_isa_name()

cdef extern from "pypto_pixel.h" nogil:
    void pypto_pack_a(int64_t kc, const void *const *a_rows, const int64_t *runs, int n_runs,
                      int64_t filled, uint32_t *a)
    void pypto_ukernel_f32(int64_t kc, const float *w, const float *const *a_rows, int64_t j0,
                           float *c, int64_t ldc)
    void pypto_ukernel_bf16(int64_t kc_pairs, const uint32_t *w, const uint32_t *const *a_rows,
                            int64_t j0, float *c, int64_t ldc)
    void pypto_ukernel_f32_half(int64_t kc, const float *w, const float *const *a_rows,
                                int64_t j0, float *c, int64_t ldc)
    void pypto_ukernel_bf16_half(int64_t kc_pairs, const uint32_t *w,
                                 const uint32_t *const *a_rows, int64_t j0, float *c, int64_t ldc)
    void pypto_ukernel_f32_quarter(int64_t kc, const float *w, const float *w_next,
                                   const float *const *a_rows, int64_t j0, float *c, int64_t ldc)

cdef extern from "pypto_few.h" nogil:
    void pypto_ukernel_few_f32(int64_t kc, const float *w, const float *const *a_rows, int64_t j0,
                               float *c, int64_t ldc)
    void pypto_ukernel_few_bf16(int64_t kc_pairs, const uint32_t *w,
                                const uint32_t *const *a_rows, int64_t j0, float *c, int64_t ldc)

cdef extern from "pypto_chanvec.h" nogil:
    ctypedef struct pypto_taps:
        uint64_t mask
        int64_t first, count
    void pypto_ukernel_cv_f32(int64_t kc, const float *w, const float *const *a_rows,
                              const int64_t *offs, float *c, int64_t ldc, int first,
                              const pypto_taps *taps)
    void pypto_ukernel_cv_bf16(int64_t kc_pairs, const uint32_t *w, const uint32_t *const *a_rows,
                               const int64_t *offs, float *c, int64_t ldc, int first,
                               const pypto_taps *taps)
    void pypto_ukernel_cvw_bf16(int64_t kc_pairs, const uint32_t *w, const uint32_t *const *a_rows,
                                const int64_t *offs, float *c, int64_t ldc, int first,
                                const pypto_taps *taps)
    void pypto_ukernel_cvw_f32(int64_t kc, const float *w, const float *const *a_rows,
                               const int64_t *offs, float *c, int64_t ldc, int first,
                               const pypto_taps *taps)
    void pypto_ukernel_cvh_f32(int64_t kc, const float *w, const float *const *a_rows,
                               const int64_t *offs, float *c, int64_t ldc, int first,
                               const pypto_taps *taps)
    void pypto_ukernel_cvh_bf16(int64_t kc_pairs, const uint32_t *w, const uint32_t *const *a_rows,
                                const int64_t *offs, float *c, int64_t ldc, int first,
                                const pypto_taps *taps)
    void pypto_cv_store_block(const float *acc, int64_t ldc, int n_pos, int n_ch, uint16_t *dst,
                              int64_t ch_stride, int64_t step, int dtype)
    void pypto_cv_store_pair(const float *acc, const float *acc_b, int64_t ldc, int n_pos,
                             int n_pos_b, int n_ch, uint16_t *dst, int64_t ch_stride, int dtype)
    void pypto_cv_stream_run(const float *acc, int64_t ldc, int64_t n, int n_ch, uint16_t *dst,
                             int64_t ch_stride, int dtype)
    void pypto_stream_fence()

cdef extern from "pypto_peak.h" nogil:
    double pypto_peak_madd(int64_t iterations)
    double pypto_peak_bf16_dot(int64_t iterations)

cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define PYPTO_HAVE_OPENMP 1
    static double pypto_seconds(void) { return omp_get_wtime(); }
    #else
    #define PYPTO_HAVE_OPENMP 0
    #include <time.h>
    /* one thread runs the team's items: its processor time is the time passed */
    static double pypto_seconds(void) { return (double)clock() / CLOCKS_PER_SEC; }
    #endif
    """
    int PYPTO_HAVE_OPENMP
    double pypto_seconds() nogil

cdef extern from *:
    """
    /* Ctrl-C inside a parallel region, from the calling thread (the team's thread 0, which
       holds the caller's thread state): the GIL for this check alone, not for the team (a
       `with gil` block in a prange makes every thread of the team take the GIL when the
       region starts). A handler's exception stays set on the thread state; pypto_raise_if
       hands it to Cython after the region. */
    static void pypto_check_signals(volatile int *stop) {
        PyGILState_STATE state = PyGILState_Ensure();
        if (PyErr_CheckSignals() < 0)
            *stop = 1;
        PyGILState_Release(state);
    }
    static int pypto_stopped(const volatile int *stop) { return *stop; }
    static int pypto_raise_if(int stop) { return stop ? -1 : 0; }
    /* The next index of a shared counter below end, or -1 (the team's threads take work
       from each other's counters) */
    static int64_t pypto_take(int64_t *next, int64_t end) {
        if (__atomic_load_n(next, __ATOMIC_RELAXED) >= end)
            return -1;
        const int64_t i = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
        return i < end ? i : -1;
    }
    /* A flag shared by a team: claimed from one value to another by one thread only; set
       after the thread's writes, seen set with them (release, acquire) */
    static int pypto_flag_claim(int64_t *flag, int64_t from, int64_t to) {
        return __atomic_compare_exchange_n(flag, &from, to, 0, __ATOMIC_RELAXED,
                                           __ATOMIC_RELAXED);
    }
    static void pypto_flag_set(int64_t *flag, int64_t value) {
        __atomic_store_n(flag, value, __ATOMIC_RELEASE);
    }
    static int pypto_flag_is(int64_t *flag, int64_t value) {
        return __atomic_load_n(flag, __ATOMIC_ACQUIRE) == value;
    }
    static int pypto_flag_below(int64_t *flag, int64_t value) {
        return __atomic_load_n(flag, __ATOMIC_RELAXED) < value;
    }
    /* A spin-wait's step: a pause, and every 1024th the processor given up (a waiting thread
       must not hold a core that the thread it waits for needs: more threads than cores, as
       when another library's team still spins) */
    #if defined(__unix__) || defined(__APPLE__)
    #include <sched.h>
    #define PYPTO_YIELD() sched_yield()
    #else
    #define PYPTO_YIELD() ((void)0)
    #endif
    static void pypto_relax(int64_t spins) {
        if ((spins & 1023) == 1023)
            PYPTO_YIELD();
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield");
    #endif
    }
    """
    void pypto_check_signals(int *stop) nogil
    int pypto_stopped(const int *stop) nogil
    int pypto_raise_if(int stop) except -1
    int64_t pypto_take(int64_t *next, int64_t end) nogil
    int pypto_flag_claim(int64_t *flag, int64_t fr, int64_t to) nogil
    void pypto_flag_set(int64_t *flag, int64_t value) nogil
    int pypto_flag_is(int64_t *flag, int64_t value) nogil
    int pypto_flag_below(int64_t *flag, int64_t value) nogil
    void pypto_relax(int64_t spins) nogil
