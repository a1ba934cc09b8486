// Header-only target: libfuzzer_driver.h declares what the fuzzer runtime defines.
