// libqrencode (Debian libqrencode-dev): QR code symbols, for the stage's join address.
#include <qrencode.h>
