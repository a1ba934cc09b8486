// System calls that the C library declares only under _GNU_SOURCE, which Swift's Glibc module does not define.
#ifndef LIVEAUDIO_CSYSTEMCALLS_H
#define LIVEAUDIO_CSYSTEMCALLS_H

#if defined(__linux__)
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

/// The real-time probe's scope hook (la_sync_probe_scope in libLiveAudioSyncProbe.so, which tests preload), or NULL
/// when it is not loaded: the I/O unit calls it with +1 and −1 around each device cycle's handler, so the probe
/// counts blocking calls made there and not the device's own waiting around it.
typedef void (*la_render_scope_hook)(int delta);
static inline la_render_scope_hook la_find_render_scope_hook(void) {
    return (la_render_scope_hook)dlsym(RTLD_DEFAULT, "la_sync_probe_scope");
}

/// The real-time probe's hook for a device's own waiting that is not a library call (la_sync_probe_device_call), or
/// NULL when the probe is not loaded: the virtual device calls it with +1 and −1 around its wait for the read-ahead
/// when it runs as fast as possible (its pacing), so the probe leaves that wait to the device as it does ALSA's and
/// JACK's own calls.
typedef void (*la_device_call_hook)(int delta);
static inline la_device_call_hook la_find_device_call_hook(void) {
    return (la_device_call_hook)dlsym(RTLD_DEFAULT, "la_sync_probe_device_call");
}

/// Starts writeback of a written file range without waiting for it (sync_file_range with
/// SYNC_FILE_RANGE_WRITE). Returns 0, or -1 with errno set.
static inline int la_start_writeback(int fd, long long offset, long long count) {
    return sync_file_range(fd, (off_t)offset, (off_t)count, SYNC_FILE_RANGE_WRITE);
}

/// The calling thread's own use of the machine so far: CPU time, user and system, in nanoseconds (its
/// CLOCK_THREAD_CPUTIME_ID, which counts up to the call; getrusage's times lag by up to a scheduler tick), and how
/// often it gave up its CPU waiting for something (voluntary context switches) or was made to (involuntary ones),
/// and the page faults it took (minor and major: memory touched for the first time, or paged in), from getrusage
/// with RUSAGE_THREAD. Returns 0, or -1 with errno set.
int la_thread_usage(long long *cpu_nanoseconds, long long *voluntary, long long *involuntary, long long *page_faults);

/// Gives the allocator's free memory back to the system (glibc's malloc_trim(0): the free top of every arena, and
/// the free pages within them): what a long-running host calls after freeing a lot at once, off any real-time
/// thread. Returns 1 when memory was given back.
static inline int la_release_free_memory(void) { return malloc_trim(0); }

/// Names the calling thread (at most 15 bytes are kept), for ps, top and debuggers.
static inline void la_set_thread_name(const char *name) { pthread_setname_np(pthread_self(), name); }
/// The calling thread's id in the kernel (what /proc/self/task lists).
static inline long la_thread_id(void) { return (long)syscall(SYS_gettid); }
/// Names another thread of this process: its creator, so the name is there when the creating call returns.
static inline void la_name_thread(pthread_t thread, const char *name) { pthread_setname_np(thread, name); }

/// The processors this thread may run on (its affinity mask: `taskset`, cpusets), at least 1.
static inline int la_allowed_cpus(void) {
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/// A non-blocking, close-on-exec eventfd (a counter one thread writes and another polls), or -1 with errno set.
static inline int la_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }
#else
typedef void (*la_render_scope_hook)(int delta);
static inline la_render_scope_hook la_find_render_scope_hook(void) { return 0; }
static inline void la_set_thread_name(const char *name) { (void)name; }
static inline void la_name_thread(pthread_t thread, const char *name) { (void)thread; (void)name; }
static inline long la_thread_id(void) { return (long)(uintptr_t)pthread_self(); }
static inline int la_allowed_cpus(void) { long n = sysconf(_SC_NPROCESSORS_ONLN); return n > 0 ? (int)n : 1; }
static inline int la_eventfd(void) { return -1; }
int la_thread_usage(long long *cpu_nanoseconds, long long *voluntary, long long *involuntary, long long *page_faults);
static inline int la_start_writeback(int fd, long long offset, long long count) {
    (void)fd; (void)offset; (void)count;
    return 0;
}
#endif

#endif
