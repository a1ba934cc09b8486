// librubberband (Debian librubberband-dev, GPL-2+): time-stretching and pitch-shifting, through its C API.
#include <rubberband/rubberband-c.h>
