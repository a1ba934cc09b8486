// See include/sync_probe.h. Every wrapper checks two thread-local flags and forwards to the next definition
// (RTLD_NEXT): the malloc interposer's for free, the C library's or the device library's for the rest.
#define _GNU_SOURCE
#include "sync_probe.h"
#include <dlfcn.h>
#include <execinfo.h>
#include <stdlib.h>
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Thread_local int watched;
static _Thread_local int in_device;
/// Inside the I/O unit's handler for a device cycle (la_sync_probe_scope, called by LiveAudio itself).
static _Thread_local int in_scope;
static _Atomic int64_t lock_waits;
static _Atomic int64_t frees;
static _Atomic int64_t blocking_calls;
static _Atomic int64_t scope_entries;

void la_sync_probe_watch(int on) { watched = on; }
int la_sync_probe_in_device(void) { return in_device; }
int64_t la_sync_probe_lock_waits(void) { return atomic_load(&lock_waits); }
int64_t la_sync_probe_frees(void) { return atomic_load(&frees); }
int64_t la_sync_probe_blocking_calls(void) { return atomic_load(&blocking_calls); }
int64_t la_sync_probe_scope_entries(void) { return atomic_load(&scope_entries); }
void la_sync_probe_scope(int delta) {
    in_scope += delta;
    if (delta > 0 && watched) atomic_fetch_add_explicit(&scope_entries, 1, memory_order_relaxed);
}
void la_sync_probe_device_call(int delta) { in_device += delta; }
void la_sync_probe_reset(void) {
    atomic_store(&lock_waits, 0);
    atomic_store(&frees, 0);
    atomic_store(&blocking_calls, 0);
    atomic_store(&scope_entries, 0);
}

static inline int counting(void) { return watched && !in_device; }

// With LA_SYNC_PROBE_BACKTRACE set, each counted wait prints the stack that made it (to find a lock's owner); the
// printing itself is not counted.
static int want_backtrace = -1;
static void print_backtrace(void) {
    if (want_backtrace < 0) want_backtrace = getenv("LA_SYNC_PROBE_BACKTRACE") != NULL;
    if (!want_backtrace) return;
    watched = 0;
    void *frames[32];
    int n = backtrace(frames, 32);
    static const char line[] = "--- counted lock wait:\n";
    (void)!write(2, line, sizeof line - 1);
    backtrace_symbols_fd(frames, n, 2);
    watched = 1;
}

static inline void count_wait(void) {
    if (counting()) {
        atomic_fetch_add_explicit(&lock_waits, 1, memory_order_relaxed);
        print_backtrace();
    }
}

// A system call that can block (I/O, waiting, sleeping, yielding, opening and closing), made by the handler of a
// device cycle on a watched thread, outside a device library's call. The thread's waiting for its device around the
// handler (the virtual device's file I/O and pacing, ALSA's poll inside snd_pcm_wait) is its job and is not counted.
static _Thread_local int printing_backtrace;
static inline void count_blocking(const char *what) {
    if (watched && in_scope && !in_device && !printing_backtrace) {
        atomic_fetch_add_explicit(&blocking_calls, 1, memory_order_relaxed);
        if (want_backtrace < 0) want_backtrace = getenv("LA_SYNC_PROBE_BACKTRACE") != NULL;
        if (want_backtrace) {
            printing_backtrace = 1;
            void *frames[32];
            int n = backtrace(frames, 32);
            static const char line[] = "--- counted blocking call: ";
            (void)!syscall(SYS_write, 2, line, sizeof line - 1);
            (void)!syscall(SYS_write, 2, what, strlen(what));
            (void)!syscall(SYS_write, 2, "\n", 1);
            backtrace_symbols_fd(frames, n, 2);
            printing_backtrace = 0;
        }
    }
}

