/* replay_quantized.c: the conformance operations of quantized layers. */
#include "replay.h"

const replay_op replay_ops_quantized[] = {{NULL, NULL}};
