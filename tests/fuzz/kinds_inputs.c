/*
 * kinds_inputs.c: see kinds_inputs.h.
 */
#include "kinds_inputs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

/*
 * A tensor of `ndim` dims whose elements are fresh values (narrow codec
 * bits, dtype UNSET: int32): compact, with the last two dims swapped in
 * memory (explicit strides), or padded (every stride doubled, an offset).
 */
void nd_make(ctx* c, nd_tensor* x, kvc_dtype dt, int ndim, const int64_t* shape, int layout) {
  memset(x, 0, sizeof *x);
  size_t es = codec_dtype_size(dt);
  int order[8];
  for (int i = 0; i < ndim; i++) {
    x->shape[i] = shape[i];
    order[i] = i;
  }
  if (layout == ND_TRANSPOSED && ndim >= 2) {
    order[ndim - 2] = ndim - 1;
    order[ndim - 1] = ndim - 2;
  }
  int64_t st = 1, numel = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    x->strides[order[i]] = st * (layout == ND_PADDED ? 2 : 1);
    st *= shape[order[i]] > 0 ? shape[order[i]] : 1;
    numel *= shape[i] > 0 ? shape[i] : 0;
  }
  int64_t offset = layout == ND_PADDED ? 3 : 0, span = 1;
  for (int i = 0; i < ndim; i++) span += shape[i] > 0 ? (shape[i] - 1) * x->strides[i] : 0;
  size_t bytes = (size_t)(offset + span) * es;
  x->mem = malloc(bytes);
  if (!x->mem) abort();
  memset(x->mem, 0xFF, bytes);
  int64_t idx[8] = {0};
  for (int64_t k = 0; k < numel; k++) {
    int64_t off = offset;
    for (int i = 0; i < ndim; i++) off += idx[i] * x->strides[i];
    uint32_t bits = codec_bits_ranged(++c->next_val, 0, 0, dt == KVC_DTYPE_UNSET ? KVC_DTYPE_FLOAT32 : dt, 1);
    if (es == 4) {
      memcpy(x->mem + (size_t)off * es, &bits, 4);
    } else {
      uint16_t b16 = (uint16_t)bits;
      memcpy(x->mem + (size_t)off * es, &b16, 2);
    }
    for (int i = ndim - 1; i >= 0; i--) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
  x->t.data = x->mem;
  x->t.device.device_type = KVC_DEVICE_CPU;
  x->t.ndim = ndim;
  x->t.dtype = codec_data_type(dt);
  x->t.shape = x->shape;
  x->t.strides = layout == ND_COMPACT ? NULL : x->strides;
  x->t.byte_offset = (uint64_t)offset * es;
}

void nd_free(nd_tensor* x) {
  free(x->mem);
  x->mem = NULL;
}

const char* fault_name(int f) {
  static const char* n[F_COUNT] = {"none",  "batch", "heads",  "kdim",    "vdim",    "dtype", "vdtype",
                                   "ndim",  "nullk", "nullv",  "device",  "vseq",    "badtype", "nodata"};
  return f >= 0 && f < F_COUNT ? n[f] : "?";
}

void kv_make(ctx* c, const group* g, geom x, int64_t n, int fault, int lk, int lv, kv_input* in) {
  memset(in, 0, sizeof *in);
  ref_tensor* k = &in->kd;
  ref_tensor* v = &in->vd;
  k->present = v->present = 1;
  k->on_cpu = v->on_cpu = 1;
  k->ndim = v->ndim = 4;
  k->dtype = v->dtype = x.dt;
  int64_t kb = x.B, kh = x.H, vs = n, dk = x.Dk, dv = x.Dv;
  switch (fault) {
    case F_BATCH: kb = x.B + 1; break;
    case F_HEADS: kh = x.H + 1; break;
    case F_KDIM: dk = x.Dk + 1; break;
    case F_VDIM: dv = x.Dv + 1; break;
    case F_DTYPE: k->dtype = v->dtype = other_dtype(x.dt); break;
    case F_VDTYPE: v->dtype = other_dtype(x.dt); break;
    case F_NDIM: k->ndim = 3; break;
    case F_NULLK: k->present = 0; break;
    case F_NULLV: v->present = 0; break;
    case F_DEVICE: k->on_cpu = 0; break;
    case F_VSEQ: vs = n + 1; break;
    case F_BADTYPE: k->dtype = v->dtype = KVC_DTYPE_UNSET; break;
    case F_NODATA: k->no_data = 1; break;
    default: break;
  }
  const int64_t ks[4] = {kb, kh, n, dk}, vsh[4] = {kb, kh, vs, dv};
  codec_build_kv(&in->k, &in->v, k, v, ks, vsh, &in->tok, vs, &c->next_tok, fault != F_NONE, lk, lv, g->narrow);
}

