"""The model types of transformers read as an idlib.hf family with their own config defaults.

    python benchmarks/model_type_rows.py            (rewrites idlib/data/model_types.json's entries
                                                     of DECISIONS and tests/data/model_types_real.json)
    python benchmarks/model_type_rows.py csm jamba  (only these model types)

A model type whose attention code is a family's (its attention class compared with the family's,
source against source, and read where they differ) is read as that family with the defaults its
own config class fills in for absent fields: ``num_key_value_heads`` (a number, or one per query
head), ``head_dim`` (a number, or hidden / heads), the RoPE base and rotary share, the defaults of
the family's bias and QK-norm flags, the soft-cap, the number of layers.  They are taken here from
the config classes of the installed transformers (the version ``idlib/data/model_types.json``
names), never at run time: idlib reads a file without transformers.  Where the code itself differs
from the family's in a way AttentionConfig represents (no bias on o, bidirectional, RoPE on some
layers only, ...), ``DECISIONS`` says so (``code``: Family fields, each with the reason in
``why``); where it differs in a way the count does not derive, the model type is refused with the
mechanism named.

For each model type read, ``tests/data/model_types_real.json`` records how the test
(``tests/test_model_types_real.py``) builds its real module: the config class's keyword arguments
of a tiny model with the class's defaults (``defaults``) and one with every read field set away
from them (``explicit``), the model class, and where its attention modules sit (``path``, with
``{i}`` for the layer).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import logging
import re
import sys
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = ROOT / "idlib" / "data" / "model_types.json"
FIXTURES = ROOT / "tests" / "data" / "model_types_real.json"


def read(family: str, why: str, code: dict[str, Any] | None = None,
         harmless: dict[str, str] | None = None, tiny: dict[str, Any] | None = None,
         explicit: dict[str, Any] | None = None, path: str | None = None,
         model: str | None = None, attrs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A model type read as ``family`` with its own defaults (``code``: Family fields in which its
    code differs, explained in ``why``; ``harmless``: its own fields that leave the layer unchanged,
    with the reason; ``tiny``: config kwargs its tiny model needs; ``explicit``: kwargs of the
    explicit twin (None drops a kwarg); ``path``: where its attention modules sit; ``model``: the
    model class, when the auto mapping has none)."""
    return dict(family=family, why=why, code=code or {}, harmless=harmless or {}, tiny=tiny or {},
                explicit=explicit or {}, path=path, model=model, attrs=attrs or {})


def refuse(why: str) -> dict[str, Any]:
    return dict(refuse=why)


# fields every tiny model gets small (when its config class has them)
SMALL = {"vocab_size": 64, "intermediate_size": 16, "moe_intermediate_size": 8, "num_experts": 4,
         "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
         "shared_expert_intermediate_size": 8, "max_position_embeddings": 64, "n_group": 1,
         "topk_group": 1, "first_k_dense_replace": 0, "pad_token_id": 0}

SAME = "attention class identical to the family's (source compared)"

LATENT = ["kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"]
IDENTICAL = "its attention class is the family's, source for source"
SCALE = "a fixed nonzero scale of the scores, keys or the layer's input or output"
NO_ROPE = {"rope_fraction": 0.0}
LINEAR = "linear attention (Gated DeltaNet), not softmax attention: not counted"
WINDOW = ["window", {}]
ENC_DEC = ("encoder-decoder: an encoder stack (bidirectional self-attention) and a decoder stack "
           "(causal self-attention and cross-attention to the encoder) in one config; the reader "
           "reads one stack of alike layers, and the decoder's cross-attention (queries from the "
           "decoder, keys and values from the encoder) is not derived")

