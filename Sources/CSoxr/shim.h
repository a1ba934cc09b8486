// libsoxr (Debian libsoxr-dev): high-quality sample-rate conversion.
#include <soxr.h>
