/* replay_linear.c: the conformance operations of linear-attention (recurrent state) layers. */
#include "replay.h"

const replay_op replay_ops_linear[] = {{NULL, NULL}};
