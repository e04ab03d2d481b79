/* Every fp32 bit pattern through the vector narrowing (AVX-512: pypto_narrow16, 16 at a time;
 * AVX2 + F16C: pypto_narrow8, 8 at a time; by the -march it is built with) and through the
 * scalar functions it replaces: the results must be identical.
 * Built and run by tests/test_narrowing.py; exit status 1 on any difference. */
#include <stdio.h>
#include <string.h>

#include "pypto_convert.h"

int main(void)
{
    long mismatches = 0;
    for (int dtype = 0; dtype < 2; dtype++) {
        for (uint64_t base = 0; base < (1ull << 32); base += 16) {
            float f[16];
            uint16_t got[16];
            for (int j = 0; j < 16; j++) {
                uint32_t u = (uint32_t)(base + j);
                memcpy(&f[j], &u, 4);
            }
#ifdef __AVX512F__
            _mm256_storeu_si256((__m256i *)got, pypto_narrow16(_mm512_loadu_ps(f), dtype));
#else
            _mm_storeu_si128((__m128i *)got, pypto_narrow8(_mm256_loadu_ps(f), dtype));
            _mm_storeu_si128((__m128i *)(got + 8), pypto_narrow8(_mm256_loadu_ps(f + 8), dtype));
#endif
            for (int j = 0; j < 16; j++) {
                uint16_t want = dtype == PYPTO_BF16 ? pypto_float_to_bf16(f[j])
                                                    : pypto_float_to_half(f[j]);
                if (got[j] != want && mismatches++ < 8)
                    printf("%s: 0x%08llx -> 0x%04x, scalar 0x%04x\n", dtype ? "bf16" : "fp16",
                           (unsigned long long)(base + j), got[j], want);
            }
        }
    }
    printf("%ld mismatches over 2 x 2^32 patterns\n", mismatches);
    return mismatches != 0;
}
