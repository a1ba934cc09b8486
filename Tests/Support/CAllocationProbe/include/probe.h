#ifndef LIVEAUDIO_ALLOCATION_PROBE_H
#define LIVEAUDIO_ALLOCATION_PROBE_H
#include <stddef.h>
#include <stdint.h>

/// Counts allocations made on threads that opted in with allocation_probe_watch_this_thread(1).
/// Install allocation_probe_hook with the malloc interposer's allocation hook. With the sync probe
/// (libLiveAudioSyncProbe.so) preloaded too, the same threads' lock waits and frees are counted, and allocations a
/// device library makes inside its own calls are left to the device.
void allocation_probe_hook(size_t size);
void allocation_probe_watch_this_thread(int on);
int64_t allocation_probe_count(void);
int64_t allocation_probe_bytes(void);
/// Resets every count (and finds the sync probe on first use).
void allocation_probe_reset(void);
/// Nonzero when the sync probe is loaded.
int allocation_probe_sees_locks(void);
/// Lock waits and frees on watched threads; -1 without the sync probe.
int64_t allocation_probe_lock_waits(void);
int64_t allocation_probe_frees(void);
// Bytes of heap in use now (glibc's mallinfo2().uordblks).
int64_t allocation_probe_heap_in_use(void);
/// Blocking system calls made in the I/O unit's handler of a device cycle on watched threads, and how many such
/// handlers ran there (the scope the I/O unit marks); -1 without the sync probe.
int64_t allocation_probe_blocking_calls(void);
int64_t allocation_probe_scope_entries(void);
/// ALSA streams dropped, prepared, started or resumed (xrun recovery and starts), on any thread and on watched
/// threads; -1 without the sync probe. Not reset.
int64_t allocation_probe_device_controls(void);
int64_t allocation_probe_watched_device_controls(void);
#endif