const kvc_tensor* kv_key(kv_input* in) { return in->kd.present ? &in->k.t : NULL; }
const kvc_tensor* kv_value(kv_input* in) { return in->vd.present ? &in->v.t : NULL; }

void kv_free(kv_input* in) {
  codec_free(&in->k);
  codec_free(&in->v);
  ref_grid_free(&in->tok);
}

/* RoPE cos/sin of `rot` channels: the whole table (2-D) or this call's n rows (3-D), in the group's style. */
static void rope_make(ctx* c, group* g, upd_opts* u, int64_t rot, int64_t n, int64_t B) {
  reader* r = &c->r;
  int style = g->rope_style ? g->rope_style : 1;
  if (rd(r) % 8 == 0) style = 3 - style;
  kvc_dtype dt = g->rope_dt;
  int layout = rd(r) % ND_LAYOUTS;
  if (style == 1) {
    int64_t w = sink_window_max(g), T = rare(r, 8) ? rd_range(r, 1, 4) : w + rd(r) % 3;
    if (T < 1) T = 1;
    int64_t sh[2] = {T, rot};
    nd_make(c, &u->cos, dt, 2, sh, layout);
    nd_make(c, &u->sin, dt, 2, sh, layout);
    trace(" rope=[%lld,%lld]", (long long)T, (long long)rot);
  } else {
    int64_t sh[3] = {rd_range(r, 1, B > 0 ? B : 1), n, rot};
    nd_make(c, &u->cos, dt, 3, sh, layout);
    nd_make(c, &u->sin, dt, 3, sh, layout);
    trace(" rope=[%lld,%lld,%lld]", (long long)sh[0], (long long)n, (long long)rot);
  }
  if (dt != KVC_DTYPE_FLOAT32) trace(" %s", codec_dtype_name(dt));
  u->has_rope = 1;
  u->o.rope_cos = &u->cos.t;
  u->o.rope_sin = &u->sin.t;
  u->o.partial_rotation_size = g->rope_partial;
  if (g->rope_partial) trace(" partial=%lld", (long long)g->rope_partial);
}

/* Bad update options, one at a time (RoPE ones need a table to spoil). */
static void spoil_options(ctx* c, upd_opts* u, int64_t head_dim) {
  reader* r = &c->r;
  u->use = 1;
  switch (rd(r) % 9) {
    case 0: u->o.struct_size = 3; trace(" options.struct_size=3"); break;
    case 1:
      u->o.cache_position = NULL;
      u->o.cache_position_length = 2;
      trace(" cache_position=NULL length=2");
      break;
    case 2: u->o.partial_rotation_size = -1; trace(" partial=-1"); break;
    case 3: u->o.partial_rotation_size = head_dim + 1; trace(" partial=head_dim+1"); break;
    default:
      if (!u->has_rope) {
        u->o.struct_size = 3;
        trace(" options.struct_size=3");
        break;
      }
      switch (rd(r) % 5) {
        case 0: u->o.rope_sin = NULL; trace(" rope_sin=NULL"); break;
        case 1: u->cos.t.ndim = 1; trace(" rope_cos.ndim=1"); break;
        case 2: u->cos.t.dtype = codec_data_type(KVC_DTYPE_UNSET); trace(" rope_cos int32"); break;
        case 3: u->sin.t.device.device_type = KVC_DEVICE_CUDA; trace(" rope_sin on CUDA"); break;
        default: u->sin.shape[u->sin.t.ndim - 1] += 1; trace(" rope_sin wider"); break;
      }
  }
}

