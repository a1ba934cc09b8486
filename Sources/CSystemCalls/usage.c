// The calling thread's use of the machine (see CSystemCalls.h). Here and not in the header: RUSAGE_THREAD needs
// _GNU_SOURCE in <sys/resource.h>, whose enum would then differ from the one Swift's Glibc module sees.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "CSystemCalls.h"

#if defined(__linux__)
#include <sys/resource.h>
#include <time.h>

int la_thread_usage(long long *cpu_nanoseconds, long long *voluntary, long long *involuntary, long long *page_faults) {
    struct timespec cpu;
    struct rusage usage;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) != 0 || getrusage(RUSAGE_THREAD, &usage) != 0) return -1;
    *cpu_nanoseconds = (long long)cpu.tv_sec * 1000000000LL + (long long)cpu.tv_nsec;
    *voluntary = usage.ru_nvcsw;
    *involuntary = usage.ru_nivcsw;
    *page_faults = usage.ru_minflt + usage.ru_majflt;
    return 0;
}
#else
int la_thread_usage(long long *cpu_nanoseconds, long long *voluntary, long long *involuntary, long long *page_faults) {
    *cpu_nanoseconds = 0;
    *voluntary = 0;
    *involuntary = 0;
    *page_faults = 0;
    return -1;
}
#endif
