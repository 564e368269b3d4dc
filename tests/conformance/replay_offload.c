/* replay_offload.c: the conformance operations of offloaded caches. */
#include "replay.h"

const replay_op replay_ops_offload[] = {{NULL, NULL}};
