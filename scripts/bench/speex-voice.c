/* The peer in `make bench`'s voice-processing part: speexdsp's echo canceller and preprocessor (denoise, automatic
 * gain control, residual echo suppression) over a microphone and a reference, the usual alternative to WebRTC's
 * module. Raw 16-bit mono little-endian files in and out, 10 ms frames.
 *
 *   speex-voice RATE TAIL_MS MIC.raw REF.raw OUT.raw [aec-only]
 *
 * TAIL_MS is the echo canceller's filter length: speexdsp does not find the echo's delay, so the filter must cover
 * the delay and the room's tail. With "aec-only" the preprocessor is off. */
#include <speex/speex_echo.h>
#include <speex/speex_preprocess.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: speex-voice RATE TAIL_MS MIC.raw REF.raw OUT.raw [aec-only]\n");
        return 2;
    }
    int rate = atoi(argv[1]);
    int tail = rate * atoi(argv[2]) / 1000;
    int frame = rate / 100;
    int preprocess = !(argc > 6 && strcmp(argv[6], "aec-only") == 0);
    FILE *mic = fopen(argv[3], "rb"), *ref = fopen(argv[4], "rb"), *out = fopen(argv[5], "wb");
    if (!mic || !ref || !out) {
        perror("speex-voice");
        return 1;
    }
    SpeexEchoState *echo = speex_echo_state_init(frame, tail);
    speex_echo_ctl(echo, SPEEX_ECHO_SET_SAMPLING_RATE, &rate);
    SpeexPreprocessState *pp = speex_preprocess_state_init(frame, rate);
    int on = 1;
    speex_preprocess_ctl(pp, SPEEX_PREPROCESS_SET_DENOISE, &on);
    speex_preprocess_ctl(pp, SPEEX_PREPROCESS_SET_AGC, &on);
    speex_preprocess_ctl(pp, SPEEX_PREPROCESS_SET_ECHO_STATE, echo);
    spx_int16_t *m = calloc(frame, sizeof *m), *r = calloc(frame, sizeof *r), *o = calloc(frame, sizeof *o);
    for (;;) {
        size_t got = fread(m, sizeof *m, frame, mic);
        if (got == 0) break;
        if (got < (size_t)frame) memset(m + got, 0, (frame - got) * sizeof *m);
        size_t gotRef = fread(r, sizeof *r, frame, ref);
        if (gotRef < (size_t)frame) memset(r + gotRef, 0, (frame - gotRef) * sizeof *r);
        speex_echo_cancellation(echo, m, r, o);
        if (preprocess) speex_preprocess_run(pp, o);
        fwrite(o, sizeof *o, got, out);
    }
    speex_preprocess_state_destroy(pp);
    speex_echo_state_destroy(echo);
    free(m);
    free(r);
    free(o);
    fclose(mic);
    fclose(ref);
    return fclose(out) == 0 ? 0 : 1;
}