void opts_free(upd_opts* u) {
  if (u->has_rope) {
    nd_free(&u->cos);
    nd_free(&u->sin);
  }
}

/*
 * Options of an update of n tokens at `layer` (its geometry x): none,
 * defaults, cache_position on static kinds, RoPE on sink layers; with
 * `faulty` now and then a bad one.
 */
void gen_update_options(ctx* c, group* g, uint32_t layer, geom x, int64_t n, int faulty, upd_opts* u) {
  reader* r = &c->r;
  memset(u, 0, sizeof *u);
  kvc_update_options_init(&u->o);
  uint8_t mode = rd(r);
  kvc_layer_kind kind = kind_of(g, layer);
  const cache_snap* s = &g->snap[0];
  if (kind == KVC_LAYER_SINK || (sink_window_max(g) && mode % 8 == 0)) {
    if (g->rope_style || mode % 16 == 1) {
      u->use = 1;
      rope_make(c, g, u, g->rope_partial ? g->rope_partial : x.Dk, n, x.B);
    } else if (mode % 4 == 2) {
      u->use = 1;
    }
  } else if (is_static_kind(kind) && layer < s->num_layers && mode % 3 == 0) {
    const kvc_layer_info* I = &s->layers[layer].info;
    int64_t cap = I->capacity > 0 ? I->capacity : 1;
    int64_t start = (mode >> 2) % 2 ? I->seq_length : (mode >> 3) % (cap + 2);
    for (int64_t i = 0; i < n && i < 16; i++) u->pos[i] = start + i;
    u->use = 1;
    u->o.cache_position = u->pos;
    u->o.cache_position_length = (uint32_t)n + (uint32_t)rare(r, 8);
    trace(" cache_position=%lld..+%u", (long long)start, u->o.cache_position_length);
  } else if (mode % 5 == 1) {
    u->use = 1;
  }
  if (faulty && rare(r, 4)) spoil_options(c, u, x.Dk);
}

static void gen_quant(reader* r, kvc_quant_options* q) {
  kvc_quant_options_init(q);
  int quanto = rd(r) % 2;
  q->quantizer = quanto ? KVC_QUANTIZER_QUANTO : KVC_QUANTIZER_HQQ;
  static const kvc_quant_mode modes[] = {KVC_QUANT_MODE_INCREMENTAL, KVC_QUANT_MODE_TRANSFORMERS,
                                         KVC_QUANT_MODE_COMPACT};
  q->mode = modes[rd(r) % 3];
  static const int32_t hqq_bits[] = {1, 2, 3, 4, 8};
  q->nbits = quanto ? (rd(r) % 2 ? 2 : 4) : hqq_bits[rd(r) % 5];
  q->axis_key = rd(r) % 2 ? 0 : (quanto ? -1 : 1);
  q->axis_value = rd(r) % 2 ? 0 : (quanto ? -1 : 1);
  static const int64_t groups[] = {1, 2, 4, 8, 2, 3};
  q->q_group_size = groups[rd(r) % 6];
  q->residual_length = rd(r) % 7;
  switch (31 - rd(r) % 32) { /* rare invalid quantizer options */
    case 0: q->nbits = 5; break;
    case 1: q->axis_key = 2; break;
    case 2: q->q_group_size = 0; break;
    case 3: q->residual_length = -1; break;
    case 4: q->quantizer = 3; break;
    case 5: q->mode = 3; break;
    case 6: q->struct_size = 12; break;
    default: break;
  }
}

static int is_linear_kind(kvc_layer_kind k) { return k >= KVC_LAYER_LINEAR && k <= KVC_LAYER_LINEAR_STATIC_SLIDING; }

static const kvc_layer_kind custom_kinds[] = {
    KVC_LAYER_QUANTIZED, KVC_LAYER_QUANTIZED, KVC_LAYER_QUANTIZED, KVC_LAYER_SINK, KVC_LAYER_SINK,
    KVC_LAYER_LINEAR, KVC_LAYER_LINEAR, KVC_LAYER_LINEAR_DYNAMIC, KVC_LAYER_LINEAR_DYNAMIC_SLIDING,
    KVC_LAYER_LINEAR_STATIC, KVC_LAYER_LINEAR_STATIC_SLIDING, KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING,
    KVC_LAYER_DYNAMIC_CHUNKED, KVC_LAYER_STATIC, KVC_LAYER_STATIC_SLIDING, KVC_LAYER_QUANTIZED_FP8, KVC_LAYER_DUMMY,
    KVC_LAYER_DYNAMIC_INDEXED, KVC_LAYER_STATIC_INDEXED};

