// Loads FFmpeg's libraries when they are first needed (see CFFmpeg.h).
#include "CFFmpeg.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define LA_TEXT(x) #x
#define LA_VERSION(x) LA_TEXT(x)

static la_ffmpeg table;
static const la_ffmpeg *loaded;
static char failure[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    static const char *const names[] = {
        "libavutil.so." LA_VERSION(LIBAVUTIL_VERSION_MAJOR),
        "libswresample.so." LA_VERSION(LIBSWRESAMPLE_VERSION_MAJOR),
        "libavcodec.so." LA_VERSION(LIBAVCODEC_VERSION_MAJOR),
        "libavformat.so." LA_VERSION(LIBAVFORMAT_VERSION_MAJOR),
    };
    void *libraries[4];
    for (int i = 0; i < 4; i++) {
        libraries[i] = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!libraries[i]) {
            const char *why = dlerror();
            snprintf(failure, sizeof failure, "%s", why ? why : names[i]);
            return;
        }
    }
    // Each function from the first library that has it.
#define RESOLVE(name)                                                                                                  \
    do {                                                                                                               \
        void *found = NULL;                                                                                            \
        for (int i = 0; i < 4 && !found; i++) found = dlsym(libraries[i], #name);                                      \
        if (!found) {                                                                                                  \
            snprintf(failure, sizeof failure, "FFmpeg's libraries have no function %s", #name);                       \
            return;                                                                                                    \
        }                                                                                                              \
        table.name = (__typeof__(table.name))found;                                                                    \
    } while (0)
    RESOLVE(avformat_free_context);
    RESOLVE(av_packet_free);
    RESOLVE(av_packet_unref);
    RESOLVE(av_packet_alloc);
    RESOLVE(av_channel_layout_default);
    RESOLVE(avio_closep);
    RESOLVE(avcodec_free_context);
    RESOLVE(avformat_open_input);
    RESOLVE(avformat_find_stream_info);
    RESOLVE(avformat_close_input);
    RESOLVE(avcodec_send_packet);
    RESOLVE(avcodec_send_frame);
    RESOLVE(avcodec_profile_name);
    RESOLVE(avcodec_open2);
    RESOLVE(avcodec_alloc_context3);
    RESOLVE(av_rescale_q);
    RESOLVE(av_read_frame);
    RESOLVE(av_frame_free);
    RESOLVE(av_frame_alloc);
    RESOLVE(av_find_best_stream);
    RESOLVE(av_channel_layout_uninit);
    RESOLVE(av_channel_layout_copy);
    RESOLVE(swr_init);
    RESOLVE(swr_get_out_samples);
    RESOLVE(swr_free);
    RESOLVE(swr_convert);
    RESOLVE(swr_alloc_set_opts2);
    RESOLVE(avio_seek);
    RESOLVE(avio_open);
    RESOLVE(avformat_write_header);
    RESOLVE(avformat_new_stream);
    RESOLVE(avformat_alloc_output_context2);
    RESOLVE(avcodec_receive_packet);
    RESOLVE(avcodec_receive_frame);
    RESOLVE(avcodec_parameters_to_context);
    RESOLVE(avcodec_get_name);
    RESOLVE(avcodec_find_encoder_by_name);
    RESOLVE(avcodec_find_decoder_by_name);
    RESOLVE(av_write_trailer);
    RESOLVE(av_write_frame);
    RESOLVE(av_packet_get_side_data);
    RESOLVE(av_new_packet);
    RESOLVE(av_mallocz);
    RESOLVE(av_frame_unref);
    RESOLVE(av_frame_make_writable);
    RESOLVE(av_frame_get_buffer);
    RESOLVE(av_dict_set);
    RESOLVE(av_dict_free);
    RESOLVE(av_strerror);
    RESOLVE(av_log_set_level);
#undef RESOLVE
    // Only errors from the libraries' own logging (the encoder prints statistics on close otherwise).
    table.av_log_set_level(AV_LOG_ERROR);
    loaded = &table;
}

const la_ffmpeg *la_ffmpeg_load(const char **error) {
    pthread_once(&once, load);
    if (!loaded) *error = failure;
    return loaded;
}