DECISIONS: dict[str, dict[str, Any]] = {
    # -- Llama's code -----------------------------------------------------------------------------
    "csm": read("llama", IDENTICAL + " (the backbone; the depth decoder is model type "
                "csm_depth_decoder_model)", harmless={"depth_decoder_config": "the depth decoder's own "
                "config (a separate model type)"}),
    "csm_depth_decoder_model": read("llama", IDENTICAL, harmless={"backbone_hidden_size": "the width of "
                                    "the backbone it reads from (an input projection, not attention)"}),
    "cosmos3_edge_text": read("llama", IDENTICAL + "; M-RoPE is RoPE on text tokens",
                              explicit={"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                            "mrope_section": [2, 2, 2]}}),
    "emu3_text_model": read("llama", IDENTICAL),
    "internlm3": read("llama", "LlamaAttention itself", explicit={"mlp_bias": True},
                      harmless={"qkv_bias": "InternLM3Config refuses a qkv_bias other than attention_bias "
                                "(which the code reads)"}),
    "iquestcoder": read("llama", "LlamaAttention itself"),
    "jais2": read("llama", IDENTICAL),
    "phimoe": read("llama", IDENTICAL, harmless={"lm_head_bias": "the LM head, not attention"}),
    "eurobert": read("llama", "LlamaAttention, bidirectional (is_causal False)", code={"causal": False}),
    "solar_open": read("llama", "LlamaAttention with o never biased: attention_bias switches q, k, v",
                       code={"bias_flags": [["attention_bias", "qkv", None]]}),
    "falcon_h1": read("llama", "LlamaAttention with the keys times key_multiplier, the layer's input "
                      "times attention_in_multiplier and its output times attention_out_multiplier "
                      "(fixed scales); a Mamba mixer runs beside it in every layer (not counted)",
                      harmless={k: SCALE for k in ("key_multiplier", "attention_in_multiplier",
                                                   "attention_out_multiplier")}
                      | {"projectors_bias": "the Mamba mixer's projections, not attention",
                         "mamba_proj_bias": "the Mamba mixer, not attention",
                         "mamba_norm_before_gate": "the Mamba mixer", "mamba_rms_norm": "the Mamba mixer",
                         "mamba_conv_bias": "the Mamba mixer", "mamba_d_head": "the Mamba mixer",
                         "mamba_n_heads": "the Mamba mixer", "lm_head_multiplier": "the LM head"}),
    "ultrabert": read("llama", "LlamaAttention, bidirectional, sliding or full per layer_types (a window "
                      "of sliding_window + 1 keys)", code={"causal": False, "layers": WINDOW,
                                                          "reads_also": ["layer_types"]},
                      harmless={"prediction_head_size": "the prediction head"}),
    "unlimited_ocr_text": refuse("its layers are 'reference_sliding_attention' by default (a window over "
                                 "reference tokens that its generation code keeps), a layer kind the reader "
                                 "does not read"),
    "deepseek_ocr2_text": read("llama", "LlamaAttention; DeepseekOcr2TextConfig sets head_dim to hidden / "
                               "heads whatever the file says", code={"reads_head_dim": False},
                               tiny={"mlp_layer_types": ["dense", "dense"]}),
    "paddleocr_vl_text": read("llama", "LlamaAttention with use_bias switching q, k, v, o (ERNIE 4.5's "
                              "field; pairs in halves)", code={"bias_flags": [["use_bias", "qkvo", None]]}),
    "nanochat": read("llama", "LlamaAttention with a weightless RMS norm of each query and key head "
                     "(after RoPE: a rotation keeps the norm, so before or after is one function; its "
                     "rotate_half turns the other way, RoPE with negated angles)", code={"qk_norm": "plain"}),
    # -- Mistral's code ---------------------------------------------------------------------------
    "cwm": read("mistral", "MistralAttention with sliding or full layers (layer_types)",
                code={"layers": WINDOW, "reads_also": ["layer_types"]}),
    "dia_encoder": read("mistral", "MistralAttention, bidirectional, with score scale 1 (a fixed scale)",
                        code={"causal": False}),
    "dia_decoder": read("mistral", "MistralAttention with score scale 1 (a fixed scale); each decoder layer "
                        "also has a cross-attention to the encoder (a separate module, not counted)",
                        harmless={"cross_num_attention_heads": "the cross-attention (a separate module)",
                                  "cross_head_dim": "the cross-attention (a separate module)",
                                  "cross_num_key_value_heads": "the cross-attention (a separate module)",
                                  "cross_hidden_size": "the cross-attention (a separate module)"}),
    "ministral3": read("mistral", "MistralAttention with Llama 4's query temperature, exactly 1 on the "
                       "first original_max_position_embeddings positions (the count is reached on them)"),
    "moshi": read("mistral", "MistralAttention (per-codebook projections only in the depth decoder, "
                  "a separate config)"),
    "jamba": read("mistral", "MistralAttention without RoPE (no positions inside attention) on the layers "
                  "i with i % attn_layer_period == attn_layer_offset; the others are Mamba",
                  code={"positions": "none", "layers": ["period", {"period": "attn_layer_period",
                        "offset": "attn_layer_offset", "skip": "a Mamba (state-space) layer, not softmax "
                        "attention: not counted"}], "fills": ["attn_layer_period", "attn_layer_offset"]},
                  tiny={"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2,
                        "expert_layer_offset": 1},
                  harmless={"mamba_conv_bias": "the Mamba layers", "mamba_proj_bias": "the Mamba layers"}),
    "minimax": read("mistral", "MixtralAttention on the full_attention layers; the linear_attention "
                    "layers are lightning attention", code={"layers": ["kinds", {
                        "field": "layer_types", "counted": {"full_attention": {}},
                        "skip": {"linear_attention": "lightning (linear) attention, not softmax "
                                 "attention: not counted"}}]},
                    harmless={k: "a residual scale of the block, not attention" for k in (
                        "full_attn_alpha_factor", "full_attn_beta_factor", "linear_attn_alpha_factor",
                        "linear_attn_beta_factor", "mlp_alpha_factor", "mlp_beta_factor")},
                    tiny={"layer_types": ["linear_attention", "full_attention"]}),
    # -- Qwen3's code -----------------------------------------------------------------------------
    "apertus": read("qwen3", "Qwen3Attention (its QK-norm applied after the transpose: the same "
                    "per-head norm)"),
    "hy_v3": read("qwen3", "Qwen3Attention (its QK-norm applied after the transpose)",
                  harmless={"router_scaling_factor": "MoE routing"}),
    "mellum": read("qwen3", "Qwen3Attention", code={"layers": WINDOW},
                   harmless={"mtp_layer_types": "the multi-token-prediction layers (not this layer)",
                             "mtp_mlp_layer_types": "the multi-token-prediction layers (not this layer)"}),
    "qwen3_omni_moe_talker_code_predictor": read("qwen3", IDENTICAL),
    "qwen3_omni_moe_text": read("qwen3", "Qwen3Attention without sliding layers; M-RoPE is RoPE on text"),
    "qwen3_vl_text": read("qwen3", "Qwen3Attention without sliding layers; M-RoPE is RoPE on text"),
    "qwen3_vl_moe_text": read("qwen3", "Qwen3Attention without sliding layers; M-RoPE is RoPE on text"),
    "lfm2": read("qwen3", "Qwen3Attention without biases on the full_attention layers; the conv "
                 "layers are short convolutions", code={"bias_flags": [], "layers": ["kinds", {
                     "field": "layer_types", "counted": {"full_attention": {}},
                     "skip": {"conv": "a short convolution, not softmax attention: not counted"}}]},
                 tiny={"layer_types": ["conv", "full_attention"]},
                 harmless={"conv_bias": "the convolution layers", "full_attn_idxs": "the config class's "
                           "source of layer_types (read)"}),
    "lfm2_moe": read("qwen3", "as lfm2 (the same attention class)", code={"bias_flags": [], "layers": [
                     "kinds", {"field": "layer_types", "counted": {"full_attention": {}},
                               "skip": {"conv": "a short convolution, not softmax attention: not counted"}}]},
                     tiny={"layer_types": ["conv", "full_attention"]},
                     harmless={"conv_bias": "the convolution layers", "use_expert_bias": "MoE routing",
                               "full_attn_idxs": "the config class's source of layer_types (read)"}),
    # -- other families' code ---------------------------------------------------------------------
    "qwen3_5_text": read("qwen3_next", IDENTICAL, tiny={"layer_types": ["linear_attention", "full_attention"]}),
    "qwen3_5_moe_text": read("qwen3_next", IDENTICAL,
                             tiny={"layer_types": ["linear_attention", "full_attention"]}),
    "phi4_multimodal": read("phi3", IDENTICAL),
    "flex_olmo": read("olmo2", IDENTICAL),
    "exaone_moe": read("exaone4", IDENTICAL, harmless={"mlp_layer_types": "the MLP kind per layer"}),
    "kolibri1": read("exaone4", "Exaone4Attention"),
    "granite_docling_text": read("granite", IDENTICAL),
    "glm4_moe_lite": read("deepseek_v3", IDENTICAL, code={"fills": LATENT}),
    "axk1": read("deepseek_v3", "DeepseekV3Attention", code={"fills": LATENT}),
    "minicpm3": read("deepseek_v3", "DeepseekV3Attention's latent attention with RoPE always in halves "
                     "(a fixed permutation of the rotated dims: the same count)", code={"fills": LATENT},
                     harmless={"scale_depth": "the residual scale of the block", "scale_emb": "embeddings"}),
    "ernie4_5_moe": read("ernie4_5", "Ernie4_5Attention"),
    "ernie4_5_vl_moe_text": read("ernie4_5", "Ernie4_5Attention; M-RoPE is RoPE on text",
                                 tiny={"moe_intermediate_size": [8, 8], "moe_num_experts": 4, "moe_k": 2,
                                       "moe_num_shared_experts": 1, "rope_parameters": {
                                           "rope_type": "default", "rope_theta": 500000.0,
                                           "mrope_section": [2, 1, 1]}}),
    "openai_privacy_filter": read("gpt_oss", "GptOssAttention, bidirectional (is_causal False), its "
                                  "scale head_dim^-1/4 on both queries and keys (head_dim^-1/2 on the "
                                  "scores), every layer windowed", code={"causal": False}),
    "t5_gemma_module": read("gemma2", "Gemma2Attention, causal only when is_decoder",
                            code={"reads_also": ["is_decoder"], "causal": False},
                            model="transformers.models.t5gemma.modeling_t5gemma.T5GemmaEncoder",
                            attrs={"dropout_rate": 0.0}),
    "switch_transformers": read("t5", "T5Attention", harmless={
        "router_bias": "the MoE router", "router_jitter_noise": "the MoE router",
        "router_ignore_padding_tokens": "the MoE router"}),
    "pix2struct_text_model": refuse("its projections are hidden_size x hidden_size while its heads are d_kv "
                                    "wide (hidden_size / d_kv heads, whatever num_heads says): a layout the "
                                    "reader does not read"),
    "xmod": read("xlm-roberta", "XLM-RoBERTa's attention (language adapters after it, in the block)",
                 harmless={"adapter_layer_norm": "the language adapters (after attention)",
                           "adapter_reuse_layer_norm": "the language adapters (after attention)",
                           "ln_before_adapter": "the language adapters (after attention)",
                           "pre_norm": "the block's norms (before or after the layer)"}),
    # -- BERT's attention (q, k, v, o biased, one head per key/value head, no positions inside) ----
    "blip_text_model": read("bert", "BERT's attention, causal by default (is_decoder True)",
                            code={"causal": True}),
    "blip_2_qformer": read("bert", "BERT's self-attention; every cross_attention_frequency-th layer also "
                           "has a cross-attention (a separate module, not counted)",
                           harmless={"cross_attention_frequency": "the cross-attention layers (separate "
                                     "modules)", "encoder_hidden_size": "the cross-attention's keys"}),
    "instructblip_qformer": read("bert", "as blip_2_qformer", harmless={
        "cross_attention_frequency": "the cross-attention layers (separate modules)",
        "encoder_hidden_size": "the cross-attention's keys"}),
    "instructblipvideo_qformer": read("bert", "as blip_2_qformer", harmless={
        "cross_attention_frequency": "the cross-attention layers (separate modules)",
        "encoder_hidden_size": "the cross-attention's keys"}),
    "canine": read("bert", "BERT's attention; the character encoders attend within chunks (a window)",
                   path="encoder.layer.{i}.attention"),
    "git": read("bert", "BERT's attention; GitModel's mask is bidirectional over the image prefix and "
                "causal over text (the mask does not change the count, chapter 2)"),
    "layoutlm": read("bert", "BERT's attention; the 2-D layout embeddings are added to the inputs",
                     harmless={"max_2d_position_embeddings": "2-D layout embeddings added to the inputs"}),
    "mpnet": read("bert", "BERT's attention with a relative-position bias table added to the scores "
                  "(content-independent, a separate table, as T5's: not counted)"),
    "tapas": read("bert", "BERT's attention; its table positions are embeddings of the inputs",
                  harmless={"reset_position_index_per_cell": "table positions embedded in the inputs",
                            "use_normalized_answer_loss": "the training loss"}),
    "tvp": read("bert", "BERT's attention; the visual prompt is added to the inputs", harmless={
        k: "the visual prompt (added to the inputs)" for k in (
            "max_grid_col_position_embeddings", "max_grid_row_position_embeddings", "visual_prompter_type",
            "visual_prompter_apply", "visual_prompt_size", "visual_prompt_pad")}),
    "siglip_text_model": read("bert", "SiglipAttention: q, k, v, o biased, bidirectional"),
    "siglip2_text_model": read("bert", "Siglip2Attention: q, k, v, o biased, bidirectional"),
    "flava_text_model": read("bert", "BERT's attention with qkv_bias switching q, k, v (o always biased)",
                             code={"bias": "o", "bias_flags": [["qkv_bias", "qkv", None]]}),
    "flava_multimodal_model": read("bert", "as flava_text_model", code={
        "bias": "o", "bias_flags": [["qkv_bias", "qkv", None]]}),
    "vilt": read("bert", "BERT's attention with qkv_bias switching q, k, v (o always biased)",
                 code={"bias": "o", "bias_flags": [["qkv_bias", "qkv", None]]}),
    # -- GPT-2's attention (q, k, v, o biased, causal) ---------------------------------------------
    "clip_text_model": read("gpt2", "CLIPAttention: q, k, v, o biased; causal in the text model"),
    "clipseg_text_model": read("gpt2", "as clip_text_model"),
    "groupvit_text_model": read("gpt2", "as clip_text_model"),
    "metaclip_2_text_model": read("gpt2", "as clip_text_model"),
    "owlv2_text_model": read("gpt2", "as clip_text_model"),
    "owlvit_text_model": read("gpt2", "as clip_text_model"),
    "xclip_text_model": read("gpt2", "as clip_text_model"),
    "ctrl": read("gpt2", "q, k, v, o biased, causal; its sinusoidal positions are added to the inputs"),
    "aimv2_text_model": read("gpt2", "CLIP-style attention with qkv_bias switching q, k, v and o",
                             code={"bias": "", "bias_flags": [["qkv_bias", "qkvo", None]]}),
    "biogpt": read("opt", "BartAttention-style: q, k, v, o biased, causal (OPT's attention)"),
    "musicgen_decoder": read("opt", "q, k, v, o unbiased, causal over audio codebook tokens; each layer's "
                             "cross-attention to the text encoder is a separate module (not counted)",
                             code={"bias_flags": []},
                             harmless={"cross_attention_hidden_size": "the cross-attention's keys"}),
    "musicgen_melody_decoder": read("opt", "as musicgen_decoder", code={"bias_flags": []}),
    "xglm": read("opt", "q, k, v, o biased, causal; sinusoidal positions added to the inputs",
                 code={"heads_keys": ["attention_heads"]}),
    "kosmos_2_5_text_model": read("opt", "q, k, v, o biased, causal; sinusoidal positions added to the "
                                  "inputs", code={"width_keys": ["embed_dim"], "heads_keys": ["attention_heads"],
                                                  "layers_keys": ["layers"]}),
    "blt_global_transformer": read("mistral", "MistralAttention's projections with RoPE in interleaved pairs "
                                   "(a fixed permutation: the same count)"),
    "blt_patcher": read("mistral", "as blt_global_transformer"),
    "blt_local_encoder": read("mistral", "as blt_global_transformer; its cross-attention to the patches is a "
                              "separate module (not counted)", harmless={
                                  "cross_attn_all_layers": "the cross-attention (a separate module)",
                                  "cross_attn_k": "the cross-attention (a separate module)"}),
    "blt_local_decoder": read("mistral", "as blt_local_encoder", harmless={
        "cross_attn_all_layers": "the cross-attention (a separate module)",
        "cross_attn_k": "the cross-attention (a separate module)"}),
    "canary_decoder": read("llama", "LlamaAttention's projections without positions inside attention "
                           "(sinusoidal positions added to the inputs); its cross-attention is a separate "
                           "module (not counted)", code={"positions": "none"}),
    "nemotron_h": read("mistral", "MistralAttention without RoPE on the full_attention blocks; the others "
                       "are Mamba2, MoE or MLP blocks", code={"positions": "none", "layers": ["kinds", {
                           "field": "layers_block_type", "counted": {"full_attention": {}},
                           "skip": {"linear_attention": "a Mamba2 (state-space) block, not softmax attention: "
                                    "not counted", "moe": "an MoE block, no attention",
                                    "mlp": "an MLP block, no attention"}}], "ignores": ["attention_bias"]},
                       harmless={"mamba_head_dim": "the Mamba2 blocks", "mamba_num_heads": "the Mamba2 blocks",
                                 "mamba_proj_bias": "the Mamba2 blocks", "use_conv_bias": "the Mamba2 blocks",
                                 "use_bias": "the Mamba2 blocks' projections",
                                 "rescale_prenorm_residual": "initialisation only",
                                 "mtp_layers_block_type": "the multi-token-prediction blocks"},
                       tiny={"num_hidden_layers": 4}),
    "granitemoehybrid": read("granite", "GraniteAttention without RoPE (position_embedding_type null, its "
                             "default) on the full_attention layers; the linear_attention layers are Mamba2",
                             code={"positions": "none", "layers": ["kinds", {
                                 "field": "layer_types", "counted": {"full_attention": {}},
                                 "skip": {"linear_attention": "a Mamba2 (state-space) layer, not softmax "
                                          "attention: not counted"}}],
                                 "refuse_values": [["position_embedding_type", "rope", "RoPE on the attention "
                                                    "layers, a setting of this model type not read"]]},
                             harmless={"mamba_conv_bias": "the Mamba2 layers", "mamba_d_head": "the Mamba2 layers",
                                       "mamba_n_heads": "the Mamba2 layers", "mamba_proj_bias": "the Mamba2 layers"},
                             tiny={"layer_types": ["linear_attention", "full_attention"], "mamba_n_heads": 4,
                                   "mamba_d_head": "auto", "mamba_n_groups": 1}),
    "bamba": read("llama", "LlamaAttention rotating the first share of each head (in halves) on the "
                  "layers attn_layer_indices lists; the others are Mamba2",
                  code={"partial": True, "layers": ["indices", {"field": "attn_layer_indices", "listed": {},
                        "others": "a Mamba2 (state-space) layer, not softmax attention: not counted"}]},
                  harmless={"mamba_conv_bias": "the Mamba2 layers", "mamba_d_head": "the Mamba2 layers",
                            "mamba_n_heads": "the Mamba2 layers", "mamba_proj_bias": "the Mamba2 layers"},
                  tiny={"attn_layer_indices": [1], "mamba_n_heads": 4, "mamba_d_head": "auto", "mamba_n_groups": 1}),
    "mllama_text_model": read("mistral", "MistralAttention on the self-attention layers; the layers "
                              "cross_attention_layers lists are cross-attention to the image",
                              code={"layers": ["indices", {"field": "cross_attention_layers",
                                    "listed": "cross-attention to the image (queries from text, keys and "
                                    "values from the image): not derived, not counted", "others": {}}]},
                              tiny={"cross_attention_layers": [1]}),
    "qwen2_5_omni_text": read("qwen2", "Qwen2Attention (q, k, v always biased; M-RoPE is RoPE on text)"),
    "qwen2_5_omni_talker": read("qwen2", "Qwen2Attention (q, k, v always biased; M-RoPE is RoPE on text)",
                                harmless={"position_id_per_seconds": "M-RoPE's time positions (not text)"}),
    "glm4v_text": read("qwen2", "q, k, v always biased (o never), rotating the first share of each head "
                       "(in halves)", code={"partial": True}),
    "glm_ocr_text": read("mistral", "no biases, rotating the first share of each head (in halves)",
                         code={"partial": True}),
    "minimax_m2": read("olmo2", "Olmo2Attention's QK-norm over all heads, no biases, rotating the first "
                       "share of each head (in halves)", code={"partial": True, "bias_flags": []}),
    "glm4_moe": read("glm", "GLM's bias rule (attention_bias: q, k, v) and rotary share, pairs in halves "
                     "(a fixed permutation: the same count), a per-head QK-norm with gains when use_qk_norm",
                     code={"qk_norm_flag": ["use_qk_norm", "gain", None]}),
    "glm4v_moe_text": read("glm", "GLM's bias rule and rotary share, pairs in halves"),
    "glm_image_text": read("glm", "GLM's bias rule and rotary share, pairs in halves", path="layers.{i}.self_attn"),
    "dots1": read("qwen3", "Qwen3Attention", code={"layers": WINDOW}),
    "gte": read("llama", "LlamaAttention's shape, bidirectional, q, k, v, o always biased",
                code={"causal": False, "bias": "qkvo", "bias_flags": []}),
    "jina_embeddings_v3": read("llama", "as gte", code={"causal": False, "bias": "qkvo", "bias_flags": []}),
    "nomic_bert": read("llama", "LlamaAttention's shape, bidirectional, no biases",
                       code={"causal": False, "bias_flags": []}),
    "modernbert": read("llama", "LlamaAttention's shape, bidirectional, attention_bias switching q, k, v, o, "
                       "global or local (windowed) layers", code={"causal": False, "layers": WINDOW,
                                                                 "reads_also": ["layer_types"]},
                       harmless={"classifier_bias": "the classifier head", "decoder_bias": "the LM head",
                                 "norm_bias": "the block's norms", "local_attention": "the window of the "
                                 "local layers, see sliding_window", "deterministic_flash_attn": "numerics only"}),
    "modernbert-decoder": read("llama", "LlamaAttention's shape, attention_bias switching q, k, v, o, global "
                               "or local (windowed) layers", code={"layers": WINDOW, "reads_also": ["layer_types"]},
                               harmless={"classifier_bias": "the classifier head", "decoder_bias": "the LM head",
                                         "norm_bias": "the block's norms", "local_attention": "the window of "
                                         "the local layers, see sliding_window"}),
    "t5gemma2_text": read("gemma3_text", "Gemma3Attention, bidirectional (an encoder)", code={"causal": False},
                          model="transformers.models.t5gemma2.modeling_t5gemma2.T5Gemma2TextEncoder",
                          attrs={"dropout_rate": 0.0}),
    "big_bird": read("bert", "BERT's attention when attention_type is 'original_full'; its default, "
                     "'block_sparse', is refused", code={
                         "refuse_values": [["attention_type", "block_sparse", "block-sparse attention (random, "
                                            "window and global blocks)"]], "fills": ["attention_type"],
                         "bias_flags": [["use_bias", "qkv", None]], "bias": "o"},
                     harmless={"rescale_embeddings": "embeddings"},
                     tiny={"attention_type": "original_full"}),
    "layoutlmv3": read("bert", "BERT's attention; its relative 1-D and 2-D position biases are tables added "
                       "to the scores outside the layer (content-independent, as T5's: not counted)",
                       harmless={k: "a content-independent position bias added to the scores (as T5's "
                                 "table: not counted)" for k in ("has_relative_attention_bias",
                                 "has_spatial_attention_bias", "rel_pos_bins", "max_rel_pos", "rel_2d_pos_bins",
                                 "max_rel_2d_pos")} | {"max_2d_position_embeddings": "2-D layout embeddings "
                                                       "added to the inputs"}),
    "sam3_lite_text_text_model": refuse("its first and last layers are RepMixer convolution blocks (a rule "
                                        "of its code, not a field), the others BERT-like attention: a layer "
                                        "pattern the reader does not read"),
    "tipsv2_text_model": read("bert", "q, k, v, o biased, bidirectional",
                              harmless={"scale_sqrt_depth": "the embeddings' scale"}),
    "flaubert": read("bert", "q, k, v, o biased, bidirectional unless causal", code={
        "width_keys": ["emb_dim"], "refuse_values": [["causal", True, "a causal model"]]},
        harmless={"pre_norm": "the block's norms"}),
    "xlm": read("bert", "q, k, v, o biased, bidirectional unless causal", code={
        "width_keys": ["emb_dim"], "refuse_values": [["causal", True, "a causal model"]]}),
    "videoprism_text_model": read("gpt2", "CLIP-style causal attention with qkv_bias switching q, k, v (o always "
                                  "biased) and a tanh soft-cap of the scores", code={
                                      "bias": "o", "bias_flags": [["qkv_bias", "qkv", None]],
                                      "reads_also": ["attn_logit_softcapping"]},
                                  harmless={"apply_l2norm": "the text embedding after the model"}),
    "idefics": read("mistral", "LlamaAttention's projections without biases, one key/value head per query "
                    "head; the gated cross-attention layers to the image are separate modules (not counted); "
                    "with qk_layer_norms it norms queries and keys, refused", code={
                        "reads_kv": False, "refuse_values": [["qk_layer_norms", True, "LayerNorms of the "
                                                              "queries and keys"]]},
                    harmless={"freeze_lm_head": "training only", "cross_layer_interval": "the cross-attention "
                              "layers (separate modules)", "qk_layer_norms_perceiver": "the perceiver resampler"}),
    "trocr": read("opt", "q, k, v, o biased, causal; each layer's cross-attention to the image encoder is a "
                  "separate module (not counted)", code={"heads_keys": ["decoder_attention_heads"],
                                                         "layers_keys": ["decoder_layers"]},
                  harmless={"cross_attention_hidden_size": "the cross-attention's keys",
                            "layernorm_embedding": "a norm of the embeddings",
                            "use_learned_position_embeddings": "positions added to the inputs"}),
    "clvp_decoder": read("gpt2", "q, k, v biased by use_attention_bias, o always; the decoder passes no "
                         "rotary embedding (its encoders do)", code={
                             "bias": "o", "bias_flags": [["use_attention_bias", "qkv", None]]},
                         harmless={"num_mel_attn_blocks": "the conditioning encoder's blocks"}),
    "higgs_audio_v2": read("llama", "LlamaAttention", path="model.layers.{i}.self_attn"),
    "afmoe": read("qwen3_next", "Qwen3-Next's gated attention (a sigmoid gate per head and dimension, here "
                  "from its own unbiased gate_proj) with the per-head QK-norm, RoPE only on the sliding "
                  "layers (every dimension: a rotary share in the file is ignored); with attention_bias the "
                  "gate stays unbiased, refused", code={"partial": False,
                      "layers": ["kinds", {"field": "layer_types", "counted": {"sliding_attention": {},
                                                                              "full_attention": NO_ROPE},
                                           "skip": {}}],
                      "refuse_values": [["attention_bias", True, "biased projections beside an unbiased gate"]]},
                  harmless={"global_attn_every_n_layers": "read through layer_types",
                            "mup_enabled": "a fixed scale of the embeddings", "route_scale": "MoE routing"},
                  tiny={"layer_types": ["sliding_attention", "full_attention"]}, explicit={"attention_bias": None}),
    "flint": read("qwen3", "Qwen3Attention with GPT-OSS's sinks and RoPE only on the sliding layers",
                  code={"sinks": True, "layers": ["kinds", {"field": "layer_types", "counted": {
                      "sliding_attention": {}, "full_attention": NO_ROPE}, "skip": {}}],
                      "refuse_values": [["sliding_window", None, "no window: then no layer rotates"]]},
                  tiny={"layer_types": ["sliding_attention", "full_attention"]}),
    "molmo2_text": read("qwen3", "Qwen3Attention with attention_bias switching q, k, v (o never biased); with "
                        "qk_norm_type 'olmo' its QK-norm spans all heads, refused", code={
                            "bias_flags": [["attention_bias", "qkv", None]], "fills": ["qk_norm_type"],
                            "refuse_values": [["qk_norm_type", "olmo", "a QK-norm over all heads"]]},
                        harmless={"norm_after": "the block's norms (after the layer)",
                                  "rope_scaling_layers": "the layers whose RoPE frequencies are rescaled "
                                                         "(see rope_scaling)"}),
    "olmo_hybrid": read("olmo2", "Olmo2Attention (a QK-norm over all heads) on the full_attention layers; "
                        "the linear_attention layers are Gated DeltaNet; without rope_parameters it has no "
                        "RoPE, refused", code={
                            "layers": ["kinds", {"field": "layer_types", "counted": {"full_attention": {}},
                                                 "skip": {"linear_attention": LINEAR}}],
                            "refuse_values": [["rope_parameters", None, "no rotary embedding (NoPE)"]]},
                        tiny={"layer_types": ["linear_attention", "full_attention"]}),
    # -- refused ----------------------------------------------------------------------------------
    **{mt: refuse(ENC_DEC) for mt in (
        "bart", "blenderbot", "blenderbot-small", "fsmt", "m2m_100", "marian", "mbart", "mvp", "nllb-moe",
        "pegasus", "plbart", "seamless_m4t", "seamless_m4t_v2", "speech_to_text", "t5gemma", "udop")},
    "bigbird_pegasus": refuse(ENC_DEC + "; its encoder's default attention is block-sparse"),
    "whisper": refuse(ENC_DEC + "; its key projection is never biased (q, v, o are)"),
    "moonshine": refuse(ENC_DEC + " (a speech encoder and a text decoder)"),
    "cohere_asr": refuse(ENC_DEC + " (a speech encoder with relative positions and a text decoder)"),
    "pp_formulanet_text": refuse("the text decoder of an image-to-text encoder-decoder: its layers pair "
                                 "self-attention with cross-attention to the image features, and its sizes "
                                 "come as d_model / decoder_attention_heads beside the image encoder's"),
    "bark": refuse("a wrapper of three models (semantic_config, coarse_acoustics_config, "
                   "fine_acoustics_config), none a text_config; the fine-acoustics model is bidirectional"),
    "cohere2_moe": refuse("RoPE on the sliding layers and also on the dense-MLP prefix layers when "
                          "prefix_dense_sliding_window_pattern is 1 (force_rope): a per-layer rule the reader "
                          "does not read"),
    "cohere_compass_text": refuse("NoPE per layer type given as rope_parameters[layer type] = null: a layout "
                                  "of the per-layer RoPE switch the reader does not read"),
    "cpmant": refuse("T5-style relative position table with its sizes as dim_model / num_heads / dim_head and a "
                     "prompt prefix: a layout the reader does not read"),
    "dbrx": refuse("its attention fields nested in attn_config (kv_n_heads, rope_theta, and clip_qkv, which "
                   "clamps q, k, v: a clipped layer's count is not derived)"),
    "esm": refuse("position_embedding_type 'rotary' (ESM-2's) puts RoPE inside BERT's attention, a switch the "
                  "bert reader does not read"),
    "evolla": refuse("a protein encoder and a Llama language model with sequence-aligner cross-attention in "
                     "one config: a layout the reader does not read"),
    "EvollaModel": refuse("as evolla (CONFIG_MAPPING['EvollaModel'] is EvollaConfig)"),
    "gpt_neox_japanese": refuse("no q, k, v biases and an output bias added outside the projection only in "
                                "the last layer: a per-layer bias the reader does not read"),
    "gradium_phonon_tts": refuse("its config class refuses a backbone width other than its flow head's "
                                 "condition_dim, so its reading is not checked against the real module at a "
                                 "tiny size; not read until it is"),
    "pocket_tts": refuse("its config class refuses a backbone width other than its flow head's condition_dim, "
                         "so its reading is not checked against the real module at a tiny size; not read "
                         "until it is"),
    "granite_swa": refuse("GPT-OSS-style sinks with RoPE switched per layer by layer_rope_theta (a list of "
                          "bases, 0 for none): a per-layer list the reader does not read"),
    "granitemoe_swa": refuse("as granite_swa: sinks, with RoPE per layer from layer_rope_theta (a list the "
                             "reader does not read)"),
    "muse_glimmer_text": refuse("gated attention with a weightless QK-norm and NoPE on the layers whose "
                                "layer_rope_theta is 0: a per-layer list of bases the reader does not read"),
    "hrm_text": refuse("two stacks (H_module and L_module) of num_hidden_layers layers each, run in cycles with "
                       "shared weights: a model layout the reader does not read"),
    "kyutai_speech_to_text": refuse("a speech-to-text model whose text and audio streams share its layers "
                                    "(Moshi's); not checked against the real module at a tiny size"),
    "layoutlmv2": refuse("BERT-like attention with the key projection unbiased and relative 1-D and 2-D bias "
                         "tables; its model needs detectron2, so its reading is not checked"),
    "layoutxlm": refuse("as layoutlmv2 (LayoutXLM has no modeling code of its own)"),
    "longcat_flash": refuse("two multi-head latent attention sublayers in each decoder layer, with fixed latent "
                            "scales: a layout the reader does not read"),
    "longt5": refuse("its encoder attends locally in blocks (local_radius) or adds transient global tokens "
                     "(encoder_attention_type 'transient-global'): neither is derived"),
    "lxmert": refuse("three encoders (language, vision, cross-modality with cross-attention), "
                     "num_hidden_layers given per encoder: a layout the reader does not read"),
    "mimo_v2_flash": refuse("value heads of their own width (v_head_dim) and key/value heads that differ per "
                            "layer type, with sinks: not read"),
    "minimax_m3_vl_text": refuse("its minimax_m3_sparse layers run block-sparse attention with an indexer, "
                                 "which is not derived"),
    "mistral4": refuse("multi-head latent attention whose head_dim is qk_nope_head_dim + qk_rope_head_dim, "
                       "where DeepSeek's head_dim is the rotary width: a field meaning the reader does not read"),
    "qwen3_omni_moe_talker_text": refuse("its model class does not build from its config class alone "
                                         "(transformers 5.23: no shared_expert_intermediate_size), so its "
                                         "reading is not checked"),
    "recurrent_gemma": refuse("attention only on the blocks block_types names, a pattern cycled over the "
                              "layers (the others are recurrent), which the reader does not read"),
    "roformer": refuse("RoPE inside BERT's attention from the encoder's sinusoidal table, and rotary_value "
                       "rotates the values too: not read"),
}


# -- the config class's defaults, as the family's row spells them -------------------------------

def transformers_module() -> Any:
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    return importlib.import_module("transformers")


def config_class(model_type: str) -> Any:
    return transformers_module().CONFIG_MAPPING[model_type]


def fields_of(cls: Any) -> set[str]:
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    names |= set(inspect.signature(cls.__init__).parameters)
    return names | set(getattr(cls, "attribute_map", {}))


def build_config(cls: Any, **kw: Any) -> Any:
    known = fields_of(cls)
    return cls(**{k: v for k, v in kw.items() if k in known})


def _rope_parameters(cfg: Any) -> dict[str, Any]:
    rp = getattr(cfg, "rope_parameters", None) or {}
    if rp and "rope_theta" not in rp and "rope_type" not in rp:      # per layer type
        rp = rp.get("full_attention") or next(iter(rp.values()))
    return rp


def family_row(family: str, code: dict[str, Any]) -> Any:
    """The family's row with the model type's code differences (``reads_also``: fields added to
    the family's ``reads``; ``fills``: field names whose class defaults are filled in)."""
    from idlib.hf import FAMILIES, _as_row
    fam = FAMILIES[family]
    fields = {k: _as_row(k, v) for k, v in code.items() if k not in ("reads_also", "fills")}
    if "reads_also" in code:
        fields["reads"] = fam.reads + tuple(code["reads_also"])
    return dataclasses.replace(fam, **fields)


def defaults(model_type: str, family: str, code: dict[str, Any], tiny: dict[str, Any]) -> dict[str, Any]:
    """The row of ``model_type``: the family's, with ``code`` and every default the family reads as
    the model type's config class fills it in."""
    fam = family_row(family, code)
    cls = config_class(model_type)
    sizes = [(512, 64), (960, 96)]                      # head widths 8 and 10
    n = tiny.get("num_hidden_layers", 2)
    cfgs = [build_config(cls, **(SMALL | tiny | dict(hidden_size=d, num_attention_heads=H, num_hidden_layers=n)))
            for d, H in sizes]
    base = build_config(cls, **(SMALL | tiny | dict(num_hidden_layers=n)))
    try:                                                 # the class's own defaults, tiny fields aside
        plain = build_config(cls, **SMALL)
    except Exception:                                    # noqa: BLE001 - its defaults need the tiny fields
        plain = None
    n_layers = getattr(plain, "num_hidden_layers", None)
    out: dict[str, Any] = {k: v for k, v in code.items() if k not in ("reads_also", "fills")}
    layer_fields = [v for k, v in (code.get("layers") or ["", {}])[1].items()
                    if k in ("field", "period", "offset")]
    if "reads_also" in code or layer_fields:
        out["reads"] = list(dict.fromkeys(list(fam.reads) + layer_fields))
    if fam.reads_kv and fam.kv_heads is None:
        kv = [getattr(c, "num_key_value_heads", None) for c in cfgs]
        if kv == [H for _, H in sizes] or kv == [None, None]:
            out["kv_default"] = None
        elif kv[0] == kv[1]:
            out["kv_default"] = kv[0]
        else:
            raise ValueError(f"{model_type}: num_key_value_heads default {kv}")
    if fam.reads_head_dim:
        key = "d_kv" if "d_kv" in fam.reads else "head_dim"
        hd = [getattr(c, key, None) for c in cfgs]
        if hd == [d // H for d, H in sizes] or hd == [None, None]:
            out["head_dim_default"] = None
        elif hd[0] == hd[1]:
            out["head_dim_default"] = hd[0]
        else:
            raise ValueError(f"{model_type}: head_dim default {hd}")
    if fam.positions == "rope":
        rp = _rope_parameters(base)
        theta = rp.get("rope_theta", getattr(base, "rope_theta", None))
        if theta is not None:
            out["rope_theta"] = float(theta)
        frac = rp.get("partial_rotary_factor", getattr(base, fam.fraction_key, None))
        out["rope_fraction"] = 1.0 if frac is None else float(frac)
    flags = []
    for key, letters, default in fam.bias_flags:
        value = getattr(base, key.lstrip("!"), None)
        flags.append([key, letters, default if value is None else bool(value)])
    if fam.bias_flags or "bias_flags" in code:
        out["bias_flags"] = flags
    if fam.qk_norm_flag is not None:
        key, kind, default = fam.qk_norm_flag
        value = getattr(base, key, None)
        out["qk_norm_flag"] = [key, kind, default if value is None else bool(value)]
    if fam.alibi is not None:
        value = getattr(base, fam.alibi[0], None)
        out["alibi"] = [fam.alibi[0], fam.alibi[1] if value is None else bool(value)]
    if "attn_logit_softcapping" in fam.reads:
        out["softcap"] = getattr(base, "attn_logit_softcapping", None)
    if fam.layers is not None:
        out["n_layers_default"] = n_layers
    if "fills" in code:
        from idlib.hf import PER_HEAD
        out["fills"] = {}
        for k in code["fills"]:
            per = [getattr(c, k, None) for c in cfgs]
            out["fills"][k] = PER_HEAD if per == [d // H for d, H in sizes] and per[0] != per[1] \
                else getattr(plain if plain is not None else base, k)
    return out


# -- the tiny real models the test builds ---------------------------------------------------------

SKIP = re.compile(r"cross|encoder_attn|vision|audio|visual|image|speech|conformer", re.I)


def model_class(model_type: str, name: str | None = None) -> Any:
    transformers = transformers_module()
    if name:
        module, _, cls = name.rpartition(".")
        return getattr(importlib.import_module(module) if module else transformers, cls)
    from transformers.models.auto import modeling_auto as ma
    for names in (ma.MODEL_MAPPING_NAMES, ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        if names.get(model_type):
            return getattr(transformers, names[model_type])
    cls = config_class(model_type)
    mod = importlib.import_module(cls.__module__.replace("configuration_", "modeling_"))
    found = [c for c in vars(mod).values() if inspect.isclass(c) and getattr(c, "config_class", None) is cls]
    found.sort(key=lambda c: (not c.__name__.endswith("Model"), len(c.__name__)))
    if not found:
        raise ValueError(f"{model_type}: no model class")
    return found[0]


def attention_path(model: Any) -> str:
    for name, m in model.named_modules():
        cn = type(m).__name__
        if cn.endswith("Attention") and not SKIP.search(name + cn) and any(True for _ in m.parameters()):
            return re.sub(r"\.\d+\.", ".{i}.", "." + name + ".", count=1)[1:-1]
    raise ValueError("no self-attention module")


def tiny_kwargs(model_type: str, family: str, row: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    from idlib.hf import FAMILIES
    """A tiny model with the class's defaults: heads a multiple of the default key/value heads,
    width 8 per head where head_dim follows it."""
    kv = row.get("kv_default") or 4
    H = 4 if FAMILIES[family].latent else max(4, kv)
    hd = row.get("head_dim_default") or 8
    hd = 8 if FAMILIES[family].latent else hd
    return dict(SMALL, hidden_size=H * 8 if row.get("head_dim_default") is None else max(32, hd),
                num_attention_heads=H, num_hidden_layers=2) | extra | {"_head_dim": hd}


def fixture(model_type: str, decision: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    import torch
    fam = family_row(decision["family"], decision["code"])
    cls = config_class(model_type)
    known = fields_of(cls)
    tiny = tiny_kwargs(model_type, decision["family"], row, decision["tiny"])
    tiny.pop("_head_dim")
    tiny = {k: v for k, v in tiny.items() if k in known or k in decision["tiny"]}
    reads_head_dim = fam.reads_head_dim and not fam.rotary_head_dim and not fam.latent
    explicit = dict(tiny, hidden_size=32, num_attention_heads=4)
    if fam.reads_kv and fam.kv_heads is None and not fam.latent:
        explicit["num_key_value_heads"] = 2
    if reads_head_dim:
        explicit["d_kv" if "d_kv" in fam.reads else "head_dim"] = 12
    for key, _, default in row.get("bias_flags", []):
        explicit[key.lstrip("!")] = not default
    if row.get("qk_norm_flag"):
        explicit[row["qk_norm_flag"][0]] = not row["qk_norm_flag"][2]
    if fam.positions == "rope" and fam.partial:
        explicit["rope_parameters"] = {"rope_type": "default", "rope_theta": row.get("rope_theta", 10000.0),
                                       "partial_rotary_factor": 0.5}
    explicit.update(decision["explicit"])
    explicit = {k: v for k, v in explicit.items() if v is not None and (k in known or k in decision["tiny"]
                                                                         or k in decision["explicit"])}
    mc = model_class(model_type, decision["model"])
    cfg = build_config(cls, **tiny)
    for k, v in decision["attrs"].items():
        setattr(cfg, k, v)
    with torch.device("meta"):
        model = mc(cfg)
    path = decision["path"] or attention_path(model)
    return {"model": f"{mc.__module__}.{mc.__name__}", "path": path, "defaults": tiny, "explicit": explicit,
            **({"attrs": decision["attrs"]} if decision["attrs"] else {})}


def status(model_type: str, types: dict[str, dict[str, Any]]) -> str:
    """What idlib does with ``model_type`` now, in a few words (for the wrappers naming it)."""
    rec = types.get(model_type, {})
    kind = rec.get("kind")
    if kind == "read":
        return "read (a family of idlib.hf)"
    if kind == "same_as":
        return f"read as family {rec['family']}"
    if kind == "own_defaults":
        return f"read as family {rec['family']} with its own config defaults"
    if kind == "refused":
        return "refused (see that model type)"
    return "not read"


def relink_wrappers(types: dict[str, dict[str, Any]]) -> None:
    """A wrapper's entry names its text model and what idlib does with it: that part is rewritten
    from the text model's entry (the survey wrote it before the model types were read)."""
    for rec in types.values():
        text = rec.get("text_model")
        if rec["kind"] == "none" and text in types and "; that model: " in rec["why"]:
            head = rec["why"].split("; that model: ")[0]
            rec["why"] = f"{head}; that model: {status(text, types)}"
    if "led" in types:
        types["led"]["why"] = types["led"]["why"].replace("bart-style (derivable)", "bart-style")


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    survey = json.loads(DATA.read_text())
    fixtures = json.loads(FIXTURES.read_text()) if FIXTURES.exists() else {}
    names = argv or sorted(DECISIONS)
    for model_type in names:
        decision = DECISIONS[model_type]
        old = survey["model_types"][model_type]
        if "refuse" in decision:
            survey["model_types"][model_type] = {"kind": "refused", "why": decision["refuse"]}
            fixtures.pop(model_type, None)
            continue
        try:
            row = defaults(model_type, decision["family"], decision["code"], decision["tiny"])
            fix = fixture(model_type, decision, row)
        except Exception as e:                      # noqa: BLE001 - reported, the entry left as it was
            print(f"{model_type}: FAILED {type(e).__name__}: {e}")
            continue
        survey["model_types"][model_type] = {
            "kind": "own_defaults", "family": decision["family"], "row": row,
            "code": sorted({"reads" if k == "reads_also" else k for k in decision["code"]}), "harmless": decision["harmless"], "why": decision["why"],
            **({"survey": old["why"]} if old.get("kind") == "derivable" else
               {"survey": old["survey"]} if "survey" in old else {})}
        fixtures[model_type] = fix
        print(f"{model_type}: {decision['family']} {row}")
    relink_wrappers(survey["model_types"])
    DATA.write_text(json.dumps(survey, indent=0, ensure_ascii=False))
    FIXTURES.write_text(json.dumps(dict(sorted(fixtures.items())), indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
