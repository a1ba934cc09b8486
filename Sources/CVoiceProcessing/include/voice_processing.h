// A small C API over WebRTC's audio processing module, for the voiceProcessing unit. One 10 ms frame at a time.
//
// Threading: a handle is used by one thread at a time. Create and destroy on the control side; everything else on
// the render thread (the setters included, so the library's own lock is never contended).
#ifndef LIVEAUDIO_VOICE_PROCESSING_H
#define LIVEAUDIO_VOICE_PROCESSING_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct la_voice_processor la_voice_processor;

/// The library's settings, each applied when it differs from what the handle has.
typedef struct la_voice_settings {
    int echo_cancellation;   // 0 off, 1 on
    int suppression_level;   // the echo suppressor: 0 low, 1 moderate, 2 high
    int noise_suppression;   // -1 off, 0 low, 1 moderate, 2 high, 3 very high
    int gain_control;        // -1 off, 0 adaptive digital, 1 fixed digital
    int target_level_dbfs;   // 0 … 31: the level the gain control aims for, in dB below full scale
    int compression_gain_db; // 0 … 90
    int limiter;             // 0 off, 1 on
    int high_pass_filter;    // 0 off, 1 on
} la_voice_settings;

/// Makes a processor for `sample_rate` (8000, 16000, 32000 or 48000) with `channels` capture channels (1 or 2) and
/// `reverse_channels` reference channels (1 or 2), echo cancellation in its extended-filter and delay-agnostic modes,
/// voice detection on. NULL on failure, with a message in `error`.
la_voice_processor *la_voice_create(int sample_rate, int channels, int reverse_channels, char *error, int error_size);
void la_voice_destroy(la_voice_processor *p);

/// Frames per channel in one 10 ms frame.
int la_voice_frame_frames(const la_voice_processor *p);

/// Applies the settings that changed. 0, or the library's error code of the first setter that failed.
int la_voice_apply(la_voice_processor *p, const la_voice_settings *settings);

/// Analyses one 10 ms frame of the reference (what is played), planar.
int la_voice_process_reverse(la_voice_processor *p, const float *const *reference);

/// Processes one 10 ms frame of the capture in place, planar.
int la_voice_process(la_voice_processor *p, float *const *capture);

/// After la_voice_process: 1 when the frame holds voice.
int la_voice_has_voice(const la_voice_processor *p);

/// 1 when the canceller judged the last captured frame to hold echo (only while echo cancellation is on).
int la_voice_has_echo(const la_voice_processor *p);

#ifdef __cplusplus
}
#endif

#endif
