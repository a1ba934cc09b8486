// Denormal handling for the render thread: flush-to-zero and denormals-are-zero on x86 (MXCSR bits 15 and 6),
// flush-to-zero on AArch64 (FPCR bit 24). Recursive filters and reverb tails that decay toward zero would
// otherwise fall into denormal numbers, which cost a hundred times more per operation on x86.
#ifndef LIVEAUDIO_CFLOATENVIRONMENT_H
#define LIVEAUDIO_CFLOATENVIRONMENT_H

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
static inline uint64_t la_float_environment_enter(void) {
    unsigned int old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u);
    return old;
}
static inline void la_float_environment_leave(uint64_t saved) { _mm_setcsr((unsigned int)saved); }
#elif defined(__aarch64__)
static inline uint64_t la_float_environment_enter(void) {
    uint64_t old;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(old));
    __asm__ __volatile__("msr fpcr, %0" : : "r"(old | (1ull << 24)));
    return old;
}
static inline void la_float_environment_leave(uint64_t saved) { __asm__ __volatile__("msr fpcr, %0" : : "r"(saved)); }
#else
static inline uint64_t la_float_environment_enter(void) { return 0; }
static inline void la_float_environment_leave(uint64_t saved) { (void)saved; }
#endif

#endif
