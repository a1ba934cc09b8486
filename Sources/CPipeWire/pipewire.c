// LiveAudio's PipeWire client (see CPipeWire.h). Everything but the process callbacks runs on the client's thread
// loop or under its lock; the process callbacks run on PipeWire's data thread and touch only the stream buffers, the
// engine's callback and atomics.
#include "CPipeWire.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipewire/pipewire.h>
#include <pipewire/extensions/metadata.h>
#include <spa/param/audio/format-utils.h>
#include <spa/param/route.h>
#include <spa/pod/builder.h>
#include <spa/pod/parser.h>
#include <spa/utils/json.h>
#include <spa/utils/result.h>

// MARK: Loading

// The library's functions we call, resolved with dlsym; the names below are redirected to this table.
static struct {
#define LA_FN(name) __typeof__(&name) name;
#define LA_FUNCTIONS                                                                                                   \
    LA_FN(pw_init)                                                                                                     \
    LA_FN(pw_thread_loop_new)                                                                                          \
    LA_FN(pw_thread_loop_destroy)                                                                                      \
    LA_FN(pw_thread_loop_start)                                                                                        \
    LA_FN(pw_thread_loop_stop)                                                                                         \
    LA_FN(pw_thread_loop_lock)                                                                                         \
    LA_FN(pw_thread_loop_unlock)                                                                                       \
    LA_FN(pw_thread_loop_signal)                                                                                       \
    LA_FN(pw_thread_loop_get_loop)                                                                                     \
    LA_FN(pw_thread_loop_get_time)                                                                                     \
    LA_FN(pw_thread_loop_timed_wait_full)                                                                              \
    LA_FN(pw_context_new)                                                                                              \
    LA_FN(pw_context_destroy)                                                                                          \
    LA_FN(pw_context_connect)                                                                                          \
    LA_FN(pw_core_disconnect)                                                                                          \
    LA_FN(pw_proxy_destroy)                                                                                            \
    LA_FN(pw_properties_new)                                                                                           \
    LA_FN(pw_properties_set)                                                                                           \
    LA_FN(pw_properties_setf)                                                                                          \
    LA_FN(pw_stream_new)                                                                                               \
    LA_FN(pw_stream_destroy)                                                                                           \
    LA_FN(pw_stream_add_listener)                                                                                      \
    LA_FN(pw_stream_connect)                                                                                           \
    LA_FN(pw_stream_disconnect)                                                                                        \
    LA_FN(pw_stream_get_node_id)                                                                                       \
    LA_FN(pw_stream_dequeue_buffer)                                                                                    \
    LA_FN(pw_stream_queue_buffer)                                                                                      \
    LA_FN(pw_stream_get_time_n)                                                                                        \
    LA_FN(pw_stream_trigger_process)                                                                                   \
    LA_FN(pw_stream_state_as_string)
    LA_FUNCTIONS
#undef LA_FN
} pw;

