#ifndef LIVEAUDIO_SYNC_PROBE_H
#define LIVEAUDIO_SYNC_PROBE_H
#include <stdint.h>

/// A library to preload (LD_PRELOAD) beside the malloc interposer: it counts, on the threads that opt in, the
/// calls that can block or enter the allocator — pthread mutex locks, condition and semaphore waits, read-write
/// locks, futex waits made through syscall(2), and free() — and nothing else. Calls a device library makes on
/// the thread's behalf are not counted: inside an ALSA PCM call (snd_pcm_*), and on a JACK process thread outside
/// the client's process callback, the thread is the device's (their own locks and waits are how they work).
///
/// The probe program finds these functions with dlsym(RTLD_DEFAULT, …), so it runs, and says so, without them.
void la_sync_probe_watch(int on);
/// Nonzero while the calling thread is inside a device library's call.
int la_sync_probe_in_device(void);
int64_t la_sync_probe_lock_waits(void);
int64_t la_sync_probe_frees(void);
/// Blocking system calls (read, write, poll, select, epoll, sleeps, sched_yield, open, close, fsync, sockets, ioctl)
/// made on watched threads inside the I/O unit's handler of a device cycle, outside a device library's call.
int64_t la_sync_probe_blocking_calls(void);
/// Handlers of device cycles entered on watched threads.
int64_t la_sync_probe_scope_entries(void);
/// Called by LiveAudio's I/O unit around each device cycle's handler (+1, −1), found with dlsym.
void la_sync_probe_scope(int delta);
/// Called by LiveAudio itself (+1, then -1) around a device's own waiting that is not a library call — the virtual
/// device run as fast as possible, waiting for its file sources' read-ahead (its pacing): counted as the device's,
/// as ALSA's and JACK's calls are.
void la_sync_probe_device_call(int delta);
void la_sync_probe_reset(void);
#endif
