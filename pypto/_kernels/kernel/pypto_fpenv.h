/* The floating-point environment the kernel computes in: round to nearest even, subnormals
 * kept (no flush to zero of results, no denormals-are-zero on inputs), every exception masked.
 * A thread may come with FTZ/DAZ set (an extension built with -ffast-math sets them when it is
 * loaded) or another rounding mode; then pypto's bits would depend on what else the process
 * loaded. Each piece of kernel work enters this environment on its own thread (MXCSR and FPCR
 * are per thread, and an OpenMP team's threads keep theirs) and puts the thread's own back
 * after, sticky flags included. */
#ifndef PYPTO_FPENV_H
#define PYPTO_FPENV_H

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
typedef unsigned int pypto_fpenv;
#define PYPTO_MXCSR_IEEE 0x1F80u   /* the six exception masks; RNE; FTZ (15) and DAZ (6) off */
static inline pypto_fpenv pypto_fp_enter(void)
{
    const unsigned int saved = _mm_getcsr();
    if (saved != PYPTO_MXCSR_IEEE)
        _mm_setcsr(PYPTO_MXCSR_IEEE);
    return saved;
}
static inline void pypto_fp_leave(pypto_fpenv saved)
{
    if (_mm_getcsr() != saved)
        _mm_setcsr(saved);
}
#elif defined(__aarch64__)
#include <stdint.h>
typedef uint64_t pypto_fpenv;
/* FPCR 0: RNE, no flush (FZ, FZ16, FIZ), no default NaN, no alternate handling, no traps */
static inline pypto_fpenv pypto_fp_enter(void)
{
    uint64_t saved;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(saved));
    if (saved != 0)
        __asm__ __volatile__("msr fpcr, %0" : : "r"((uint64_t)0));
    return saved;
}
static inline void pypto_fp_leave(pypto_fpenv saved)
{
    if (saved != 0)
        __asm__ __volatile__("msr fpcr, %0" : : "r"(saved));
}
#else
typedef int pypto_fpenv;   /* other architectures: the environment as the thread has it */
static inline pypto_fpenv pypto_fp_enter(void) { return 0; }
static inline void pypto_fp_leave(pypto_fpenv saved) { (void)saved; }
#endif

#endif