#define NEXT(name) \
    static __typeof__(name) *next_##name; \
    if (!next_##name) next_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

// free: counted before it is forwarded; a free while resolving (dlsym may free) is leaked, not recursed into.
static void (*next_free)(void *);
static _Thread_local int resolving_free;
void free(void *p) {
    if (!next_free) {
        if (resolving_free) return;
        resolving_free = 1;
        next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
        resolving_free = 0;
    }
    if (p && counting()) atomic_fetch_add_explicit(&frees, 1, memory_order_relaxed);
    next_free(p);
}

__attribute__((constructor)) static void resolve_early(void) {
    resolving_free = 1;
    next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    resolving_free = 0;
}

int pthread_mutex_lock(pthread_mutex_t *m) {
    NEXT(pthread_mutex_lock);
    count_wait();
    return next_pthread_mutex_lock(m);
}
int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t) {
    NEXT(pthread_mutex_timedlock);
    count_wait();
    return next_pthread_mutex_timedlock(m, t);
}
int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    NEXT(pthread_cond_wait);
    count_wait();
    return next_pthread_cond_wait(c, m);
}
int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t) {
    NEXT(pthread_cond_timedwait);
    count_wait();
    return next_pthread_cond_timedwait(c, m, t);
}
int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
    NEXT(pthread_rwlock_rdlock);
    count_wait();
    return next_pthread_rwlock_rdlock(l);
}
int pthread_rwlock_wrlock(pthread_rwlock_t *l) {
    NEXT(pthread_rwlock_wrlock);
    count_wait();
    return next_pthread_rwlock_wrlock(l);
}
int sem_wait(sem_t *s) {
    NEXT(sem_wait);
    count_wait();
    return next_sem_wait(s);
}
int sem_timedwait(sem_t *s, const struct timespec *t) {
    NEXT(sem_timedwait);
    count_wait();
    return next_sem_timedwait(s, t);
}

// Swift's Mutex and other runtimes wait on futexes directly: the waits (not the wakes) count.
long syscall(long number, ...) {
    NEXT(syscall);
    va_list ap;
    va_start(ap, number);
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_futex) {
        int op = (int)a[1] & FUTEX_CMD_MASK;
        if (op == FUTEX_WAIT || op == FUTEX_WAIT_BITSET || op == FUTEX_LOCK_PI
#ifdef FUTEX_LOCK_PI2
            || op == FUTEX_LOCK_PI2
#endif
        )
            count_wait();
    }
    return next_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