static char load_failure[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
    void *library = dlopen("libpipewire-0.3.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *why = dlerror();
        snprintf(load_failure, sizeof load_failure, "%s", why ? why : "libpipewire-0.3.so.0 could not be loaded");
        return;
    }
#define LA_FN(name)                                                                                                    \
    if (!(pw.name = (__typeof__(pw.name))dlsym(library, #name))) {                                                     \
        snprintf(load_failure, sizeof load_failure, "libpipewire-0.3 has no function %s", #name);                      \
        return;                                                                                                        \
    }
    LA_FUNCTIONS
#undef LA_FN
    pw.pw_init(NULL, NULL);
}

const char *la_pw_load_failure(void) {
    pthread_once(&load_once, load);
    return load_failure[0] ? load_failure : NULL;
}

// MARK: The client

#define LA_MAX_CHANNELS 8
#define LA_PEER_SETTLE_NS 50000000ull

typedef struct {
    uint32_t id;
    struct pw_proxy *proxy;  // bound for its info's properties (the form factor)
    struct spa_hook listener;
    struct la_pw_client *client;
    char media_class[64];
    char name[128];
    char description[256];
    char form_factor[32];
    char channels[16];
    // The card it belongs to (device.id; 0: none) and which of its devices (card.profile.device; -1: none).
    uint32_t device_id;
    int32_t profile_device;
} la_node;

#define LA_MAX_ROUTES 16

// A card (Audio/Device), bound for its active routes (SPA_PARAM_Route): one a direction and device of the card.
typedef struct {
    uint32_t id;
    struct pw_proxy *proxy;
    struct spa_hook listener;
    struct la_pw_client *client;
    la_pw_route routes[LA_MAX_ROUTES];
    int route_count;
} la_device;

typedef struct {
    uint32_t id;
    uint32_t output_node;
    uint32_t input_node;
} la_link;

typedef struct {
    struct pw_stream *stream;
    struct spa_hook listener;
    int input;  // 1: capture (PW_DIRECTION_INPUT)
    int state;
    uint32_t node_id;
    // The settled peer, and a pending loss (no link since `unlinked_at`, the peer still there).
    uint32_t peer_id;
    int peer_lost_reason;
    uint64_t unlinked_at;
    int64_t delay_frames;  // written by the data thread
} la_stream;

struct la_pw_client {
    struct pw_thread_loop *loop;
    struct pw_context *context;
    struct pw_core *core;
    struct spa_hook core_listener;
    struct pw_registry *registry;
    struct spa_hook registry_listener;
    struct pw_metadata *metadata;
    uint32_t metadata_id;
    struct spa_hook metadata_listener;
    struct spa_source *settle_timer;
    int sync_seq;
    int synced;

    la_node **nodes;  // each its own allocation: its listener's address stays put
    size_t node_count, node_capacity;
    la_link *links;
    size_t link_count, link_capacity;
    la_device **devices;  // each its own allocation, as the nodes
    size_t device_count, device_capacity;
    char default_sink[128], default_source[128];
    char default_configured_sink[128], default_configured_source[128];
    char fault[256];

    // Streams.
    la_stream capture, playback;
    int running;
    la_pw_process_fn process;
    la_pw_notify_fn notify;
    void *user;
    uint32_t rate;
    int max_frames;
    int in_channels, out_channels;
    // Our side of the cycle: the channels one after another, `stride` floats apart.
    float *in_block, *out_block;
    size_t stride;

    // The data thread's own state, and what it publishes (atomics).
    int64_t sample_time;
    int64_t first_now;
    int64_t last_now;
    uint64_t last_frames;
    uint64_t cycles, xruns, gaps;
    int64_t gap_frames;
    uint32_t quantum, graph_rate;
};

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void copy_text(char *to, size_t size, const char *from) {
    snprintf(to, size, "%s", from ? from : "");
    for (char *p = to; *p; p++)
        if (*p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
}

static void notify(struct la_pw_client *c) {
    if (c->notify) c->notify(c->user);
}

static la_node *find_node(struct la_pw_client *c, uint32_t id) {
    for (size_t i = 0; i < c->node_count; i++)
        if (c->nodes[i]->id == id) return c->nodes[i];
    return NULL;
}

// The node our stream is linked to now, 0 for none.
static uint32_t linked_peer(struct la_pw_client *c, const la_stream *s) {
    if (!s->stream || s->node_id == 0 || s->node_id == SPA_ID_INVALID) return 0;
    for (size_t i = 0; i < c->link_count; i++) {
        const la_link *l = &c->links[i];
        if (s->input && l->input_node == s->node_id) return l->output_node;
        if (!s->input && l->output_node == s->node_id) return l->input_node;
    }
    return 0;
}

// Brings the settled peer up to date: a new link counts at once, a removed peer at once, an unlink after 50 ms
// without a new link (a move unlinks, then links again).
static void settle_stream(struct la_pw_client *c, la_stream *s, uint64_t now) {
    if (!s->stream) return;
    uint32_t peer = linked_peer(c, s);
    if (peer != 0) {
        s->peer_id = peer;
        s->unlinked_at = 0;
        return;
    }
    if (s->peer_id == 0) return;
    if (!find_node(c, s->peer_id)) {
        s->peer_id = 0;
        s->peer_lost_reason = 1;
        s->unlinked_at = 0;
        return;
    }
    if (s->unlinked_at == 0) s->unlinked_at = now;
    if (now - s->unlinked_at >= LA_PEER_SETTLE_NS) {
        s->peer_id = 0;
        s->peer_lost_reason = 2;
        s->unlinked_at = 0;
    }
}

static void arm_settle_timer(struct la_pw_client *c) {
    if (!c->settle_timer) return;
    struct timespec value = {0, 0}, interval = {0, 0};
    if (c->capture.unlinked_at || c->playback.unlinked_at) value.tv_nsec = LA_PEER_SETTLE_NS + 1000000;
    pw_loop_update_timer(pw.pw_thread_loop_get_loop(c->loop), c->settle_timer, &value, &interval, false);
}

static void graph_changed(struct la_pw_client *c) {
    uint64_t now = monotonic_ns();
    settle_stream(c, &c->capture, now);
    settle_stream(c, &c->playback, now);
    arm_settle_timer(c);
    notify(c);
}

static void on_settle_timer(void *data, uint64_t expirations) {
    (void)expirations;
    graph_changed(data);
}

// MARK: Registry

static void node_info(void *data, const struct pw_node_info *info) {
    la_node *n = data;
    // The properties come only when they changed: a later info (the node's state) carries an empty dict.
    if (!info->props || !(info->change_mask & PW_NODE_CHANGE_MASK_PROPS)) return;
    const char *form = spa_dict_lookup(info->props, PW_KEY_DEVICE_FORM_FACTOR);
    if (!form) form = spa_dict_lookup(info->props, "node.form-factor");
    copy_text(n->form_factor, sizeof n->form_factor, form);
    const char *channels = spa_dict_lookup(info->props, PW_KEY_AUDIO_CHANNELS);
    if (channels) copy_text(n->channels, sizeof n->channels, channels);
    const char *device = spa_dict_lookup(info->props, PW_KEY_DEVICE_ID);
    n->device_id = device ? (uint32_t)strtoul(device, NULL, 10) : 0;
    const char *profile_device = spa_dict_lookup(info->props, "card.profile.device");
    n->profile_device = profile_device ? (int32_t)strtol(profile_device, NULL, 10) : -1;
    notify(n->client);
}

// MARK: Routes

int la_pw_parse_route(const void *pod, size_t size, la_pw_route *route) {
    const struct spa_pod *param = pod;
    if (!pod || size < sizeof(struct spa_pod) || SPA_POD_SIZE(param) > size) return -1;
    if (!spa_pod_is_object_type(param, SPA_TYPE_OBJECT_ParamRoute)) return -1;
    int32_t index = -1, device = -1;
    uint32_t id = 0, direction = SPA_DIRECTION_OUTPUT, available = SPA_PARAM_AVAILABILITY_unknown;
    const char *name = NULL, *description = NULL;
    struct spa_pod *info = NULL;
    if (spa_pod_parse_object(param, SPA_TYPE_OBJECT_ParamRoute, &id,
                             SPA_PARAM_ROUTE_index, SPA_POD_Int(&index),
                             SPA_PARAM_ROUTE_direction, SPA_POD_Id(&direction),
                             SPA_PARAM_ROUTE_device, SPA_POD_Int(&device),
                             SPA_PARAM_ROUTE_name, SPA_POD_String(&name),
                             SPA_PARAM_ROUTE_description, SPA_POD_OPT_String(&description),
                             SPA_PARAM_ROUTE_available, SPA_POD_OPT_Id(&available),
                             SPA_PARAM_ROUTE_info, SPA_POD_OPT_Pod(&info)) < 0)
        return -1;
    memset(route, 0, sizeof *route);
    route->index = index;
    route->device = device;
    route->output = direction == SPA_DIRECTION_OUTPUT;
    route->available = (int)available;
    copy_text(route->name, sizeof route->name, name);
    copy_text(route->description, sizeof route->description, description);
    // The info: Struct(Int n_items, (String key, String value)*).
    if (info && spa_pod_is_struct(info)) {
        struct spa_pod_parser parser;
        struct spa_pod_frame frame;
        int32_t items = 0;
        spa_pod_parser_pod(&parser, info);
        if (spa_pod_parser_push_struct(&parser, &frame) == 0 && spa_pod_parser_get_int(&parser, &items) == 0) {
            for (int32_t i = 0; i < items; i++) {
                const char *key = NULL, *value = NULL;
                if (spa_pod_parser_get_string(&parser, &key) < 0 || spa_pod_parser_get_string(&parser, &value) < 0) break;
                if (strcmp(key, "port.type") == 0) copy_text(route->port_type, sizeof route->port_type, value);
            }
        }
    }
    return 0;
}

size_t la_pw_build_route(void *buffer, size_t size, const la_pw_route *route) {
    struct spa_pod_builder b = SPA_POD_BUILDER_INIT(buffer, (uint32_t)size);
    struct spa_pod_frame object, info;
    spa_pod_builder_push_object(&b, &object, SPA_TYPE_OBJECT_ParamRoute, SPA_PARAM_Route);
    spa_pod_builder_add(&b,
                        SPA_PARAM_ROUTE_index, SPA_POD_Int(route->index),
                        SPA_PARAM_ROUTE_direction, SPA_POD_Id(route->output ? SPA_DIRECTION_OUTPUT : SPA_DIRECTION_INPUT),
                        SPA_PARAM_ROUTE_device, SPA_POD_Int(route->device),
                        SPA_PARAM_ROUTE_name, SPA_POD_String(route->name),
                        SPA_PARAM_ROUTE_description, SPA_POD_String(route->description),
                        SPA_PARAM_ROUTE_priority, SPA_POD_Int(0),
                        SPA_PARAM_ROUTE_available, SPA_POD_Id((uint32_t)route->available), 0);
    spa_pod_builder_prop(&b, SPA_PARAM_ROUTE_info, 0);
    spa_pod_builder_push_struct(&b, &info);
    int with_type = route->port_type[0] != 0;
    spa_pod_builder_int(&b, with_type ? 2 : 1);
    spa_pod_builder_string(&b, "port.availability-group");
    spa_pod_builder_string(&b, "");
    if (with_type) {
        spa_pod_builder_string(&b, "port.type");
        spa_pod_builder_string(&b, route->port_type);
    }
    spa_pod_builder_pop(&b, &info);
    spa_pod_builder_pop(&b, &object);
    return b.state.offset <= size ? b.state.offset : 0;
}

static void device_param(void *data, int seq, uint32_t id, uint32_t index, uint32_t next, const struct spa_pod *param) {
    (void)seq;
    (void)index;
    (void)next;
    la_device *d = data;
    la_pw_route route;
    if (id != SPA_PARAM_Route || !param || la_pw_parse_route(param, SPA_POD_SIZE(param), &route) != 0) return;
    // One active route a direction and device of the card: a new one replaces it.
    int i = 0;
    while (i < d->route_count && !(d->routes[i].output == route.output && d->routes[i].device == route.device)) i++;
    if (i == d->route_count) {
        if (d->route_count == LA_MAX_ROUTES) return;
        d->route_count++;
    }
    d->routes[i] = route;
    notify(d->client);
}

static const struct pw_device_events device_events = {.version = PW_VERSION_DEVICE_EVENTS, .param = device_param};

static la_device *find_device(struct la_pw_client *c, uint32_t id) {
    for (size_t i = 0; i < c->device_count; i++)
        if (c->devices[i]->id == id) return c->devices[i];
    return NULL;
}

// The route a node plays or captures through now, NULL when its card reports none.
static const la_pw_route *node_route(struct la_pw_client *c, const la_node *n, int output) {
    if (n->device_id == 0 || n->profile_device < 0) return NULL;
    const la_device *d = find_device(c, n->device_id);
    if (!d) return NULL;
    for (int i = 0; i < d->route_count; i++)
        if (d->routes[i].output == output && d->routes[i].device == n->profile_device) return &d->routes[i];
    return NULL;
}

static const struct pw_node_events node_events = {.version = PW_VERSION_NODE_EVENTS, .info = node_info};

static void metadata_value_name(const char *value, char *to, size_t size) {
    to[0] = 0;
    if (!value) return;
    // {"name":"spk2"}
    struct spa_json it[2];
    char key[64];
    spa_json_init(&it[0], value, strlen(value));
    if (spa_json_enter_object(&it[0], &it[1]) <= 0) return;
    while (spa_json_get_string(&it[1], key, sizeof key) > 0) {
        if (strcmp(key, "name") == 0) {
            char name[128];
            if (spa_json_get_string(&it[1], name, sizeof name) > 0) copy_text(to, size, name);
            return;
        }
        const char *skip;
        if (spa_json_next(&it[1], &skip) <= 0) return;
    }
}

static int metadata_property(void *data, uint32_t subject, const char *key, const char *type, const char *value) {
    (void)type;
    struct la_pw_client *c = data;
    if (subject != PW_ID_CORE) return 0;
    if (key == NULL) {
        c->default_sink[0] = c->default_source[0] = 0;
        c->default_configured_sink[0] = c->default_configured_source[0] = 0;
    } else if (strcmp(key, "default.audio.sink") == 0) {
        metadata_value_name(value, c->default_sink, sizeof c->default_sink);
    } else if (strcmp(key, "default.audio.source") == 0) {
        metadata_value_name(value, c->default_source, sizeof c->default_source);
    } else if (strcmp(key, "default.configured.audio.sink") == 0) {
        metadata_value_name(value, c->default_configured_sink, sizeof c->default_configured_sink);
    } else if (strcmp(key, "default.configured.audio.source") == 0) {
        metadata_value_name(value, c->default_configured_source, sizeof c->default_configured_source);
    } else {
        return 0;
    }
    notify(c);
    return 0;
}

static const struct pw_metadata_events metadata_events = {
    .version = PW_VERSION_METADATA_EVENTS, .property = metadata_property};

static void *grow(void *array, size_t *capacity, size_t count, size_t size) {
    if (count < *capacity) return array;
    size_t wanted = *capacity ? *capacity * 2 : 32;
    void *bigger = realloc(array, wanted * size);
    if (!bigger) return NULL;
    *capacity = wanted;
    return bigger;
}

static uint32_t parse_id(const char *text) {
    if (!text) return 0;
    char *end;
    unsigned long v = strtoul(text, &end, 10);
    return end != text ? (uint32_t)v : 0;
}

static void registry_global(void *data, uint32_t id, uint32_t permissions, const char *type, uint32_t version,
                            const struct spa_dict *props) {
    (void)permissions;
    (void)version;
    struct la_pw_client *c = data;
    if (strcmp(type, PW_TYPE_INTERFACE_Node) == 0) {
        la_node **nodes = grow(c->nodes, &c->node_capacity, c->node_count, sizeof(la_node *));
        la_node *n = nodes ? calloc(1, sizeof *n) : NULL;
        if (!n) return;
        c->nodes = nodes;
        c->nodes[c->node_count++] = n;
        n->id = id;
        n->client = c;
        copy_text(n->media_class, sizeof n->media_class, props ? spa_dict_lookup(props, PW_KEY_MEDIA_CLASS) : NULL);
        copy_text(n->name, sizeof n->name, props ? spa_dict_lookup(props, PW_KEY_NODE_NAME) : NULL);
        copy_text(n->description, sizeof n->description,
                  props ? spa_dict_lookup(props, PW_KEY_NODE_DESCRIPTION) : NULL);
        // Sinks and sources are bound for their info (its properties hold the form factor, the channels).
        if (strncmp(n->media_class, "Audio/Sink", 10) == 0 || strncmp(n->media_class, "Audio/Source", 12) == 0) {
            n->proxy = pw_registry_bind(c->registry, id, PW_TYPE_INTERFACE_Node, PW_VERSION_NODE, 0);
            if (n->proxy) pw_node_add_listener((struct pw_node *)n->proxy, &n->listener, &node_events, n);
        }
    } else if (strcmp(type, PW_TYPE_INTERFACE_Device) == 0) {
        // Sound cards, bound for their routes (a port changed: headphones plugged in, the speaker taking over).
        const char *media_class = props ? spa_dict_lookup(props, PW_KEY_MEDIA_CLASS) : NULL;
        if (!media_class || strcmp(media_class, "Audio/Device") != 0) return;
        la_device **devices = grow(c->devices, &c->device_capacity, c->device_count, sizeof(la_device *));
        la_device *d = devices ? calloc(1, sizeof *d) : NULL;
        if (!d) return;
        c->devices = devices;
        d->id = id;
        d->client = c;
        d->proxy = pw_registry_bind(c->registry, id, PW_TYPE_INTERFACE_Device, PW_VERSION_DEVICE, 0);
        if (!d->proxy) {
            free(d);
            return;
        }
        c->devices[c->device_count++] = d;
        pw_device_add_listener((struct pw_device *)d->proxy, &d->listener, &device_events, d);
        uint32_t ids[] = {SPA_PARAM_Route};
        pw_device_subscribe_params((struct pw_device *)d->proxy, ids, 1);
    } else if (strcmp(type, PW_TYPE_INTERFACE_Link) == 0) {
        la_link *links = grow(c->links, &c->link_capacity, c->link_count, sizeof(la_link));
        if (!links) return;
        c->links = links;
        la_link *l = &c->links[c->link_count++];
        l->id = id;
        l->output_node = parse_id(props ? spa_dict_lookup(props, PW_KEY_LINK_OUTPUT_NODE) : NULL);
        l->input_node = parse_id(props ? spa_dict_lookup(props, PW_KEY_LINK_INPUT_NODE) : NULL);
    } else if (strcmp(type, PW_TYPE_INTERFACE_Metadata) == 0) {
        const char *name = props ? spa_dict_lookup(props, "metadata.name") : NULL;
        if (name && strcmp(name, "default") == 0 && !c->metadata) {
            c->metadata = pw_registry_bind(c->registry, id, PW_TYPE_INTERFACE_Metadata, PW_VERSION_METADATA, 0);
            if (c->metadata) {
                c->metadata_id = id;
                spa_zero(c->metadata_listener);
                pw_metadata_add_listener(c->metadata, &c->metadata_listener, &metadata_events, c);
            }
        }
    } else {
        return;
    }
    graph_changed(c);
}

static void registry_global_remove(void *data, uint32_t id) {
    struct la_pw_client *c = data;
    for (size_t i = 0; i < c->device_count; i++) {
        la_device *d = c->devices[i];
        if (d->id != id) continue;
        spa_hook_remove(&d->listener);
        pw.pw_proxy_destroy(d->proxy);
        free(d);
        c->devices[i] = c->devices[--c->device_count];
        graph_changed(c);
        return;
    }
    for (size_t i = 0; i < c->node_count; i++) {
        la_node *n = c->nodes[i];
        if (n->id != id) continue;
        if (n->proxy) {
            spa_hook_remove(&n->listener);
            pw.pw_proxy_destroy(n->proxy);
        }
        free(n);
        c->nodes[i] = c->nodes[--c->node_count];
        graph_changed(c);
        return;
    }
    for (size_t i = 0; i < c->link_count; i++) {
        if (c->links[i].id != id) continue;
        c->links[i] = c->links[--c->link_count];
        graph_changed(c);
        return;
    }
    if (c->metadata && id == c->metadata_id) {
        spa_hook_remove(&c->metadata_listener);
        pw.pw_proxy_destroy((struct pw_proxy *)c->metadata);
        c->metadata = NULL;
        c->default_sink[0] = c->default_source[0] = 0;
        graph_changed(c);
    }
}

static const struct pw_registry_events registry_events = {
    .version = PW_VERSION_REGISTRY_EVENTS, .global = registry_global, .global_remove = registry_global_remove};

// MARK: Core

static void core_done(void *data, uint32_t id, int seq) {
    struct la_pw_client *c = data;
    if (id == PW_ID_CORE && seq == c->sync_seq) {
        c->synced = 1;
        pw.pw_thread_loop_signal(c->loop, false);
    }
}

static void core_error(void *data, uint32_t id, int seq, int res, const char *message) {
    (void)seq;
    struct la_pw_client *c = data;
    if (id == PW_ID_CORE) {
        if (!c->fault[0]) {
            if (res == -EPIPE)
                snprintf(c->fault, sizeof c->fault, "the PipeWire server went away");
            else
                snprintf(c->fault, sizeof c->fault, "the PipeWire server refused us: %s (%s)", message ? message : "",
                         spa_strerror(res));
        }
        pw.pw_thread_loop_signal(c->loop, false);
        notify(c);
    }
}

static const struct pw_core_events core_events = {.version = PW_VERSION_CORE_EVENTS, .done = core_done, .error = core_error};

// Waits (loop locked) until `done` or the core's fault, at most `timeout_ms`. 0 when done.
static int wait_for(struct la_pw_client *c, int *done, int timeout_ms) {
    struct timespec until;
    pw.pw_thread_loop_get_time(c->loop, &until, (int64_t)timeout_ms * 1000000);
    while (!*done && !c->fault[0]) {
        if (pw.pw_thread_loop_timed_wait_full(c->loop, &until) != 0) break;
    }
    return *done ? 0 : -1;
}

static int roundtrip(struct la_pw_client *c, int timeout_ms) {
    c->synced = 0;
    c->sync_seq = pw_core_sync(c->core, PW_ID_CORE, c->sync_seq);
    return wait_for(c, &c->synced, timeout_ms);
}

la_pw_client *la_pw_client_new(const char *app_name, const char *remote, int timeout_ms, char *error,
                               size_t error_size) {
    const char *failure = la_pw_load_failure();
    if (failure) {
        snprintf(error, error_size, "PipeWire's library is not there (%s)", failure);
        return NULL;
    }
    struct la_pw_client *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(error, error_size, "out of memory");
        return NULL;
    }
    c->loop = pw.pw_thread_loop_new("la-pipewire", NULL);
    if (!c->loop) {
        snprintf(error, error_size, "PipeWire could not make a thread loop (%s)", strerror(errno));
        free(c);
        return NULL;
    }
    // client-rt.conf: the data thread is made real-time (module-rt), as a pro-audio client's is.
    c->context = pw.pw_context_new(pw.pw_thread_loop_get_loop(c->loop),
                                   pw.pw_properties_new(PW_KEY_CONFIG_NAME, "client-rt.conf", PW_KEY_APP_NAME,
                                                        app_name ? app_name : "liveaudio", NULL),
                                   0);
    if (!c->context) {
        snprintf(error, error_size, "PipeWire could not make a context (%s)", strerror(errno));
        pw.pw_thread_loop_destroy(c->loop);
        free(c);
        return NULL;
    }
    if (pw.pw_thread_loop_start(c->loop) != 0) {
        snprintf(error, error_size, "PipeWire could not start its thread loop");
        pw.pw_context_destroy(c->context);
        pw.pw_thread_loop_destroy(c->loop);
        free(c);
        return NULL;
    }
    pw.pw_thread_loop_lock(c->loop);
    c->core = pw.pw_context_connect(
        c->context, remote && remote[0] ? pw.pw_properties_new(PW_KEY_REMOTE_NAME, remote, NULL) : NULL, 0);
    if (!c->core) {
        int e = errno;
        pw.pw_thread_loop_unlock(c->loop);
        const char *dir = getenv("PIPEWIRE_RUNTIME_DIR");
        if (!dir) dir = getenv("XDG_RUNTIME_DIR");
        const char *name = remote && remote[0] ? remote : getenv("PIPEWIRE_REMOTE");
        if (!name || !name[0]) name = "pipewire-0";
        if (name[0] == '/')
            snprintf(error, error_size, "no PipeWire server answers at %s (%s)", name, strerror(e));
        else
            snprintf(error, error_size, "no PipeWire server answers at %s/%s (%s)", dir ? dir : "$XDG_RUNTIME_DIR",
                     name, strerror(e));
        la_pw_client_free(c);
        return NULL;
    }
    pw_core_add_listener(c->core, &c->core_listener, &core_events, c);
    c->registry = pw_core_get_registry(c->core, PW_VERSION_REGISTRY, 0);
    pw_registry_add_listener(c->registry, &c->registry_listener, &registry_events, c);
    c->settle_timer = pw_loop_add_timer(pw.pw_thread_loop_get_loop(c->loop), on_settle_timer, c);
    // Twice: the first round brings the globals, the second the bound objects' info and the metadata's values.
    int ok = roundtrip(c, timeout_ms) == 0 && roundtrip(c, timeout_ms) == 0;
    if (!ok) {
        snprintf(error, error_size, "the PipeWire server did not answer within %d ms%s%s", timeout_ms,
                 c->fault[0] ? ": " : "", c->fault);
        pw.pw_thread_loop_unlock(c->loop);
        la_pw_client_free(c);
        return NULL;
    }
    pw.pw_thread_loop_unlock(c->loop);
    return c;
}

void la_pw_client_free(la_pw_client *c) {
    if (!c) return;
    la_pw_client_stop(c);
    if (c->loop) pw.pw_thread_loop_lock(c->loop);
    for (size_t i = 0; i < c->node_count; i++) {
        if (c->nodes[i]->proxy) {
            spa_hook_remove(&c->nodes[i]->listener);
            pw.pw_proxy_destroy(c->nodes[i]->proxy);
        }
        free(c->nodes[i]);
    }
    for (size_t i = 0; i < c->device_count; i++) {
        spa_hook_remove(&c->devices[i]->listener);
        pw.pw_proxy_destroy(c->devices[i]->proxy);
        free(c->devices[i]);
    }
    if (c->metadata) {
        spa_hook_remove(&c->metadata_listener);
        pw.pw_proxy_destroy((struct pw_proxy *)c->metadata);
    }
    if (c->registry) {
        spa_hook_remove(&c->registry_listener);
        pw.pw_proxy_destroy((struct pw_proxy *)c->registry);
    }
    if (c->settle_timer) pw_loop_destroy_source(pw.pw_thread_loop_get_loop(c->loop), c->settle_timer);
    if (c->core) {
        spa_hook_remove(&c->core_listener);
        pw.pw_core_disconnect(c->core);
    }
    if (c->loop) pw.pw_thread_loop_unlock(c->loop);
    if (c->loop) pw.pw_thread_loop_stop(c->loop);
    if (c->context) pw.pw_context_destroy(c->context);
    if (c->loop) pw.pw_thread_loop_destroy(c->loop);
    free(c->nodes);
    free(c->links);
    free(c->devices);
    free(c);
}

char *la_pw_client_snapshot(la_pw_client *c) {
    pw.pw_thread_loop_lock(c->loop);
    size_t size = 256 + (c->node_count + 4) * 700;
    char *text = malloc(size);
    if (!text) {
        pw.pw_thread_loop_unlock(c->loop);
        return NULL;
    }
    size_t at = 0;
    for (size_t i = 0; i < c->node_count; i++) {
        const la_node *n = c->nodes[i];
        at += (size_t)snprintf(text + at, size - at, "node\t%u\t%s\t%s\t%s\t%s\t%s\n", n->id, n->media_class, n->name,
                               n->description, n->form_factor, n->channels);
    }
    at += (size_t)snprintf(text + at, size - at, "default\tdefault.audio.sink\t%s\n", c->default_sink);
    at += (size_t)snprintf(text + at, size - at, "default\tdefault.audio.source\t%s\n", c->default_source);
    at += (size_t)snprintf(text + at, size - at, "default\tdefault.configured.audio.sink\t%s\n",
                           c->default_configured_sink);
    snprintf(text + at, size - at, "default\tdefault.configured.audio.source\t%s\n", c->default_configured_source);
    pw.pw_thread_loop_unlock(c->loop);
    return text;
}

// MARK: Streams

static int state_code(enum pw_stream_state state) {
    switch (state) {
    case PW_STREAM_STATE_ERROR: return LA_PW_STATE_ERROR;
    case PW_STREAM_STATE_UNCONNECTED: return LA_PW_STATE_UNCONNECTED;
    case PW_STREAM_STATE_CONNECTING: return LA_PW_STATE_CONNECTING;
    case PW_STREAM_STATE_PAUSED: return LA_PW_STATE_PAUSED;
    case PW_STREAM_STATE_STREAMING: return LA_PW_STATE_STREAMING;
    }
    return LA_PW_STATE_NONE;
}

static void stream_state_changed(void *data, enum pw_stream_state old, enum pw_stream_state state, const char *error) {
    (void)old;
    la_stream *s = data;
    struct la_pw_client *c = (struct la_pw_client *)((char *)s - (s->input ? offsetof(struct la_pw_client, capture)
                                                                           : offsetof(struct la_pw_client, playback)));
    s->state = state_code(state);
    s->node_id = pw.pw_stream_get_node_id(s->stream);
    if (state == PW_STREAM_STATE_ERROR && !c->fault[0])
        snprintf(c->fault, sizeof c->fault, "PipeWire failed our %s stream: %s", s->input ? "capture" : "playback",
                 error ? error : "no reason given");
    pw.pw_thread_loop_signal(c->loop, false);
    graph_changed(c);
}

// One call of the engine per at most max_frames frames.
static void run_engine(struct la_pw_client *c, int frames, la_pw_cycle_time *time) {
    int done = 0;
    while (done < frames) {
        int n = frames - done < c->max_frames ? frames - done : c->max_frames;
        time->sample_time = c->sample_time;
        c->process(c->user, c->in_block ? c->in_block + done : NULL, c->in_channels,
                   c->out_block ? c->out_block + done : NULL, c->out_channels, (int)c->stride, n, time);
        c->sample_time += n;
        time->now_ns += (uint64_t)((double)n * 1e9 / c->rate);
        done += n;
    }
}

// The cycle: the capture's buffer (if any) in, the playback's (if any) out, the engine between.
static void cycle(struct la_pw_client *c) {
    struct pw_buffer *in = c->capture.stream ? pw.pw_stream_dequeue_buffer(c->capture.stream) : NULL;
    struct pw_buffer *out = c->playback.stream ? pw.pw_stream_dequeue_buffer(c->playback.stream) : NULL;
    int frames = 0;
    if (out) {
        uint32_t room = out->buffer->datas[0].maxsize / sizeof(float);
        frames = (int)(out->requested ? out->requested : room);
        if ((uint32_t)frames > room) frames = (int)room;
    } else if (in && in->buffer->datas[0].chunk && !c->playback.stream) {
        frames = (int)(in->buffer->datas[0].chunk->size / sizeof(float));
    }
    if ((size_t)frames > c->stride) frames = (int)c->stride;
    struct pw_time t;
    memset(&t, 0, sizeof t);
    struct pw_stream *timed = c->playback.stream ? c->playback.stream : c->capture.stream;
    pw.pw_stream_get_time_n(timed, &t, sizeof t);
    double tick_rate = t.rate.num ? (double)t.rate.denom / t.rate.num : c->rate;
    if (frames > 0) {
        // Where the graph's clock says we are: a pause (our stream or the graph stopped) moves the sample time on
        // by the time it held, so what is recorded stays on the wall clock; a missed cycle or two is an xrun.
        // The first 200 ms are the streams settling into the graph (links made, the quantum changed): a late cycle
        // there is not a missed one.
        if (!c->first_now) c->first_now = t.now;
        if (c->last_now && t.now > c->last_now) {
            double expected = (double)c->last_frames * 1e9 / c->rate;
            double elapsed = (double)(t.now - c->last_now);
            if (elapsed > expected * 4 && elapsed > 20e6) {
                int64_t missing = (int64_t)llround((elapsed - expected) * c->rate / 1e9);
                c->sample_time += missing;
                __atomic_add_fetch(&c->gaps, 1, __ATOMIC_RELAXED);
                __atomic_add_fetch(&c->gap_frames, missing, __ATOMIC_RELAXED);
            } else if (elapsed > expected * 1.5 + 1e6 && t.now - c->first_now > 200000000) {
                __atomic_add_fetch(&c->xruns, 1, __ATOMIC_RELAXED);
            }
        }
        c->last_now = t.now;
        c->last_frames = (uint64_t)frames;
        int captured = 0;
        if (in && in->buffer->datas[0].chunk) captured = (int)(in->buffer->datas[0].chunk->size / sizeof(float));
        for (int i = 0; i < c->in_channels; i++) {
            float *to = c->in_block + (size_t)i * c->stride;
            int have = captured < frames ? captured : frames;
            const struct spa_data *d = in && (uint32_t)i < in->buffer->n_datas ? &in->buffer->datas[i] : NULL;
            const char *data = d ? d->data : NULL;
            if (data && d->chunk) {
                uint32_t offset = d->chunk->offset > d->maxsize ? 0 : d->chunk->offset;
                if ((uint32_t)have * sizeof(float) > d->maxsize - offset) have = (int)((d->maxsize - offset) / sizeof(float));
                data += offset;
            }
            if (!data) have = 0;
            if (have > 0) memcpy(to, data, (size_t)have * sizeof(float));
            if (have < frames) memset(to + have, 0, (size_t)(frames - have) * sizeof(float));
        }
        for (int i = 0; i < c->out_channels; i++) memset(c->out_block + (size_t)i * c->stride, 0, (size_t)frames * sizeof(float));
        la_pw_cycle_time time;
        memset(&time, 0, sizeof time);
        time.now_ns = (uint64_t)t.now;
        int64_t delay_ns = (int64_t)((double)t.delay * 1e9 / tick_rate);
        if (c->playback.stream) {
            time.output_delay_ns = delay_ns > 0 ? (uint64_t)delay_ns : 0;
            __atomic_store_n(&c->playback.delay_frames, t.delay, __ATOMIC_RELAXED);
        }
        if (c->capture.stream) {
            struct pw_time ti;
            memset(&ti, 0, sizeof ti);
            if (c->playback.stream) pw.pw_stream_get_time_n(c->capture.stream, &ti, sizeof ti);
            else ti = t;
            double r = ti.rate.num ? (double)ti.rate.denom / ti.rate.num : c->rate;
            int64_t d = (int64_t)((double)ti.delay * 1e9 / r);
            time.input_delay_ns = d > 0 ? (uint64_t)d : 0;
            __atomic_store_n(&c->capture.delay_frames, ti.delay, __ATOMIC_RELAXED);
        }
        run_engine(c, frames, &time);
        // Released after the cycle's gap and xrun counts: a reader that sees the cycle sees them.
        __atomic_add_fetch(&c->cycles, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&c->quantum, (uint32_t)llround((double)frames * tick_rate / c->rate), __ATOMIC_RELAXED);
        __atomic_store_n(&c->graph_rate, (uint32_t)llround(tick_rate), __ATOMIC_RELAXED);
    }
    if (out) {
        for (uint32_t i = 0; i < out->buffer->n_datas; i++) {
            struct spa_data *d = &out->buffer->datas[i];
            if (!d->data || !d->chunk) continue;
            if ((int)i < c->out_channels) memcpy(d->data, c->out_block + (size_t)i * c->stride, (size_t)frames * sizeof(float));
            else memset(d->data, 0, (size_t)frames * sizeof(float));
            d->chunk->offset = 0;
            d->chunk->stride = sizeof(float);
            d->chunk->size = (uint32_t)frames * sizeof(float);
        }
        out->size = (uint64_t)frames;
        pw.pw_stream_queue_buffer(c->playback.stream, out);
    }
    if (in) pw.pw_stream_queue_buffer(c->capture.stream, in);
}

static void capture_process(void *data) {
    la_stream *s = data;
    struct la_pw_client *c = (struct la_pw_client *)((char *)s - offsetof(struct la_pw_client, capture));
    // With playback, the capture's cycle triggers the playback's, which runs the engine with both buffers.
    if (c->playback.stream) pw.pw_stream_trigger_process(c->playback.stream);
    else cycle(c);
}

static void playback_process(void *data) {
    la_stream *s = data;
    struct la_pw_client *c = (struct la_pw_client *)((char *)s - offsetof(struct la_pw_client, playback));
    cycle(c);
}

static const struct pw_stream_events capture_events = {.version = PW_VERSION_STREAM_EVENTS,
                                                       .state_changed = stream_state_changed,
                                                       .process = capture_process};
static const struct pw_stream_events playback_events = {.version = PW_VERSION_STREAM_EVENTS,
                                                        .state_changed = stream_state_changed,
                                                         .process = playback_process};

static const struct spa_pod *format_param(struct spa_pod_builder *b, int channels, uint32_t rate) {
    struct spa_audio_info_raw info;
    memset(&info, 0, sizeof info);
    info.format = SPA_AUDIO_FORMAT_F32P;
    info.channels = (uint32_t)channels;
    info.rate = rate;
    if (channels == 1) {
        info.position[0] = SPA_AUDIO_CHANNEL_MONO;
    } else if (channels == 2) {
        info.position[0] = SPA_AUDIO_CHANNEL_FL;
        info.position[1] = SPA_AUDIO_CHANNEL_FR;
    } else {
        for (int i = 0; i < channels; i++) info.position[i] = SPA_AUDIO_CHANNEL_AUX0 + (uint32_t)i;
    }
    return spa_format_audio_raw_build(b, SPA_PARAM_EnumFormat, &info);
}

static int make_stream(struct la_pw_client *c, la_stream *s, int input, const la_pw_stream_config *config,
                       const char *group, char *error, size_t error_size) {
    s->input = input;
    int channels = input ? config->input_channels : config->output_channels;
    const char *target = input ? config->input_target : config->output_target;
    struct pw_properties *props = pw.pw_properties_new(
        PW_KEY_MEDIA_TYPE, "Audio", PW_KEY_MEDIA_CATEGORY, input ? "Capture" : "Playback", PW_KEY_MEDIA_ROLE,
        config->role && config->role[0] ? config->role : "Production", PW_KEY_NODE_GROUP, group, NULL);
    pw.pw_properties_setf(props, PW_KEY_NODE_LATENCY, "%u/%u", config->quantum, config->rate);
    pw.pw_properties_set(props, PW_KEY_APP_NAME, config->node_name ? config->node_name : "liveaudio");
    pw.pw_properties_setf(props, PW_KEY_NODE_NAME, "%s.%s", config->node_name ? config->node_name : "liveaudio",
                          input ? "capture" : "playback");
    pw.pw_properties_setf(props, PW_KEY_NODE_DESCRIPTION, "%s %s", config->media_name ? config->media_name : "LiveAudio",
                          input ? "capture" : "playback");
    pw.pw_properties_setf(props, PW_KEY_MEDIA_NAME, "%s %s", config->media_name ? config->media_name : "LiveAudio",
                          input ? "capture" : "playback");
    if (target && target[0]) {
        pw.pw_properties_set(props, PW_KEY_TARGET_OBJECT, target);
        // A named device stays named: when it goes, the stream waits for it instead of moving elsewhere.
        pw.pw_properties_set(props, PW_KEY_NODE_DONT_RECONNECT, "true");
    }
    s->stream = pw.pw_stream_new(c->core, input ? "liveaudio-capture" : "liveaudio-playback", props);
    if (!s->stream) {
        snprintf(error, error_size, "PipeWire could not make our %s stream (%s)", input ? "capture" : "playback",
                 strerror(errno));
        return -1;
    }
    spa_zero(s->listener);
    pw.pw_stream_add_listener(s->stream, &s->listener, input ? &capture_events : &playback_events, s);
    uint8_t buffer[1024];
    struct spa_pod_builder b = SPA_POD_BUILDER_INIT(buffer, sizeof buffer);
    const struct spa_pod *params[1] = {format_param(&b, channels, config->rate)};
    enum pw_stream_flags flags = PW_STREAM_FLAG_AUTOCONNECT | PW_STREAM_FLAG_MAP_BUFFERS | PW_STREAM_FLAG_RT_PROCESS;
    // Duplex: the playback runs when the capture triggers it, in the same cycle.
    if (!input && config->input_channels > 0) flags |= PW_STREAM_FLAG_TRIGGER;
    int r = pw.pw_stream_connect(s->stream, input ? PW_DIRECTION_INPUT : PW_DIRECTION_OUTPUT, PW_ID_ANY, flags,
                                 params, 1);
    if (r < 0) {
        snprintf(error, error_size, "PipeWire could not connect our %s stream (%s)", input ? "capture" : "playback",
                 spa_strerror(r));
        return -1;
    }
    return 0;
}

static void destroy_streams(struct la_pw_client *c) {
    la_stream *streams[2] = {&c->playback, &c->capture};
    for (int i = 0; i < 2; i++) {
        la_stream *s = streams[i];
        if (!s->stream) continue;
        pw.pw_stream_disconnect(s->stream);
        spa_hook_remove(&s->listener);
        pw.pw_stream_destroy(s->stream);
        memset(s, 0, sizeof *s);
    }
}

static int streams_running(struct la_pw_client *c) {
    return (!c->capture.stream || c->capture.state == LA_PW_STATE_STREAMING) &&
           (!c->playback.stream || c->playback.state == LA_PW_STATE_STREAMING);
}

int la_pw_client_start(la_pw_client *c, const la_pw_stream_config *config, la_pw_process_fn process,
                       la_pw_notify_fn notify_fn, void *user, int timeout_ms, char *error, size_t error_size) {
    if (config->input_channels < 0 || config->input_channels > LA_MAX_CHANNELS || config->output_channels < 0 ||
        config->output_channels > LA_MAX_CHANNELS || config->input_channels + config->output_channels == 0 ||
        config->max_frames <= 0 || config->rate == 0) {
        snprintf(error, error_size, "the PipeWire streams' configuration is not valid");
        return -1;
    }
    pw.pw_thread_loop_lock(c->loop);
    if (c->running) {
        pw.pw_thread_loop_unlock(c->loop);
        snprintf(error, error_size, "the PipeWire streams are already running");
        return -1;
    }
    c->process = process;
    c->notify = notify_fn;
    c->user = user;
    c->rate = config->rate;
    c->max_frames = config->max_frames;
    c->in_channels = config->input_channels;
    c->out_channels = config->output_channels;
    // Room for the longest cycle the graph may run (8192 frames at 8 kHz converted to our rate), and some.
    c->stride = (size_t)(8192.0 * config->rate / 8000.0) + 1024;
    c->in_block = c->in_channels ? calloc(c->stride * (size_t)c->in_channels, sizeof(float)) : NULL;
    c->out_block = c->out_channels ? calloc(c->stride * (size_t)c->out_channels, sizeof(float)) : NULL;
    if ((c->in_channels && !c->in_block) || (c->out_channels && !c->out_block)) {
        free(c->in_block);
        free(c->out_block);
        c->in_block = c->out_block = NULL;
        pw.pw_thread_loop_unlock(c->loop);
        snprintf(error, error_size, "out of memory");
        return -1;
    }
    c->sample_time = 0;
    c->first_now = 0;
    c->last_now = 0;
    char group[64];
    snprintf(group, sizeof group, "liveaudio-%d-%p", (int)getpid(), (void *)c);
    // The playback first: it is active before the capture triggers it.
    int failed = 0;
    if (config->output_channels > 0) failed = make_stream(c, &c->playback, 0, config, group, error, error_size);
    if (!failed && config->input_channels > 0)
        failed = make_stream(c, &c->capture, 1, config, group, error, error_size);
    if (!failed) {
        c->running = 1;
        struct timespec until;
        pw.pw_thread_loop_get_time(c->loop, &until, (int64_t)timeout_ms * 1000000);
        while (!streams_running(c) && !c->fault[0]) {
            if (pw.pw_thread_loop_timed_wait_full(c->loop, &until) != 0) break;
        }
        if (c->fault[0]) {
            snprintf(error, error_size, "%s", c->fault);
            failed = 1;
        }
    }
    if (failed) {
        destroy_streams(c);
        c->running = 0;
        c->notify = NULL;
    }
    pw.pw_thread_loop_unlock(c->loop);
    if (failed) {
        free(c->in_block);
        free(c->out_block);
        c->in_block = c->out_block = NULL;
    }
    return failed ? -1 : 0;
}

void la_pw_client_stop(la_pw_client *c) {
    if (!c || !c->loop) return;
    pw.pw_thread_loop_lock(c->loop);
    int was = c->running;
    // Disconnecting and destroying a stream takes it out of the data loop (an invoke that waits): no process call
    // runs after this.
    destroy_streams(c);
    c->running = 0;
    c->notify = NULL;
    pw.pw_thread_loop_unlock(c->loop);
    if (!was) return;
    free(c->in_block);
    free(c->out_block);
    c->in_block = c->out_block = NULL;
}

static void stream_status(struct la_pw_client *c, const la_stream *s, la_pw_stream_status *out) {
    memset(out, 0, sizeof *out);
    out->state = s->stream ? s->state : LA_PW_STATE_NONE;
    out->node_id = s->node_id == SPA_ID_INVALID ? 0 : s->node_id;
    out->peer_id = s->peer_id;
    out->peer_lost_reason = s->peer_lost_reason;
    out->delay_frames = __atomic_load_n(&s->delay_frames, __ATOMIC_RELAXED);
    const la_node *peer = s->peer_id ? find_node(c, s->peer_id) : NULL;
    if (peer) {
        copy_text(out->peer_name, sizeof out->peer_name, peer->name);
        copy_text(out->peer_form_factor, sizeof out->peer_form_factor, peer->form_factor);
        const la_pw_route *route = node_route(c, peer, !s->input);
        if (route) {
            copy_text(out->peer_port_name, sizeof out->peer_port_name, route->name);
            copy_text(out->peer_port_description, sizeof out->peer_port_description, route->description);
            copy_text(out->peer_port_type, sizeof out->peer_port_type, route->port_type);
        }
    }
}

void la_pw_client_status(la_pw_client *c, la_pw_status *status) {
    memset(status, 0, sizeof *status);
    pw.pw_thread_loop_lock(c->loop);
    stream_status(c, &c->capture, &status->input);
    stream_status(c, &c->playback, &status->output);
    copy_text(status->default_sink, sizeof status->default_sink, c->default_sink);
    copy_text(status->default_source, sizeof status->default_source, c->default_source);
    copy_text(status->fault, sizeof status->fault, c->fault);
    pw.pw_thread_loop_unlock(c->loop);
    status->quantum = __atomic_load_n(&c->quantum, __ATOMIC_RELAXED);
    status->graph_rate = __atomic_load_n(&c->graph_rate, __ATOMIC_RELAXED);
    status->cycles = __atomic_load_n(&c->cycles, __ATOMIC_ACQUIRE);  // first: the counts below cover its cycles
    status->xruns = __atomic_load_n(&c->xruns, __ATOMIC_RELAXED);
    status->gaps = __atomic_load_n(&c->gaps, __ATOMIC_RELAXED);
    status->gap_frames = __atomic_load_n(&c->gap_frames, __ATOMIC_RELAXED);
}
