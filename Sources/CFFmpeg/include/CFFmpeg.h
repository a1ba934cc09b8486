// FFmpeg's libavcodec, libavformat, libavutil and libswresample for Swift: the headers (types and constants), the
// functions as a table filled when the libraries are first needed, and what Swift cannot import (function-like
// macros) as inline functions.
//
// The libraries are loaded with dlopen, not linked: Debian's FFmpeg brings some 140 shared libraries with it (x264,
// x265, cairo, X11, gnutls, …), which cost every run of the tool about 40 MB of resident memory and 40 ms of
// start-up — a run that only reads and writes WAV files, plays or records needs none of them.
#ifndef LIVEAUDIO_CFFMPEG_H
#define LIVEAUDIO_CFFMPEG_H
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/opt.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>

/// The FFmpeg functions LiveAudio calls, each with the type its header declares.
typedef struct la_ffmpeg {
    __typeof__(avformat_free_context) * _Nonnull avformat_free_context;
    __typeof__(av_packet_free) * _Nonnull av_packet_free;
    __typeof__(av_packet_unref) * _Nonnull av_packet_unref;
    __typeof__(av_packet_alloc) * _Nonnull av_packet_alloc;
    __typeof__(av_channel_layout_default) * _Nonnull av_channel_layout_default;
    __typeof__(avio_closep) * _Nonnull avio_closep;
    __typeof__(avcodec_free_context) * _Nonnull avcodec_free_context;
    __typeof__(avformat_open_input) * _Nonnull avformat_open_input;
    __typeof__(avformat_find_stream_info) * _Nonnull avformat_find_stream_info;
    __typeof__(avformat_close_input) * _Nonnull avformat_close_input;
    __typeof__(avcodec_send_packet) * _Nonnull avcodec_send_packet;
    __typeof__(avcodec_send_frame) * _Nonnull avcodec_send_frame;
    __typeof__(avcodec_profile_name) * _Nonnull avcodec_profile_name;
    __typeof__(avcodec_open2) * _Nonnull avcodec_open2;
    __typeof__(avcodec_alloc_context3) * _Nonnull avcodec_alloc_context3;
    __typeof__(av_rescale_q) * _Nonnull av_rescale_q;
    __typeof__(av_read_frame) * _Nonnull av_read_frame;
    __typeof__(av_frame_free) * _Nonnull av_frame_free;
    __typeof__(av_frame_alloc) * _Nonnull av_frame_alloc;
    __typeof__(av_find_best_stream) * _Nonnull av_find_best_stream;
    __typeof__(av_channel_layout_uninit) * _Nonnull av_channel_layout_uninit;
    __typeof__(av_channel_layout_copy) * _Nonnull av_channel_layout_copy;
    __typeof__(swr_init) * _Nonnull swr_init;
    __typeof__(swr_get_out_samples) * _Nonnull swr_get_out_samples;
    __typeof__(swr_free) * _Nonnull swr_free;
    __typeof__(swr_convert) * _Nonnull swr_convert;
    __typeof__(swr_alloc_set_opts2) * _Nonnull swr_alloc_set_opts2;
    __typeof__(avio_seek) * _Nonnull avio_seek;
    __typeof__(avio_open) * _Nonnull avio_open;
    __typeof__(avformat_write_header) * _Nonnull avformat_write_header;
    __typeof__(avformat_new_stream) * _Nonnull avformat_new_stream;
    __typeof__(avformat_alloc_output_context2) * _Nonnull avformat_alloc_output_context2;
    __typeof__(avcodec_receive_packet) * _Nonnull avcodec_receive_packet;
    __typeof__(avcodec_receive_frame) * _Nonnull avcodec_receive_frame;
    __typeof__(avcodec_parameters_to_context) * _Nonnull avcodec_parameters_to_context;
    __typeof__(avcodec_get_name) * _Nonnull avcodec_get_name;
    __typeof__(avcodec_find_encoder_by_name) * _Nonnull avcodec_find_encoder_by_name;
    __typeof__(avcodec_find_decoder_by_name) * _Nonnull avcodec_find_decoder_by_name;
    __typeof__(av_write_trailer) * _Nonnull av_write_trailer;
    __typeof__(av_write_frame) * _Nonnull av_write_frame;
    __typeof__(av_packet_get_side_data) * _Nonnull av_packet_get_side_data;
    __typeof__(av_new_packet) * _Nonnull av_new_packet;
    __typeof__(av_mallocz) * _Nonnull av_mallocz;
    __typeof__(av_frame_unref) * _Nonnull av_frame_unref;
    __typeof__(av_frame_make_writable) * _Nonnull av_frame_make_writable;
    __typeof__(av_frame_get_buffer) * _Nonnull av_frame_get_buffer;
    __typeof__(av_dict_set) * _Nonnull av_dict_set;
    __typeof__(av_dict_free) * _Nonnull av_dict_free;
    __typeof__(av_strerror) * _Nonnull av_strerror;
    __typeof__(av_log_set_level) * _Nonnull av_log_set_level;
} la_ffmpeg;

/// Loads FFmpeg's libraries (the major versions these headers are) and finds the functions: once, from any thread.
/// Returns the table, or NULL with `*error` saying what is missing.
const la_ffmpeg *_Nullable la_ffmpeg_load(const char *_Nullable *_Nonnull error);

/// AVERROR(e) for a POSIX error number.
static inline int la_averror(int e) { return AVERROR(e); }
/// AVERROR_EOF.
static inline int la_averror_eof(void) { return AVERROR_EOF; }
/// AVERROR_DECODER_NOT_FOUND.
static inline int la_averror_decoder_not_found(void) { return AVERROR_DECODER_NOT_FOUND; }
/// AVERROR_INVALIDDATA.
static inline int la_averror_invalid_data(void) { return AVERROR_INVALIDDATA; }
#endif
