"""Tiny random-weight transformers models (built from configs, seeded: no download), one per family with a distinct
cache shape, for the drop-in's generation tests. ``build(name, seed)`` returns the model in eval mode, or raises
``pytest.skip`` when the installed transformers release has no such model class."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 97
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.6, bos_token_id=1,
              eos_token_id=None, pad_token_id=0)


def _classes(config_name: str, model_name: str):
    config_cls, model_cls = getattr(transformers, config_name, None), getattr(transformers, model_name, None)
    if config_cls is None or model_cls is None:
        pytest.skip(f"SKIPPED: transformers {transformers.__version__} has no {model_name}")
    return config_cls, model_cls


def _model(model_cls, config, seed):
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    return model


def llama(seed=0):
    return _model(transformers.LlamaForCausalLM, transformers.LlamaConfig(**COMMON), seed)


def mistral(seed=0):
    return _model(transformers.MistralForCausalLM, transformers.MistralConfig(**COMMON, sliding_window=5), seed)


def gemma2(seed=0):
    # untied embeddings: with tied ones a random tiny Gemma-2 repeats its last prompt token forever
    cfg = transformers.Gemma2Config(**COMMON, head_dim=8, sliding_window=4, tie_word_embeddings=False,
                                    layer_types=["sliding_attention", "full_attention"])
    return _model(transformers.Gemma2ForCausalLM, cfg, seed)


def qwen2(seed=0):
    return _model(transformers.Qwen2ForCausalLM, transformers.Qwen2Config(**COMMON, tie_word_embeddings=False), seed)


def gpt2(seed=0):
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=256,
                                  initializer_range=0.6, bos_token_id=1, eos_token_id=None, pad_token_id=0)
    return _model(transformers.GPT2LMHeadModel, cfg, seed)


def t5(seed=0):
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                num_heads=4, initializer_factor=20.0, tie_word_embeddings=False,
                                decoder_start_token_id=0, pad_token_id=0, eos_token_id=None)
    return _model(transformers.T5ForConditionalGeneration, cfg, seed)


def whisper(seed=0):
    cfg = transformers.WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, max_source_positions=16, max_target_positions=64,
                                     init_std=0.6, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                     decoder_start_token_id=1, begin_suppress_tokens=None, suppress_tokens=None)
    return _model(transformers.WhisperForConditionalGeneration, cfg, seed)


def mamba(seed=0):
    cfg = transformers.MambaConfig(vocab_size=VOCAB, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=4,
                                   expand=2, initializer_range=0.6, pad_token_id=0, eos_token_id=None, bos_token_id=1)
    return _model(transformers.MambaForCausalLM, cfg, seed)


def jamba(seed=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.JambaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                       num_attention_heads=4, num_key_value_heads=2, attn_layer_period=2,
                                       attn_layer_offset=1, expert_layer_period=4, expert_layer_offset=3,
                                       mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4,
                                       initializer_range=0.6, pad_token_id=0, eos_token_id=None)
    return _model(transformers.JambaForCausalLM, cfg, seed)


def deepseek_v32(seed=0):
    """The sparse indexed-attention model (DeepSeek-V3.2's lightning indexer: indexed cache layers)."""
    config_cls, model_cls = _classes("DeepseekV32Config", "DeepseekV32ForCausalLM")
    cfg = config_cls(**dict(COMMON, num_key_value_heads=4), moe_intermediate_size=32, n_routed_experts=4,
                     n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
                     q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
                     index_topk=4, index_head_dim=8, index_n_heads=2, tie_word_embeddings=False)
    return _model(model_cls, cfg, seed)


def nemotron_h(seed=0):
    """A hybrid of Mamba-2, attention and blocks without attention ("moe", "mlp": transformers' DummyLayer from 5.23,
    an empty LinearAttentionLayer before)."""
    config_cls, model_cls = _classes("NemotronHConfig", "NemotronHForCausalLM")
    cfg = config_cls(**dict(COMMON, num_hidden_layers=4), head_dim=8, mamba_num_heads=4, mamba_head_dim=16,
                     ssm_state_size=8, n_groups=1, conv_kernel=4, expand=2, chunk_size=8, n_routed_experts=4,
                     moe_intermediate_size=32, moe_shared_expert_intermediate_size=32, num_experts_per_tok=2,
                     layer_types=["linear_attention", "moe", "full_attention", "mlp"])
    return _model(model_cls, cfg, seed)


def gemma4(seed=0):
    """Gemma 4's KV sharing: its last layers read the keys and values of earlier ones (kv_sharing_modes "reuse":
    DummyLayers from 5.23; before, the cache has no layers for them)."""
    config_cls, model_cls = _classes("Gemma4TextConfig", "Gemma4ForCausalLM")
    cfg = config_cls(**dict(COMMON, num_hidden_layers=4), head_dim=8, global_head_dim=8, sliding_window=4,
                     layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
                     vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=8, tie_word_embeddings=False)
    return _model(model_cls, cfg, seed)


BUILDERS = {f.__name__: f for f in (llama, mistral, gemma2, qwen2, gpt2, t5, whisper, mamba, jamba, deepseek_v32,
                                    nemotron_h, gemma4)}
ENCODER_DECODER = {"t5", "whisper"}
RECURRENT = {"mamba", "jamba", "nemotron_h"}
