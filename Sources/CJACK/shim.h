// libjack for Swift: the library's headers, plus helpers for what Swift cannot call directly.
#ifndef LIVEAUDIO_CJACK_SHIM_H
#define LIVEAUDIO_CJACK_SHIM_H
#include <jack/jack.h>

// jack_client_open is variadic (the server name follows the options when JackServerName is set).
// `server` may be NULL: the default server (JACK_DEFAULT_SERVER, or "default").
static inline jack_client_t *la_jack_client_open(const char *name, int options, jack_status_t *status,
                                                 const char *server) {
    if (server != NULL) {
        return jack_client_open(name, (jack_options_t)(options | JackServerName), status, server);
    }
    return jack_client_open(name, (jack_options_t)options, status);
}

static void la_jack_silent(const char *message) { (void)message; }
// libjack prints connection failures to stderr; the device layer reports them as typed errors instead.
static inline void la_jack_silence_messages(void) {
    jack_set_error_function(la_jack_silent);
    jack_set_info_function(la_jack_silent);
}
#endif
