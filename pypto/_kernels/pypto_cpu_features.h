/* The run-time CPU feature table: what the running CPU and operating system support.
 *
 * Included only by features.pyx, which is always compiled for the architecture's baseline
 * (no -march): this code must run on every CPU, since it is what decides whether code built
 * for a higher level may be loaded at all (pypto/_kernels/levels.py holds the levels).
 *
 * x86: CPUID bits, and XGETBV for the register state the OS saves (a CPU can have AVX-512 while
 * the OS does not enable its registers; then AVX-512 code faults). AArch64 on Linux: the
 * kernel's HWCAP words. Elsewhere the table reports every feature absent.
 */
#ifndef PYPTO_CPU_FEATURES_H
#define PYPTO_CPU_FEATURES_H

#include <stdint.h>

typedef struct {
    const char *name;
    int present;
} pypto_feature;

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

enum { PYPTO_EAX, PYPTO_EBX, PYPTO_ECX, PYPTO_EDX, PYPTO_XCR0 };

/* (name, CPUID leaf, subleaf, register, mask): all bits of mask set means present. */
static const struct {
    const char *name;
    unsigned leaf, subleaf;
    int reg;
    uint32_t mask;
} pypto_x86_bits[] = {
    {"sse2", 1, 0, PYPTO_EDX, 1u << 26},
    {"sse3", 1, 0, PYPTO_ECX, 1u << 0},
    {"ssse3", 1, 0, PYPTO_ECX, 1u << 9},
    {"fma", 1, 0, PYPTO_ECX, 1u << 12},
    {"cx16", 1, 0, PYPTO_ECX, 1u << 13},
    {"sse4_1", 1, 0, PYPTO_ECX, 1u << 19},
    {"sse4_2", 1, 0, PYPTO_ECX, 1u << 20},
    {"movbe", 1, 0, PYPTO_ECX, 1u << 22},
    {"popcnt", 1, 0, PYPTO_ECX, 1u << 23},
    {"xsave", 1, 0, PYPTO_ECX, 1u << 26},
    {"osxsave", 1, 0, PYPTO_ECX, 1u << 27},
    {"avx", 1, 0, PYPTO_ECX, 1u << 28},
    {"f16c", 1, 0, PYPTO_ECX, 1u << 29},
    {"bmi1", 7, 0, PYPTO_EBX, 1u << 3},
    {"avx2", 7, 0, PYPTO_EBX, 1u << 5},
    {"bmi2", 7, 0, PYPTO_EBX, 1u << 8},
    {"avx512f", 7, 0, PYPTO_EBX, 1u << 16},
    {"avx512dq", 7, 0, PYPTO_EBX, 1u << 17},
    {"avx512cd", 7, 0, PYPTO_EBX, 1u << 28},
    {"avx512bw", 7, 0, PYPTO_EBX, 1u << 30},
    {"avx512vl", 7, 0, PYPTO_EBX, 1u << 31},
    {"avx512_bf16", 7, 1, PYPTO_EAX, 1u << 5},
    /* it also marks the CPUs whose dot product is slow (levels.py, PASSED_OVER) */
    {"amx_bf16", 7, 0, PYPTO_EDX, 1u << 22},
    {"amx_tile", 7, 0, PYPTO_EDX, 1u << 24},
    {"lahf_lm", 0x80000001u, 0, PYPTO_ECX, 1u << 0},
    {"lzcnt", 0x80000001u, 0, PYPTO_ECX, 1u << 5},
    /* XCR0: SSE and AVX state; then also opmask, upper ZMM0-15 and ZMM16-31 state */
    {"os_avx", 0, 0, PYPTO_XCR0, 0x6u},
    {"os_avx512", 0, 0, PYPTO_XCR0, 0xe6u},
    /* XCR0 bits 17 and 18: the OS saves tile configuration and tile data (a process still
     * needs its permission for the data: pypto_request_amx) */
    {"os_amx", 0, 0, PYPTO_XCR0, 0x60000u},
};
enum { PYPTO_N_FEATURES = sizeof pypto_x86_bits / sizeof pypto_x86_bits[0] };

