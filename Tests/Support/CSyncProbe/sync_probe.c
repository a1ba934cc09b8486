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
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Thread_local int watched;
static _Thread_local int in_device;
static _Atomic int64_t lock_waits;
static _Atomic int64_t frees;

void la_sync_probe_watch(int on) { watched = on; }
int la_sync_probe_in_device(void) { return in_device; }
int64_t la_sync_probe_lock_waits(void) { return atomic_load(&lock_waits); }
int64_t la_sync_probe_frees(void) { return atomic_load(&frees); }
void la_sync_probe_reset(void) {
    atomic_store(&lock_waits, 0);
    atomic_store(&frees, 0);
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
DEVICE_CALL(int, snd_pcm_prepare, (snd_pcm_t *p), (p))
DEVICE_CALL(int, snd_pcm_start, (snd_pcm_t *p), (p))
DEVICE_CALL(int, snd_pcm_drop, (snd_pcm_t *p), (p))
DEVICE_CALL(int, snd_pcm_resume, (snd_pcm_t *p), (p))
DEVICE_CALL(int, snd_pcm_state, (snd_pcm_t *p), (p))

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
