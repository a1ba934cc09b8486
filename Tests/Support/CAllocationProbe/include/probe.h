#ifndef LIVEAUDIO_ALLOCATION_PROBE_H
#define LIVEAUDIO_ALLOCATION_PROBE_H
#include <stddef.h>
#include <stdint.h>

/// Counts allocations made on threads that opted in with allocation_probe_watch_this_thread(1).
/// Install allocation_probe_hook with the malloc interposer's allocation hook.
void allocation_probe_hook(size_t size);
void allocation_probe_watch_this_thread(int on);
int64_t allocation_probe_count(void);
int64_t allocation_probe_bytes(void);
void allocation_probe_reset(void);
#endif