/* CPUID leaf/subleaf, or all zero when the CPU does not have that leaf (or subleaf). */
static void pypto_cpuid(unsigned leaf, unsigned subleaf, uint32_t r[4])
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    unsigned max_leaf = __get_cpuid_max(leaf & 0x80000000u, 0);
    r[0] = r[1] = r[2] = r[3] = 0;
    if (max_leaf < leaf)
        return;
    if (subleaf > 0) {  /* leaf 7: EAX of subleaf 0 is the highest subleaf */
        __cpuid_count(leaf, 0, a, b, c, d);
        if (a < subleaf)
            return;
    }
    __cpuid_count(leaf, subleaf, a, b, c, d);
    r[0] = a; r[1] = b; r[2] = c; r[3] = d;
}

static void pypto_cpu_features(pypto_feature *out)
{
    uint32_t r[4], basic[4];
    uint32_t xcr0 = 0;
    pypto_cpuid(1, 0, basic);
    if (basic[PYPTO_ECX] & (1u << 27)) {  /* OSXSAVE: XGETBV is allowed */
        uint32_t lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        (void)hi;
        xcr0 = lo;
    }
    for (int i = 0; i < PYPTO_N_FEATURES; i++) {
        uint32_t word;
        if (pypto_x86_bits[i].reg == PYPTO_XCR0) {
            word = xcr0;
        } else {
            pypto_cpuid(pypto_x86_bits[i].leaf, pypto_x86_bits[i].subleaf, r);
            word = r[pypto_x86_bits[i].reg];
        }
        out[i].name = pypto_x86_bits[i].name;
        out[i].present = (word & pypto_x86_bits[i].mask) == pypto_x86_bits[i].mask;
    }
}

#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

/* Linux's arm64 HWCAP bits (uapi asm/hwcap.h); 0 = HWCAP, 1 = HWCAP2. */
static const struct {
    const char *name;
    int word;
    unsigned long bit;
} pypto_arm_bits[] = {
    {"fp", 0, 1ul << 0},
    {"asimd", 0, 1ul << 1},
    {"fphp", 0, 1ul << 9},
    {"asimdhp", 0, 1ul << 10},
    {"asimddp", 0, 1ul << 20},
    {"sve", 0, 1ul << 22},
    {"i8mm", 1, 1ul << 13},
    {"bf16", 1, 1ul << 14},
};
enum { PYPTO_N_FEATURES = sizeof pypto_arm_bits / sizeof pypto_arm_bits[0] };

static void pypto_cpu_features(pypto_feature *out)
{
    unsigned long words[2] = {getauxval(AT_HWCAP), getauxval(AT_HWCAP2)};
    for (int i = 0; i < PYPTO_N_FEATURES; i++) {
        out[i].name = pypto_arm_bits[i].name;
        out[i].present = (words[pypto_arm_bits[i].word] & pypto_arm_bits[i].bit) != 0;
    }
}

#else
enum { PYPTO_N_FEATURES = 1 };

static void pypto_cpu_features(pypto_feature *out)
{
    out[0].name = "unknown_architecture";
    out[0].present = 0;
}
#endif

#if defined(__linux__) && defined(__x86_64__)
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#define PYPTO_ARCH_GET_XCOMP_PERM 0x1022
#define PYPTO_ARCH_REQ_XCOMP_PERM 0x1023
#define PYPTO_XFEATURE_XTILEDATA 18

/* 0 once this process may use AMX tile data (asked of the kernel if not yet granted, then
 * read back), else the errno of the refusal: Linux gives tile data only to processes that
 * ask (Documentation/arch/x86/xstate.rst); a tile instruction without it ends in SIGILL. */
static int pypto_request_amx(void)
{
    unsigned long granted = 0;
    if (syscall(SYS_arch_prctl, PYPTO_ARCH_GET_XCOMP_PERM, &granted) == 0
        && (granted & (1ul << PYPTO_XFEATURE_XTILEDATA)))
        return 0;
    if (syscall(SYS_arch_prctl, PYPTO_ARCH_REQ_XCOMP_PERM, PYPTO_XFEATURE_XTILEDATA) != 0)
        return errno ? errno : EPERM;
    granted = 0;
    if (syscall(SYS_arch_prctl, PYPTO_ARCH_GET_XCOMP_PERM, &granted) != 0)
        return errno ? errno : EPERM;
    return (granted & (1ul << PYPTO_XFEATURE_XTILEDATA)) ? 0 : EPERM;
}
#else
#include <errno.h>
static int pypto_request_amx(void) { return ENOSYS; /* no AMX outside x86-64 Linux */ }
#endif


#endif
