/*
 * examples/demo.h: what the parts of the demo program share (demo.c runs the
 * table; demo_model.c is the decoder; demo_attention.c and demo_mamba.c its
 * two kinds of token mixer; demo_caches.c builds the caches; demo_pool.c
 * runs continuous batching over a block pool).
 */
#ifndef KVC_EXAMPLES_DEMO_H
#define KVC_EXAMPLES_DEMO_H

#include <stdint.h>

#include "kvcache.h"

#define VOCAB 64
#define D_MODEL 64
#define N_LAYERS 4
#define N_HEADS 4
#define N_KV_HEADS 2
#define HEAD_DIM 16
#define KV_DIM (N_KV_HEADS * HEAD_DIM)
#define D_FF 128
#define PROMPT_LEN 12
#define GEN_TOKENS 48
#define MAX_LEN (PROMPT_LEN + GEN_TOKENS) /* positions a run ever feeds */
#define WINDOW 8                          /* sliding window, chunk size and sink window_length */
#define SINK_TOKENS 2                     /* num_sink_tokens of the sink rows */
#define ENC_LEN 10                        /* tokens of the fake encoder output */
#define D_INNER 64                        /* channels of the Mamba-like mixer */
#define D_STATE 4                         /* its recurrent state per channel */
#define CONV_K 4                          /* taps of its causal depthwise conv */
#define QUANT_NBITS 4                     /* quantized rows: bits per code, in groups of HEAD_DIM values */
#define QUANT_RESIDUAL 8                  /* their residual_length: small, so that flushes happen */

/* ------------------------------------------------------------------ model */

typedef struct layer_weights {
  float attn_norm[D_MODEL], wq[D_MODEL][D_MODEL], wk[KV_DIM][D_MODEL], wv[KV_DIM][D_MODEL];
  float wo[D_MODEL][D_MODEL];
  float cross_norm[D_MODEL], cq[D_MODEL][D_MODEL], ck[KV_DIM][D_MODEL], cv[KV_DIM][D_MODEL];
  float co[D_MODEL][D_MODEL];
  float mlp_norm[D_MODEL], w1[D_FF][D_MODEL], w2[D_MODEL][D_FF];
} layer_weights;

/* The Mamba-like mixer that replaces attention in the layers of the recurrent rows. */
typedef struct mamba_weights {
  float norm[D_MODEL], in_x[D_INNER][D_MODEL], in_gate[D_INNER][D_MODEL];
  float conv_w[D_INNER][CONV_K], conv_b[D_INNER];
  float decay[D_INNER][D_STATE], in_b[D_INNER][D_STATE], out_c[D_INNER][D_STATE], skip[D_INNER];
  float out[D_MODEL][D_INNER];
} mamba_weights;

typedef struct model {
  float embed[VOCAB][D_MODEL];
  layer_weights layer[N_LAYERS];
  float final_norm[D_MODEL], lm_head[VOCAB][D_MODEL];
  float encoder_out[ENC_LEN][D_MODEL];
  /* transformers' layout: [position][head_dim], both halves of a head use the same angles */
  float rope_cos[MAX_LEN][HEAD_DIM], rope_sin[MAX_LEN][HEAD_DIM];
  mamba_weights mamba[N_LAYERS];
} model;

void model_init(model* m);
void matvec(const float* w, const float* x, int rows, int cols, float* y);
void rmsnorm(const float* x, const float* weight, float* y);
float silu(float x);
/* Rotates each of `heads` head vectors of v to position `pos` (transformers' rotate_half convention). */
void rope(const model* m, float* v, int heads, int64_t pos);
float bf16_round(float f);

/* ------------------------------------------------------------------- runs */

typedef enum { MASK_FULL, MASK_SLIDING, MASK_CHUNKED } mask_kind;
typedef struct layer_mask {
  mask_kind kind;
  int64_t window; /* sliding window or chunk size */
} layer_mask;

typedef enum { MIX_ATTENTION, MIX_MAMBA } mixer;

/* Whether a query at query_pos sees the key at key_pos under mask m (causal, then the window or chunk). */
int key_visible(layer_mask m, int64_t key_pos, int64_t query_pos);

/* The keys and values one query may see, gathered in position order. Every
 * path (caches, the pool, the cache-free references) gathers first and then
 * calls the same kernel, attend(), so equal inputs give bit-identical logits. */
