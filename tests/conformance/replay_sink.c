/* replay_sink.c: the conformance operations of SinkCache. */
#include "replay.h"

const replay_op replay_ops_sink[] = {{NULL, NULL}};
