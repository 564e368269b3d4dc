// The same checks as header_check.c, compiled as C++: a C++ user includes
// kvcache.h without an extern "C" of their own.
#include "header_check.c"
