/*
 * replay.h: the conformance replay engine (replay_engine.c) that every
 * operation is built from: the replay state, the vector-file tokenizer,
 * tensor and outcome parsing, bit-exact checking, slots, options and the
 * steps operations share. replay.c runs the files; replay_core.c and each
 * replay_<family>.c contribute a table of replay_op.
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

/* An N-D tensor of the vector file (state and indexer tensors): NDIM, then a 4-D tensor token of the N-D shape
 * padded with trailing 1s; NDIM 0 is "no tensor" (data NULL, ndim 0) and `-` alone "not checked". */
typedef struct ndtensor {
  int unchecked;
  int ndim; /* 0: no tensor */
  vtensor t;
  kvc_tensor view; /* the input descriptor: t's data with ndim dimensions */
} ndtensor;

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
  uint32_t transformers_release; /* from the file's meta line: every cache follows the release that made it */
  int release_pick;              /* which of the meta line's releases this run follows (from 0) */
  int release_count;             /* how many the meta line names: each replays the whole file */
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

/* The tables, each ended by {NULL, NULL}. */
extern const replay_op replay_ops_core[];
extern const replay_op replay_ops_quantized[];
extern const replay_op replay_ops_sink[];
extern const replay_op replay_ops_linear[];
extern const replay_op replay_ops_offload[];
extern const replay_op replay_ops_assisted[];
extern const replay_op replay_ops_indexed[];

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
void parse_nd(replay* r, ndtensor* x);
/* Compares a returned N-D view with the expected tensor through a 4-D descriptor of the same memory. */
int check_nd(replay* r, const char* what, const kvc_tensor* got, const ndtensor* exp);
kvc_code code_of(const char* name);
void parse_outcome(replay* r, outcome* o);
int check_outcome(replay* r, kvc_error* e, const outcome* o);
/* OUTCOME [RET] after the input X of an N-D update `op`: RET is "not checked" when absent, and X must be a tensor. */
void parse_nd_result(replay* r, const ndtensor* x, const char* op, outcome* oc, ndtensor* ret);
/* Checks an N-D update's outcome (consuming e), then the tensor it returned ("WHAT" in a mismatch). */
void check_nd_result(replay* r, kvc_error* e, const outcome* oc, const kvc_tensor* out, const ndtensor* ret,
                     const char* what);
void nd_free(ndtensor* a, ndtensor* b);
/* An N-D update whose input comes next: X OUTCOME [RET]; when the case runs, call(cache of slot si, X, &out, arg)
 * and the check of its outcome and of what it returned ("WHAT" in a mismatch). */
typedef kvc_error* (*nd_update_fn)(kvc_cache* c, const kvc_tensor* x, kvc_tensor* out, const void* arg);
void replay_nd_update(replay* r, int64_t si, const char* op, const char* what, nd_update_fn call, const void* arg);
int must(replay* r, kvc_error* e, const char* call);
void check_int(replay* r, const char* what, int64_t got, vint want);
void slot_clear(slot* s);
void slots_clear(replay* r);
slot* slot_at(replay* r, int64_t i);
kvc_cache* cache_at(replay* r, int64_t i);
kvc_layer_kind kind_of(replay* r, const char* t);
void parse_options(replay* r, optspec* o);
/* `N i1..iN` with N from 1 to max (else malformed: "WHAT"); 0 when malformed. */
int parse_list(replay* r, int64_t* out, int64_t* count, int64_t max, const char* what);
int parse_indices(replay* r, int64_t* idx, int64_t* count);

/* `S L N`: a query of slot S's layer L that expects N. When the case runs, query(r, S, L, &got) is called ("CALL"
 * when it fails) and got checked against N ("WHAT" in a mismatch). */
typedef kvc_error* (*layer_query_fn)(replay* r, int64_t si, int64_t layer, int64_t* got);
void replay_layer_query(replay* r, layer_query_fn query, const char* call, const char* what);
/* The layer argument of a query that takes -1 for KVC_ALL_LAYERS. */
int32_t layer_or_all(int64_t layer);