static void gen_custom_layer(reader* r, opt_store* s, int i) {
  kvc_layer_options* L = &s->layers[i];
  kvc_layer_options_init(L);
  L->kind = custom_kinds[rd(r) % (sizeof custom_kinds / sizeof custom_kinds[0])];
  L->window = rd_range(r, 1, 6);
  L->max_cache_len = rd_range(r, 1, 8);
  if (L->kind == KVC_LAYER_SINK) {
    L->num_sink_tokens = rd(r) % 4;
    L->window = L->num_sink_tokens + rd_range(r, 1, 6);
  }
  if (is_linear_kind(L->kind)) {
    L->num_states = (uint32_t)(rd(r) % 4);
    L->conv_kernel_size = rd(r) % 2 ? 0 : rd_range(r, 1, 4);
  }
  if (L->kind == KVC_LAYER_QUANTIZED && rd(r) % 8) {
    s->has_lquant[i] = 1;
    gen_quant(r, &s->lquant[i]);
  }
  switch (39 - rd(r) % 40) { /* rare invalid layer options */
    case 0: L->window = 0; break;
    case 1: L->kind = rd(r) % 2 ? 0 : 1000; break; /* no such kind (ids only grow: far above them) */
    case 2: L->struct_size = 4; break;
    case 3: L->num_states = 65; break;
    case 4: L->conv_kernel_size = -1; break;
    case 5: L->num_sink_tokens = L->kind == KVC_LAYER_SINK ? L->window : -1; break;
    case 6: L->max_cache_len = 0; break;
    default: break;
  }
}

