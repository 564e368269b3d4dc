/*
 * replay.h: what the conformance replay's operation files share: the replay
 * state, the vector-file tokenizer, tensor and outcome parsing and checking.
 * replay.c holds the core operations and main(); each replay_<family>.c adds
 * the operations of one family of cache kinds as a table of replay_op.
 */
#ifndef KVC_REPLAY_H
#define KVC_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"

#define MAX_SLOTS 16
#define MAX_LAYERS 64
#define MAX_FILES 256

/* ------------------------------------------------------------------ state */

typedef struct slot {
  kvc_cache* cache;
  kvc_encoder_decoder_cache* ed;
} slot;

/* An expected or input tensor of the vector file. */
enum { T_NONE, T_DATA, T_EMPTY1D, T_EMPTY4D };
typedef struct vtensor {
  int kind;
  kvc_dtype dtype;
  int64_t shape[4];
  unsigned char* data;
  size_t bytes;
  long index;      /* expected tensors: their number in the file, for the self-check */
  kvc_tensor view; /* an input descriptor onto data */
} vtensor;

/* An expected integer and its number in the file. */
typedef struct vint {
  int64_t v;
  long index;
} vint;

/* Numbers of expected values that a clean replay checked successfully. */
typedef struct goodlist {
  long* at;
  size_t n, cap;
} goodlist;

typedef struct replay {
  const char* file;
  char* cur;
  char* end;
  int quiet;
  long op;         /* operation number within the file, from 1 */
  const char* op_name;
  char case_name[128];
  int case_failed; /* the rest of a failed case is parsed but not run */
  long checked;
  long failed;
  int malformed;
  slot slots[MAX_SLOTS];
  /* self-check: counters of expected values seen, which one to corrupt, and
   * (in the clean run) which ones were checked successfully */
  long tensors_seen, ints_seen;
  long corrupt_tensor, corrupt_int;
  goodlist good_tensors, good_ints;
} replay;

typedef struct optspec {
  kvc_cache_options options;
  kvc_model_config config;
  kvc_layer_type types[MAX_LAYERS];
  kvc_layer_options layers[MAX_LAYERS];
} optspec;

typedef struct outcome {
  int ok;
  kvc_code code;
  char cls[48];
} outcome;

/* One operation of the vector format: its keyword and the function that parses and runs it. */
typedef struct replay_op {
  const char* name;
  void (*run)(replay*);
} replay_op;

/* The families' tables, each ended by {NULL, NULL}. */
extern const replay_op replay_ops_quantized[];
extern const replay_op replay_ops_sink[];
extern const replay_op replay_ops_linear[];
extern const replay_op replay_ops_offload[];

void note_good(goodlist* g, long index);
void fail(replay* r, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void malformed(replay* r, const char* what);
char* tok(replay* r);
int64_t num(replay* r);
uint64_t unum(replay* r);
vint expected_num(replay* r);
int is(const char* t, const char* s);
kvc_dtype parse_dtype(replay* r);
const char* dtype_name(kvc_dtype d);
void tensor_free(vtensor* t);
void parse_tensor(replay* r, vtensor* t);
int check_tensor(replay* r, const char* what, const kvc_tensor* got, const vtensor* exp);
kvc_code code_of(const char* name);
void parse_outcome(replay* r, outcome* o);
int check_outcome(replay* r, kvc_error* e, const outcome* o);
int must(replay* r, kvc_error* e, const char* call);
void check_int(replay* r, const char* what, int64_t got, vint want);
void slot_clear(slot* s);
slot* slot_at(replay* r, int64_t i);
kvc_cache* cache_at(replay* r, int64_t i);
kvc_layer_kind kind_of(replay* r, const char* t);
void parse_options(replay* r, optspec* o);
int parse_indices(replay* r, int64_t* idx, int64_t* count);

#endif /* KVC_REPLAY_H */
