#include "probe.h"
#include <stdatomic.h>
#include <execinfo.h>
#include <stdlib.h>

static _Thread_local int watched;
static _Atomic int64_t count;
static _Atomic int64_t bytes;

// Runs inside the allocator: must not allocate. A thread-local flag and two relaxed atomic adds.
void allocation_probe_hook(size_t size) {
    if (watched) {
        atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&bytes, (int64_t)size, memory_order_relaxed);
        // PROBE_TRACE=1 prints the first two offending stacks (backtrace_symbols_fd does not allocate).
        static _Atomic int traced;
        if (getenv("PROBE_TRACE") && atomic_fetch_add(&traced, 1) < 2) {
            watched = 0;
            void *frames[40];
            int n = backtrace(frames, 40);
            backtrace_symbols_fd(frames, n, 2);
            watched = 1;
        }
    }
}

void allocation_probe_watch_this_thread(int on) { watched = on; }
int64_t allocation_probe_count(void) { return atomic_load(&count); }
int64_t allocation_probe_bytes(void) { return atomic_load(&bytes); }
void allocation_probe_reset(void) {
    atomic_store(&count, 0);
    atomic_store(&bytes, 0);
}