void gen_options(ctx* c, opt_store* s) {
  reader* r = &c->r;
  memset(s, 0, sizeof *s);
  kvc_cache_options_init(&s->o);
  kvc_model_config_init(&s->cfg);
  static const kvc_preset presets[] = {
      KVC_PRESET_CUSTOM,  KVC_PRESET_CUSTOM,        KVC_PRESET_CUSTOM,           KVC_PRESET_CUSTOM,
      KVC_PRESET_QUANTIZED, KVC_PRESET_QUANTIZED,   KVC_PRESET_OFFLOADED,        KVC_PRESET_OFFLOADED_STATIC,
      KVC_PRESET_OFFLOADED_HYBRID, KVC_PRESET_SINK, KVC_PRESET_SINK,             KVC_PRESET_MAMBA,
      KVC_PRESET_HYBRID_MAMBA, KVC_PRESET_DYNAMIC,  KVC_PRESET_STATIC,           KVC_PRESET_HYBRID};
  uint8_t which = rd(r);
  if (which == 255) {
    s->null_options = 1;
    return;
  }
  s->o.preset = presets[which % (sizeof presets / sizeof presets[0])];
  s->o.max_cache_len = rd_range(r, 1, 8);
  if (s->o.preset == KVC_PRESET_CUSTOM) {
    s->o.num_layers = (uint32_t)rd_range(r, 1, MAX_SPEC);
    for (uint32_t i = 0; i < s->o.num_layers; i++) gen_custom_layer(r, s, (int)i);
  } else {
    s->has_config = !((s->o.preset == KVC_PRESET_SINK || s->o.preset == KVC_PRESET_OFFLOADED) && rd(r) % 2);
    s->cfg.num_hidden_layers = (uint32_t)rd_range(r, 1, MAX_SPEC);
    s->cfg.sliding_window = rd(r) % 4 ? rd_range(r, 1, 6) : 0;
    s->cfg.attention_chunk_size = rd(r) % 3 ? 0 : rd_range(r, 1, 6);
    s->cfg.conv_kernel = rd(r) % 2 ? 0 : rd_range(r, 1, 4);
    s->cfg.number_of_conv_states = (uint32_t)(rd(r) % 3);
    int types = s->o.preset == KVC_PRESET_HYBRID_MAMBA || rd(r) % 2;
    if (types) {
      s->has_types = 1;
      for (uint32_t i = 0; i < s->cfg.num_hidden_layers; i++) {
        kvc_layer_type t = (kvc_layer_type)rd_range(r, 1, 8); /* FULL_ATTENTION .. INDEXED_ATTENTION */
        if (s->o.preset == KVC_PRESET_HYBRID_MAMBA)
          t = rd(r) % 2 ? KVC_LAYER_TYPE_LINEAR_ATTENTION : KVC_LAYER_TYPE_FULL_ATTENTION;
        if (s->o.preset == KVC_PRESET_QUANTIZED && rd(r) % 4) t = KVC_LAYER_TYPE_FULL_ATTENTION;
        if ((s->o.preset == KVC_PRESET_HYBRID || s->o.preset == KVC_PRESET_OFFLOADED_HYBRID) && t > 3)
          t = KVC_LAYER_TYPE_FULL_ATTENTION;
        s->types[i] = t;
      }
    }
    if (s->o.preset == KVC_PRESET_QUANTIZED && rd(r) % 8) {
      s->has_cquant = 1;
      gen_quant(r, &s->cquant);
    }
    if (s->o.preset == KVC_PRESET_SINK) {
      s->o.num_sink_tokens = rd(r) % 4;
      s->o.window_length = s->o.num_sink_tokens + rd_range(r, 1, 6);
    }
  }
  uint8_t off = rd(r);
  s->o.offload = off % 4 == 0 ? (kvc_offload)(off / 4 % 4) : KVC_OFFLOAD_DEFAULT;
  switch (63 - rd(r) % 64) { /* rare invalid cache options */
    case 0: s->o.struct_size += 8; break;
    case 1: s->o.preset = 13; break;
    case 2: s->o.offload = rd(r) % 2 ? 4 : -1; break;
    case 3: s->cfg.struct_size = 5; break;
    case 4: s->o.window_length = s->o.num_sink_tokens; break;
    case 5: s->null_layers = 1; break;
    case 6:
      if (!c->has_cuda) s->o.device.device_type = KVC_DEVICE_CUDA;
      break;
    case 7: s->has_types = 0; break; /* HYBRID_MAMBA needs them */
    default: break;
  }
  opt_link(s);
}

static void describe_quant(const kvc_quant_options* q) {
  static const char* modes[] = {"incremental", "transformers", "compact"};
  trace("{%s %s %db axes %d/%d g%lld r%lld%s}", q->quantizer == KVC_QUANTIZER_QUANTO ? "quanto" : "hqq",
        q->mode >= 0 && q->mode <= 2 ? modes[q->mode] : "bad mode", (int)q->nbits, (int)q->axis_key, (int)q->axis_value,
        (long long)q->q_group_size, (long long)q->residual_length, q->struct_size != sizeof *q ? " bad size" : "");
}

void describe_options(const opt_store* s) {
  if (s->null_options) {
    trace(" options=NULL");
    return;
  }
  const kvc_cache_options* o = &s->o;
  trace(" preset=%d M=%lld offload=%d", o->preset, (long long)o->max_cache_len, o->offload);
  if (o->struct_size != sizeof *o) trace(" struct_size=%u", o->struct_size);
  if (o->device.device_type != KVC_DEVICE_CPU) trace(" device=%d", o->device.device_type);
  if (o->preset == KVC_PRESET_CUSTOM) {
    trace(" layers=[");
    for (uint32_t i = 0; i < o->num_layers; i++) {
      const kvc_layer_options* L = &s->layers[i];
      trace("%s{kind %d W %lld M %lld", i ? " " : "", L->kind, (long long)L->window, (long long)L->max_cache_len);
      if (L->kind == KVC_LAYER_SINK) trace(" sinks %lld", (long long)L->num_sink_tokens);
      if (is_linear_kind(L->kind)) trace(" states %u K %lld", L->num_states, (long long)L->conv_kernel_size);
      if (s->has_lquant[i]) {
        trace(" ");
        describe_quant(&s->lquant[i]);
      }
      if (L->struct_size != sizeof *L) trace(" bad size");
      trace("}");
    }
    trace("]%s", s->null_layers ? " (layers NULL)" : "");
    return;
  }
  if (o->preset == KVC_PRESET_SINK) trace(" window %lld sinks %lld", (long long)o->window_length,
                                          (long long)o->num_sink_tokens);
  if (s->has_cquant) {
    trace(" quant ");
    describe_quant(&s->cquant);
  }
  if (!s->has_config) return;
  const kvc_model_config* g = &s->cfg;
  trace(" config{layers %u sw %lld chunk %lld K %lld states %u%s", g->num_hidden_layers,
        (long long)g->sliding_window, (long long)g->attention_chunk_size, (long long)g->conv_kernel,
        g->number_of_conv_states, g->struct_size != sizeof *g ? " bad size" : "");
  if (s->has_types) {
    trace(" types");
    for (uint32_t i = 0; i < g->num_hidden_layers; i++) trace(" %d", s->types[i]);
  }
  trace("}");
}

