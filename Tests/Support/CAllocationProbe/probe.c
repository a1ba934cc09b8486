#define _GNU_SOURCE
#include "probe.h"
#include <dlfcn.h>
#include <stdatomic.h>
#include <execinfo.h>
#include <stdlib.h>

static _Thread_local int watched;
static _Atomic int64_t count;
static _Atomic int64_t bytes;

// The sync probe (libLiveAudioSyncProbe.so), when it is preloaded: it counts lock waits and frees on the same
// threads, and says when a thread is inside a device library's call (whose allocations are the device's).
static void (*sync_watch)(int);
static int (*sync_in_device)(void);
static int64_t (*sync_lock_waits)(void);
static int64_t (*sync_frees)(void);
static int64_t (*sync_blocking_calls)(void);
static int64_t (*sync_scope_entries)(void);
static int64_t (*sync_device_controls)(void);
static int64_t (*sync_watched_device_controls)(void);
static void (*sync_reset)(void);

static void resolve_sync_probe(void) {
    static int resolved;
    if (resolved) return;
    resolved = 1;
    sync_watch = (void (*)(int))dlsym(RTLD_DEFAULT, "la_sync_probe_watch");
    sync_in_device = (int (*)(void))dlsym(RTLD_DEFAULT, "la_sync_probe_in_device");
    sync_lock_waits = (int64_t (*)(void))dlsym(RTLD_DEFAULT, "la_sync_probe_lock_waits");
    sync_frees = (int64_t (*)(void))dlsym(RTLD_DEFAULT, "la_sync_probe_frees");
    sync_blocking_calls = (int64_t (*)(void))dlsym(RTLD_DEFAULT, "la_sync_probe_blocking_calls");
    sync_scope_entries = (int64_t (*)(void))dlsym(RTLD_DEFAULT, "la_sync_probe_scope_entries");
    sync_device_controls = (int64_t (*)(void))dlsym(RTLD_DEFAULT, "la_sync_probe_device_controls");
    sync_watched_device_controls = (int64_t (*)(void))dlsym(RTLD_DEFAULT, "la_sync_probe_watched_device_controls");
    sync_reset = (void (*)(void))dlsym(RTLD_DEFAULT, "la_sync_probe_reset");
}

// Runs inside the allocator: must not allocate. Thread-local flags and two relaxed atomic adds.
void allocation_probe_hook(size_t size) {
    if (watched && !(sync_in_device && sync_in_device())) {
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

void allocation_probe_watch_this_thread(int on) {
    watched = on;
    if (sync_watch) sync_watch(on);
}
int64_t allocation_probe_count(void) { return atomic_load(&count); }
int64_t allocation_probe_bytes(void) { return atomic_load(&bytes); }
void allocation_probe_reset(void) {
    resolve_sync_probe();
    atomic_store(&count, 0);
    atomic_store(&bytes, 0);
    if (sync_reset) sync_reset();
}
int allocation_probe_sees_locks(void) {
    resolve_sync_probe();
    return sync_lock_waits != 0;
}
int64_t allocation_probe_lock_waits(void) { return sync_lock_waits ? sync_lock_waits() : -1; }
int64_t allocation_probe_frees(void) { return sync_frees ? sync_frees() : -1; }
int64_t allocation_probe_blocking_calls(void) { return sync_blocking_calls ? sync_blocking_calls() : -1; }
int64_t allocation_probe_scope_entries(void) { return sync_scope_entries ? sync_scope_entries() : -1; }
int64_t allocation_probe_device_controls(void) { return sync_device_controls ? sync_device_controls() : -1; }
int64_t allocation_probe_watched_device_controls(void) {
    return sync_watched_device_controls ? sync_watched_device_controls() : -1;
}

#include <malloc.h>
int64_t allocation_probe_heap_in_use(void) { return (int64_t)mallinfo2().uordblks; }