typedef struct gathered {
  int count;
  float k[MAX_LEN + ENC_LEN][N_KV_HEADS][HEAD_DIM], v[MAX_LEN + ENC_LEN][N_KV_HEADS][HEAD_DIM];
} gathered;

/* Softmax attention of one token's N_HEADS query heads ([N_HEADS][HEAD_DIM]) over g (GQA). */
void attend(const float* q, const gathered* g, float* out);

/* demo_pool.c: the sequence a continuous-batching step is running through forward(). */
struct pool_seq_step;

/* How a sink row hands the model's RoPE to kvc_cache_update, so that kept keys are re-rotated. */
typedef enum { ROPE_NOT_PASSED, ROPE_TABLE_2D, ROPE_PER_CALL_3D } rope_passing;

/* Where a run keeps its state: a kvcache cache (optionally the self-attention
 * half of an EncoderDecoderCache), or, for the references, plain arrays and
 * no cache at all. */
typedef struct run {
  kvc_cache* cache;
  kvc_encoder_decoder_cache* encdec;
  kvc_dtype dtype;            /* K/V storage: KVC_DTYPE_FLOAT32 or KVC_DTYPE_BFLOAT16 */
  int cross;                  /* the model has cross-attention over the encoder output */
  mixer mix[N_LAYERS];        /* the token mixer of each layer */
  int64_t sink_window;        /* sink rows: window_length; positions are cache slots. 0 otherwise */
  rope_passing rope_pass;     /* sink rows with a cache */
  layer_mask masks[N_LAYERS]; /* attention references and the pool run: the mask of each layer */
  struct pool_seq_step* pool; /* the pool run: attention over the pool's blocks (demo_pool.c), no cache */
  float hist_k[N_LAYERS][MAX_LEN][N_KV_HEADS][HEAD_DIM], hist_v[N_LAYERS][MAX_LEN][N_KV_HEADS][HEAD_DIM];
} run;

/* Prints the error and exits: the demo has no use for a failed call. */
void check(kvc_error* err, const char* what);

/* The RoPE position of the token at index t: t, or for sink rows the cache slot it lands in. */
int64_t rope_position(const run* r, int64_t t);

/* Runs `n` tokens at indices pos0.. through the model; writes the logits of the last. */
void forward(run* r, const model* m, const int* tokens, int n, int64_t pos0, float* logits);

/* demo_attention.c: the attention sublayers. q is [n][N_HEADS][HEAD_DIM] rotated; k is [n][KV_DIM] not yet rotated. */
void self_attention(run* r, const model* m, uint32_t layer, int n, int64_t pos0, const float* q, float* k, float* v,
                    float* out);
void cross_attention(run* r, const model* m, uint32_t layer, int n, const float* q, float* out);

/*
 * demo_pool.c: attention of the pool run for n new tokens at pos0 (q, k
 * rotated): the history from the pool's blocks, the new tokens from k and v,
 * which it also keeps for the step's one kvc_pool_write.
 */
void pool_self_attention(run* r, uint32_t layer, int n, int64_t pos0, const float* q, const float* k,
                         const float* v, float* out);

/* demo_pool.c: the continuous-batching run; prints its report and returns the number of failed checks. */
int run_pool_demo(const model* m);

/* demo_mamba.c: the Mamba-like mixer of `layer` for n new tokens; adds its output to x ([n][D_MODEL]). */
void mamba_mixer(run* r, const model* m, uint32_t layer, int n, int64_t pos0, float* x);

/* demo_caches.c: one constructor per cache the table runs. */
kvc_cache* make_dynamic(void);
kvc_cache* make_dynamic_sliding(void);
kvc_cache* make_static(void);
kvc_cache* make_sliding_window(void);
kvc_cache* make_hybrid(void);
kvc_cache* make_hybrid_chunked(void);
kvc_cache* make_custom_chunked(void);
kvc_cache* make_offloaded(void);
kvc_cache* make_offloaded_static(void);
kvc_cache* make_offloaded_hybrid(void);
kvc_cache* make_quanto_incremental(void);
kvc_cache* make_quanto_transformers(void);
kvc_cache* make_hqq_incremental(void);
kvc_cache* make_hqq_transformers(void);
kvc_cache* make_sink(void);
kvc_cache* make_mamba(void);
kvc_cache* make_hybrid_mamba(void);

#endif /* KVC_EXAMPLES_DEMO_H */