/* Which create operation accepts a preset name: `create`'s `preset` (and `ocreate`) or `lcreate`. */
enum { PRESETS_ATTENTION = 1, PRESETS_LINEAR = 2 };
kvc_preset preset_of(replay* r, const char* name, unsigned family);
/* Reads TYPES (`-` or a letter a layer, letter i of `letters` being layer type i) into cfg->layer_types. */
void parse_layer_types(replay* r, const char* letters, kvc_model_config* cfg, kvc_layer_type* out);

/* ---------------------------------------------------------- shared steps */

/* 1 when the operation is to run: the file is well formed and the case has not failed. */
int runnable(const replay* r);
/* Replaces slot s's cache by a new one made from o. */
void create_in(replay* r, slot* s, const kvc_cache_options* o);
/* `-` or `p N p1..pN` (the legacy cache_position protocol, min_count <= N <= 256) into *out and *len. */
void parse_positions(replay* r, int64_t min_count, int64_t pos[256], const int64_t** out, uint32_t* len);
/* An update's K and V inputs, its outcome, the expected returned K and V, and where the call returns them. */
typedef struct kv_update {
  vtensor k, v;
  outcome o;
  vtensor rk, rv;
  kvc_kv out;
} kv_update;
/* Zeroes u and reads its K and V; the operation's options, then parse_kv_result(r, &u->o, &u->rk, &u->rv) follow. */
void parse_kv_update(replay* r, kv_update* u);
void kv_update_free(kv_update* u);
/* The rest of a kvc_cache_update with options uo: OUTCOME [RK RV], the call and its check; frees u. */
void finish_kv_update(replay* r, int64_t si, int64_t layer, kv_update* u, const kvc_update_options* uo);
/* An outcome, then on success the expected K and V (zeroed otherwise, so tensor_free is always safe). */
void parse_kv_result(replay* r, outcome* o, vtensor* k, vtensor* v);
/* Checks e against o (consuming e), then got's keys and values ("WHAT keys", "WHAT values"). */
int check_kv_result(replay* r, kvc_error* e, const outcome* o, const kvc_kv* got, const vtensor* k,
                    const vtensor* v, const char* what);
/* An outcome, then on success one expected integer ({0, -1}, never checked, otherwise). */
vint parse_outcome_num(replay* r, outcome* o);
/* A layer count, 0 to MAX_LAYERS; -1 (and the file malformed) otherwise. */
int64_t layer_count(replay* r);
vint expected_layer_count(replay* r, int64_t* recorded);
/* kvc_cache_layer_info of layer i; 0 after failing the case when the call fails. */
int layer_info_of(replay* r, kvc_cache* c, int64_t i, kvc_layer_info* info);
/* Checks one field of layer i ("layer I FIELD" in a mismatch). */
void check_layer_int(replay* r, int64_t i, const char* field, int64_t got, vint want);
/* Checks kvc_cache_max_length of layer i; 0 after failing the case when the call fails. */
int check_layer_max_length(replay* r, kvc_cache* c, int64_t i, vint want);
/* Checks the number of layers of slot si's cache against n, then calls row on each of the first n.v layers
 * (with its kvc_layer_info) while the case passes; row returns 0 to stop. Runs nothing unless runnable. */
typedef int (*layer_row)(replay* r, kvc_cache* c, int64_t i, const kvc_layer_info* info, const void* arg);
void each_layer(replay* r, int64_t si, vint n, layer_row row, const void* arg);
/* `S N (KIND WINDOW MAXLEN [LINEAR])xN`: the layer count, then each layer's kind (read by `kind`), window,
 * kvc_cache_max_length and, with_linear, is_linear. */
void replay_layout(replay* r, kvc_layer_kind (*kind)(replay*, const char*), int with_linear);

#endif /* KVC_REPLAY_H */
