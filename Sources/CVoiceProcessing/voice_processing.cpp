// The extern "C" API of voice_processing.h over WebRTC's audio processing module (0.3).
#ifndef WEBRTC_POSIX
#define WEBRTC_POSIX 1
#endif
#ifndef WEBRTC_AUDIO_PROCESSING_ONLY_BUILD
#define WEBRTC_AUDIO_PROCESSING_ONLY_BUILD 1
#endif

#include "voice_processing.h"

#include <webrtc/modules/audio_processing/include/audio_processing.h>

#include <cstdio>
#include <new>

struct la_voice_processor {
    webrtc::AudioProcessing *apm = nullptr;
    webrtc::StreamConfig capture;
    webrtc::StreamConfig reverse;
    la_voice_settings applied;
    int frame = 0;
};

namespace {

void fail(char *error, int size, const char *what, int code) {
    if (error && size > 0) std::snprintf(error, size_t(size), "%s (the library's error %d)", what, code);
}

// Nothing applied yet: every setting differs from these.
la_voice_settings nothing_applied() {
    la_voice_settings s;
    s.echo_cancellation = -99;
    s.suppression_level = -99;
    s.noise_suppression = -99;
    s.gain_control = -99;
    s.target_level_dbfs = -99;
    s.compression_gain_db = -99;
    s.limiter = -99;
    s.high_pass_filter = -99;
    return s;
}

}  // namespace

extern "C" la_voice_processor *la_voice_create(
    int sample_rate, int channels, int reverse_channels, char *error, int error_size) {
    if (sample_rate != 8000 && sample_rate != 16000 && sample_rate != 32000 && sample_rate != 48000) {
        fail(error, error_size, "the rate must be 8000, 16000, 32000 or 48000 Hz", 0);
        return nullptr;
    }
    if (channels < 1 || channels > 2 || reverse_channels < 1 || reverse_channels > 2) {
        fail(error, error_size, "capture and reference must have 1 or 2 channels", 0);
        return nullptr;
    }
    webrtc::Config config;
    // The extended filter covers longer echo tails; delay-agnostic mode finds the echo's delay itself, so a wrong
    // hint does not break the canceller.
    config.Set<webrtc::ExtendedFilter>(new webrtc::ExtendedFilter(true));
    config.Set<webrtc::DelayAgnostic>(new webrtc::DelayAgnostic(true));
    // The library's experimental gain controller is on by default and takes over from the one the settings
    // configure (mode, target level, compression gain would do nothing): off.
    config.Set<webrtc::ExperimentalAgc>(new webrtc::ExperimentalAgc(false));
    webrtc::AudioProcessing *apm = webrtc::AudioProcessing::Create(config);
    if (!apm) {
        fail(error, error_size, "could not create the audio processing module", 0);
        return nullptr;
    }
    la_voice_processor *p = new (std::nothrow) la_voice_processor;
    if (!p) {
        delete apm;
        fail(error, error_size, "out of memory", 0);
        return nullptr;
    }
    p->apm = apm;
    p->capture = webrtc::StreamConfig(sample_rate, channels);
    p->reverse = webrtc::StreamConfig(sample_rate, reverse_channels);
    p->frame = sample_rate / 100;
    p->applied = nothing_applied();
    webrtc::ProcessingConfig processing = {{p->capture, p->capture, p->reverse, p->reverse}};
    int r = apm->Initialize(processing);
    if (r != webrtc::AudioProcessing::kNoError) {
        la_voice_destroy(p);
        fail(error, error_size, "could not initialise the audio processing module", r);
        return nullptr;
    }
    apm->voice_detection()->Enable(true);
    return p;
}

extern "C" void la_voice_destroy(la_voice_processor *p) {
    if (!p) return;
    delete p->apm;
    delete p;
}

extern "C" int la_voice_frame_frames(const la_voice_processor *p) { return p->frame; }

extern "C" int la_voice_apply(la_voice_processor *p, const la_voice_settings *s) {
    webrtc::AudioProcessing *apm = p->apm;
    la_voice_settings &a = p->applied;
    int first = 0;
    auto check = [&first](int r) {
        if (r != webrtc::AudioProcessing::kNoError && first == 0) first = r;
    };
    if (s->echo_cancellation != a.echo_cancellation) {
        check(apm->echo_cancellation()->Enable(s->echo_cancellation != 0));
        a.echo_cancellation = s->echo_cancellation;
    }
    if (s->suppression_level != a.suppression_level) {
        check(apm->echo_cancellation()->set_suppression_level(
            webrtc::EchoCancellation::SuppressionLevel(s->suppression_level)));
        a.suppression_level = s->suppression_level;
    }
    if (s->noise_suppression != a.noise_suppression) {
        if (s->noise_suppression < 0) {
            check(apm->noise_suppression()->Enable(false));
        } else {
            check(apm->noise_suppression()->set_level(webrtc::NoiseSuppression::Level(s->noise_suppression)));
            check(apm->noise_suppression()->Enable(true));
        }
        a.noise_suppression = s->noise_suppression;
    }
    if (s->gain_control != a.gain_control) {
        if (s->gain_control < 0) {
            check(apm->gain_control()->Enable(false));
        } else {
            check(apm->gain_control()->set_mode(
                s->gain_control == 0 ? webrtc::GainControl::kAdaptiveDigital : webrtc::GainControl::kFixedDigital));
            check(apm->gain_control()->Enable(true));
        }
        a.gain_control = s->gain_control;
    }
    if (s->target_level_dbfs != a.target_level_dbfs) {
        check(apm->gain_control()->set_target_level_dbfs(s->target_level_dbfs));
        a.target_level_dbfs = s->target_level_dbfs;
    }
    if (s->compression_gain_db != a.compression_gain_db) {
        check(apm->gain_control()->set_compression_gain_db(s->compression_gain_db));
        a.compression_gain_db = s->compression_gain_db;
    }
    if (s->limiter != a.limiter) {
        check(apm->gain_control()->enable_limiter(s->limiter != 0));
        a.limiter = s->limiter;
    }
    if (s->high_pass_filter != a.high_pass_filter) {
        check(apm->high_pass_filter()->Enable(s->high_pass_filter != 0));
        a.high_pass_filter = s->high_pass_filter;
    }
    return first;
}

extern "C" int la_voice_process_reverse(la_voice_processor *p, const float *const *reference) {
    // The reference is analysed, not changed (the library would change it only for intelligibility enhancement,
    // which is off); the caller's frame is its own copy all the same.
    return p->apm->ProcessReverseStream(reference, p->reverse, p->reverse, const_cast<float *const *>(reference));
}

extern "C" int la_voice_process(la_voice_processor *p, float *const *capture) {
    // Required before every frame while the canceller is on; the unit aligns the reference itself, so 0.
    if (p->apm->echo_cancellation()->is_enabled()) p->apm->set_stream_delay_ms(0);
    return p->apm->ProcessStream(capture, p->capture, p->capture, capture);
}

extern "C" int la_voice_has_voice(const la_voice_processor *p) {
    return p->apm->voice_detection()->stream_has_voice() ? 1 : 0;
}

extern "C" int la_voice_has_echo(const la_voice_processor *p) {
    const webrtc::EchoCancellation *aec = p->apm->echo_cancellation();
    return aec->is_enabled() && aec->stream_has_echo() ? 1 : 0;
}
