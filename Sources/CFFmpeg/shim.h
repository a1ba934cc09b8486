// FFmpeg's libavcodec, libavformat, libavutil and libswresample for Swift: the headers, plus what Swift cannot
// import (function-like macros) as inline functions.
#ifndef LIVEAUDIO_CFFMPEG_SHIM_H
#define LIVEAUDIO_CFFMPEG_SHIM_H
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/opt.h>
#include <libavutil/samplefmt.h>
#include <libswresample/swresample.h>

/// AVERROR(e) for a POSIX error number.
static inline int la_averror(int e) { return AVERROR(e); }
/// AVERROR_EOF.
static inline int la_averror_eof(void) { return AVERROR_EOF; }
/// AVERROR_DECODER_NOT_FOUND.
static inline int la_averror_decoder_not_found(void) { return AVERROR_DECODER_NOT_FOUND; }
/// AVERROR_INVALIDDATA.
static inline int la_averror_invalid_data(void) { return AVERROR_INVALIDDATA; }
/// FFmpeg's description of an error code.
static inline void la_av_strerror(int code, char *buffer, size_t size) { av_strerror(code, buffer, size); }
/// Only errors from the libraries' own logging (the encoder prints statistics on close otherwise).
static inline void la_av_quiet(void) { av_log_set_level(AV_LOG_ERROR); }
#endif
