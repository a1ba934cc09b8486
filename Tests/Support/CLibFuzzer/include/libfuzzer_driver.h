#ifndef LIVEAUDIO_LIBFUZZER_DRIVER_H
#define LIVEAUDIO_LIBFUZZER_DRIVER_H
// libFuzzer's entry for a program with a main of its own (FuzzerInterface.h): it parses libFuzzer's flags from argv
// and runs `callback` on every input. Defined by the fuzzer runtime that -sanitize=fuzzer links; referenced only in
// fuzz builds (scripts/fuzz.sh).
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
