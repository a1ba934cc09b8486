// LiveAudio's native PipeWire backend, in C: a client of its own (a thread loop, a context, the core and registry),
// the graph as it is now (nodes, links, the "default" metadata), and our capture and playback streams, whose one
// process callback calls the engine's cycle on PipeWire's real-time data thread.
//
// libpipewire-0.3 is loaded with dlopen when first needed, as FFmpeg's libraries are: the tool starts, and the other
// backends work, where PipeWire is not installed. Only the headers (libpipewire-0.3-dev) are needed to build.
#ifndef LA_CPIPEWIRE_H
#define LA_CPIPEWIRE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// NULL once libpipewire-0.3 is loaded; otherwise why it could not be (the dynamic loader's message).
const char *la_pw_load_failure(void);

/// One connection to a PipeWire server, with its own thread loop.
typedef struct la_pw_client la_pw_client;

/// Connects to the server `remote` (a socket's name in `$PIPEWIRE_RUNTIME_DIR`/`$XDG_RUNTIME_DIR`, or its absolute
/// path; NULL: `$PIPEWIRE_REMOTE`, else `pipewire-0`), as application `app_name`, and waits (at most `timeout_ms`)
/// until the registry has been read once. NULL on failure, with the reason in `error`.
la_pw_client *la_pw_client_new(const char *app_name, const char *remote, int timeout_ms, char *error,
                               size_t error_size);
/// Stops the streams, disconnects, and frees everything. NULL is ignored.
void la_pw_client_free(la_pw_client *client);

/// The graph as the registry says now, as text (malloc'd; the caller frees it), one object a line, fields separated
/// by tabs:
///   `node  ID  MEDIA_CLASS  NODE_NAME  DESCRIPTION  FORM_FACTOR  CHANNELS`
///   `default  KEY  NAME` (the "default" metadata: default.audio.sink, default.audio.source and the configured ones)
/// Tabs and newlines inside values are replaced by spaces.
char *la_pw_client_snapshot(la_pw_client *client);

/// When the cycle happens, for the engine.
typedef struct {
    /// Frames since the streams started, the time of the graph's pauses included.
    int64_t sample_time;
    /// CLOCK_MONOTONIC nanoseconds at the start of the graph's cycle.
    uint64_t now_ns;
    /// Nanoseconds from a sound at the capture device to this cycle's first captured frame (0 without capture).
    uint64_t input_delay_ns;
    /// Nanoseconds from this cycle's first output frame to its being heard (0 without playback).
    uint64_t output_delay_ns;
} la_pw_cycle_time;

/// The engine's cycle, on PipeWire's data thread: `input` and `output` hold Float32 channels one after another,
/// `stride` floats apart, of `frames` frames (at most the configured `max_frames`: a longer graph cycle is split).
/// The input is what was captured (silence past what the capture gave); the output is zeroed before the call. Either
/// is NULL when its direction is off. Must not block.
typedef void (*la_pw_process_fn)(void *user, float *input, int input_channels, float *output, int output_channels,
                                 int stride, int frames, const la_pw_cycle_time *time);
/// Called on the client's loop thread (never the data thread) when anything the status says may have changed.
typedef void (*la_pw_notify_fn)(void *user);

typedef struct {
    /// The capture and playback channels; 0 leaves that direction out.
    int input_channels;
    int output_channels;
    /// The streams' rate (PipeWire converts to and from the graph's).
    uint32_t rate;
    /// The period asked of the graph (node.latency = quantum/rate).
    uint32_t quantum;
    /// The most frames one call of the process function gets.
    int max_frames;
    /// The nodes to link to by node.name; NULL follows the default (and is moved with it).
    const char *input_target;
    const char *output_target;
    /// media.role (e.g. "Production", "Music") and the streams' media.name prefix; node names derive from `node_name`.
    const char *role;
    const char *media_name;
    const char *node_name;
} la_pw_stream_config;

/// Creates and connects our streams (one process for both: the playback is triggered by the capture, in one node
/// group), and waits up to `timeout_ms` for them to run. 0 on success, -1 with `error` filled.
int la_pw_client_start(la_pw_client *client, const la_pw_stream_config *config, la_pw_process_fn process,
                       la_pw_notify_fn notify, void *user, int timeout_ms, char *error, size_t error_size);
/// Disconnects and destroys the streams; when it returns, the process function is not running and will not run.
void la_pw_client_stop(la_pw_client *client);

enum { LA_PW_STATE_NONE = 0, LA_PW_STATE_CONNECTING = 1, LA_PW_STATE_PAUSED = 2, LA_PW_STATE_STREAMING = 3,
       LA_PW_STATE_UNCONNECTED = 4, LA_PW_STATE_ERROR = 5 };

/// One of our streams, as the control side sees it.
typedef struct {
    /// LA_PW_STATE_*.
    int state;
    /// Our stream's node id (0 until it has one).
    uint32_t node_id;
    /// The node our stream is linked to, as settled (an unlink that is not followed by a new link within 50 ms, or
    /// the peer node removed); 0 and "" for none.
    uint32_t peer_id;
    char peer_name[128];
    char peer_form_factor[32];
    /// The peer's active route on its card (SPA_PARAM_Route of the device the node belongs to, for the node's
    /// `card.profile.device`): its name (`analog-output-headphones`), description and `port.type` (`headphones`,
    /// `speaker`, `hdmi`, ...); "" where the node has no device or its card reports no route (virtual nodes).
    char peer_port_name[64];
    char peer_port_description[128];
    char peer_port_type[32];
    /// Why the last peer went away: 1 removed, 2 unlinked; 0 none.
    int peer_lost_reason;
    /// The stream's delay as pw_stream_get_time_n reports it in the last cycle, frames.
    int64_t delay_frames;
} la_pw_stream_status;

typedef struct {
    la_pw_stream_status input;
    la_pw_stream_status output;
    /// The "default" metadata: default.audio.sink / default.audio.source ("" when unset).
    char default_sink[128];
    char default_source[128];
    /// The graph's quantum and rate in the last cycle (0 before one).
    uint32_t quantum;
    uint32_t graph_rate;
    /// Cycles run, graph cycles we missed (the graph's position jumped past our last cycle), pauses of the graph seen by
    /// the data thread (a gap longer than 4 quanta), and frames of time those pauses held.
    uint64_t cycles;
    uint64_t xruns;
    uint64_t gaps;
    int64_t gap_frames;
    /// The server went away or refused us: a message, else "".
    char fault[256];
} la_pw_status;

/// What the client knows now. Any thread but the data thread.
void la_pw_client_status(la_pw_client *client, la_pw_status *status);

/// A device's route (SPA_PARAM_Route): where one of a card's devices plays or captures now.
typedef struct {
    int32_t index;
    /// The card's device it belongs to (a node's `card.profile.device`).
    int32_t device;
    /// 1: an output route (a sink's), 0: an input route.
    int output;
    char name[64];
    char description[128];
    /// The route's info's `port.type` ("" when it has none).
    char port_type[32];
    /// SPA_PARAM_AVAILABILITY_*: 0 unknown, 1 no, 2 yes.
    int available;
} la_pw_route;

/// Reads a Route param (a SPA POD object of `size` bytes) as a device sends it. 0, or -1 when it is not one.
int la_pw_parse_route(const void *pod, size_t size, la_pw_route *route);
/// Writes `route` as a Route param into `buffer` the way ALSA's card profiles send it; returns its size, 0 when the
/// buffer is too small. For tests of the reading.
size_t la_pw_build_route(void *buffer, size_t size, const la_pw_route *route);

#ifdef __cplusplus
}
#endif

#endif