/* A number from a seed byte, a layer and a field: per-layer shapes cost no input bytes. */
static uint32_t plan_hash(uint8_t seed, uint32_t layer, uint32_t field) {
  uint32_t h = (seed * 131u + layer * 7919u + field * 104729u + 1u) * 2654435761u;
  h ^= h >> 15;
  return h * 2246822519u ^ (h >> 13);
}

/* Shapes for layers that have none yet, fitted to the kinds the cache got. */
void gen_plan(ctx* c, group* g) {
  reader* r = &c->r;
  g->B = rd_range(r, 1, 3);
  g->dtype = (kvc_dtype)rd_range(r, 1, 3);
  g->narrow = !rare(r, 8);
  static const int64_t dims[] = {1, 2, 4, 8, 3, 2, 4};
  int64_t H = rd_range(r, 1, 2), Dk = dims[rd(r) % 7];
  int64_t Dv = rd(r) % 2 ? Dk : dims[rd(r) % 4];
  int vary = rare(r, 4);
  uint8_t seed = rd(r);
  for (uint32_t l = 0; l < MAX_LAYERS; l++) {
    lplan* p = &g->L[l];
    p->H = vary ? 1 + plan_hash(seed, l, 0) % 2 : H;
    p->Dk = vary ? dims[plan_hash(seed, l, 1) % 7] : Dk;
    p->Dv = vary ? dims[plan_hash(seed, l, 2) % 7] : Dv;
    if (kind_of(g, l) == KVC_LAYER_QUANTIZED && plan_hash(seed, l, 3) % 16) {
      kvc_quant_options q = quant_of(g, l, 0); /* mostly head dims the group size divides */
      if (q.q_group_size >= 1 && q.q_group_size <= 8) {
        p->Dk = q.q_group_size * (1 + plan_hash(seed, l, 4) % 2);
        p->Dv = plan_hash(seed, l, 5) % 2 ? p->Dk : q.q_group_size;
      }
    }
    p->C = 1 + plan_hash(seed, l, 6) % 3;
    p->rec_ndim = (int)(1 + plan_hash(seed, l, 7) % 4);
    for (uint32_t d = 1; d < 4; d++) p->rec_shape[d] = 1 + plan_hash(seed, l, 7 + d) % 3;
    p->conv_dt = plan_hash(seed, l, 11) % 8 ? g->dtype : other_dtype(g->dtype);
    p->rec_dt = plan_hash(seed, l, 12) % 3 ? g->dtype : KVC_DTYPE_FLOAT32;
  }
  g->rope_style = (int)(rd(r) % 3);
  g->rope_dt = rare(r, 4) ? (kvc_dtype)rd_range(r, 1, 3) : KVC_DTYPE_FLOAT32;
  g->rope_partial = Dk >= 2 && rare(r, 3) ? 2 * rd_range(r, 1, Dk / 2) : 0;
  trace("  plan{B %lld %s%s H %lld Dk %lld Dv %lld%s rope %d partial %lld}\n", (long long)g->B,
        codec_dtype_name(g->dtype), g->narrow ? "" : " wide", (long long)H, (long long)Dk, (long long)Dv,
        vary ? " varied" : "", g->rope_style, (long long)g->rope_partial);
}