// Blocking system calls. Each wrapper counts, then forwards to the C library's definition.
#define BLOCKING(ret, name, params, args) \
    ret name params { \
        static ret(*next) params; \
        if (!next) next = (ret(*) params)dlsym(RTLD_NEXT, #name); \
        count_blocking(#name); \
        return next args; \
    }
BLOCKING(ssize_t, read, (int fd, void *b, size_t n), (fd, b, n))
BLOCKING(ssize_t, write, (int fd, const void *b, size_t n), (fd, b, n))
BLOCKING(ssize_t, pread, (int fd, void *b, size_t n, off_t o), (fd, b, n, o))
BLOCKING(ssize_t, pwrite, (int fd, const void *b, size_t n, off_t o), (fd, b, n, o))
BLOCKING(ssize_t, pread64, (int fd, void *b, size_t n, off_t o), (fd, b, n, o))
BLOCKING(ssize_t, pwrite64, (int fd, const void *b, size_t n, off_t o), (fd, b, n, o))
BLOCKING(ssize_t, readv, (int fd, const struct iovec *v, int n), (fd, v, n))
BLOCKING(ssize_t, writev, (int fd, const struct iovec *v, int n), (fd, v, n))
BLOCKING(int, poll, (struct pollfd *f, nfds_t n, int t), (f, n, t))
BLOCKING(int, ppoll, (struct pollfd *f, nfds_t n, const struct timespec *t, const sigset_t *m), (f, n, t, m))
BLOCKING(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t), (n, r, w, e, t))
BLOCKING(int, pselect, (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t, const sigset_t *m), (n, r, w, e, t, m))
BLOCKING(int, epoll_wait, (int fd, struct epoll_event *e, int n, int t), (fd, e, n, t))
BLOCKING(int, epoll_pwait, (int fd, struct epoll_event *e, int n, int t, const sigset_t *m), (fd, e, n, t, m))
BLOCKING(int, nanosleep, (const struct timespec *r, struct timespec *m), (r, m))
BLOCKING(int, clock_nanosleep, (clockid_t c, int f, const struct timespec *r, struct timespec *m), (c, f, r, m))
BLOCKING(int, usleep, (useconds_t u), (u))
BLOCKING(unsigned int, sleep, (unsigned int s), (s))
BLOCKING(int, sched_yield, (void), ())
BLOCKING(int, close, (int fd), (fd))
BLOCKING(int, fsync, (int fd), (fd))
BLOCKING(int, fdatasync, (int fd), (fd))
BLOCKING(ssize_t, recv, (int fd, void *b, size_t n, int f), (fd, b, n, f))
BLOCKING(ssize_t, recvfrom, (int fd, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l), (fd, b, n, f, a, l))
BLOCKING(ssize_t, recvmsg, (int fd, struct msghdr *m, int f), (fd, m, f))
BLOCKING(ssize_t, send, (int fd, const void *b, size_t n, int f), (fd, b, n, f))
BLOCKING(ssize_t, sendto, (int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l), (fd, b, n, f, a, l))
BLOCKING(ssize_t, sendmsg, (int fd, const struct msghdr *m, int f), (fd, m, f))
BLOCKING(int, connect, (int fd, const struct sockaddr *a, socklen_t l), (fd, a, l))
BLOCKING(int, accept, (int fd, struct sockaddr *a, socklen_t *l), (fd, a, l))
BLOCKING(int, accept4, (int fd, struct sockaddr *a, socklen_t *l, int f), (fd, a, l, f))

// The variadic ones: the optional argument is passed on as the C library reads it.
int open(const char *path, int flags, ...) {
    NEXT(open);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
    va_end(ap);
    count_blocking("open");
    return next_open(path, flags, mode);
}
int open64(const char *path, int flags, ...) {
    NEXT(open64);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
    va_end(ap);
    count_blocking("open64");
    return next_open64(path, flags, mode);
}
int openat(int dir, const char *path, int flags, ...) {
    NEXT(openat);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
    va_end(ap);
    count_blocking("openat");
    return next_openat(dir, path, flags, mode);
}
int ioctl(int fd, unsigned long request, ...) {
    NEXT(ioctl);
    va_list ap;
    va_start(ap, request);
    void *argument = va_arg(ap, void *);
    va_end(ap);
    count_blocking("ioctl");
    return next_ioctl(fd, request, argument);
}

// ALSA: the PCM calls a driver makes are the device's work, and so are the locks and allocations inside them
// (the pulse plugin talks to its server through libpulse's threaded mainloop).
#define DEVICE_CALL(ret, name, params, args) \
    ret name params { \
        static ret(*next) params; \
        if (!next) next = (ret(*) params)dlsym(RTLD_NEXT, #name); \
        in_device++; \
        ret r = next args; \
        in_device--; \
        return r; \
    }
typedef struct _snd_pcm snd_pcm_t;
typedef unsigned long snd_pcm_uframes_t;
typedef long snd_pcm_sframes_t;
DEVICE_CALL(snd_pcm_sframes_t, snd_pcm_readi, (snd_pcm_t *p, void *b, snd_pcm_uframes_t n), (p, b, n))
DEVICE_CALL(snd_pcm_sframes_t, snd_pcm_writei, (snd_pcm_t *p, const void *b, snd_pcm_uframes_t n), (p, b, n))
DEVICE_CALL(int, snd_pcm_wait, (snd_pcm_t *p, int t), (p, t))
DEVICE_CALL(int, snd_pcm_delay, (snd_pcm_t *p, snd_pcm_sframes_t *d), (p, d))
DEVICE_CALL(snd_pcm_sframes_t, snd_pcm_avail_update, (snd_pcm_t *p), (p))
// Restarting a stream (an xrun's recovery): a device call too, counted on any thread and on watched ones, so a test
// sees the recovery happen and where.
static _Atomic int64_t device_controls, watched_device_controls;
int64_t la_sync_probe_device_controls(void) { return atomic_load(&device_controls); }
int64_t la_sync_probe_watched_device_controls(void) { return atomic_load(&watched_device_controls); }
#define DEVICE_CONTROL(name) \
    int name(snd_pcm_t *p) { \
        static int (*next)(snd_pcm_t *); \
        if (!next) next = (int (*)(snd_pcm_t *))dlsym(RTLD_NEXT, #name); \
        atomic_fetch_add_explicit(&device_controls, 1, memory_order_relaxed); \
        if (watched) atomic_fetch_add_explicit(&watched_device_controls, 1, memory_order_relaxed); \
        in_device++; \
        int r = next(p); \
        in_device--; \
        return r; \
    }
DEVICE_CONTROL(snd_pcm_prepare)
DEVICE_CONTROL(snd_pcm_start)
DEVICE_CONTROL(snd_pcm_drop)
DEVICE_CONTROL(snd_pcm_resume)
DEVICE_CALL(int, snd_pcm_state, (snd_pcm_t *p), (p))
DEVICE_CALL(int, snd_pcm_link, (snd_pcm_t *a, snd_pcm_t *b), (a, b))

// JACK: its process thread belongs to the client only inside the process callback; before and after, libjack
// waits for the next cycle.
typedef struct _jack_client jack_client_t;
typedef uint32_t jack_nframes_t;
typedef int (*JackProcessCallback)(jack_nframes_t, void *);
static JackProcessCallback client_callback;
static void *client_argument;
static int process_trampoline(jack_nframes_t frames, void *arg) {
    (void)arg;
    in_device = 0;
    int r = client_callback(frames, client_argument);
    in_device = 1;
    return r;
}
int jack_set_process_callback(jack_client_t *client, JackProcessCallback callback, void *arg) {
    NEXT(jack_set_process_callback);
    client_callback = callback;
    client_argument = arg;
    return next_jack_set_process_callback(client, process_trampoline, NULL);
}
