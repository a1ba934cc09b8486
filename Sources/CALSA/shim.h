// libasound (ALSA) for Swift: the library's header, plus helpers for what Swift cannot call directly.
#ifndef LIVEAUDIO_CALSA_SHIM_H
#define LIVEAUDIO_CALSA_SHIM_H
#include <alsa/asoundlib.h>

// ALSA prints its own diagnostics to stderr through a variadic handler; Swift cannot write one. The device layer
// reports every failure as a typed error instead, so the library's printing is switched off.
static void la_alsa_silent_handler(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}
static inline void la_alsa_silence_errors(void) { snd_lib_error_set_handler(la_alsa_silent_handler); }
#endif
