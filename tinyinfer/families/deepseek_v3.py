"""DeepSeek-V3 (R1, Kimi-K2, Moonlight): DeepSeek-V2's body and latent attention with V3's router (sigmoid scores,
a bias steering the choice, groups ranked by their two best scores); read and loaded by
tinyinfer/families/deepseek_v2.py."""

from __future__ import annotations

from tinyinfer.families.deepseek_v2 import load_params, read_config
from tinyinfer.families.family import Family
from tinyinfer.families.llama import LLAMA_LIKE

DEFAULTS = dict(LLAMA_LIKE, vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
                n_routed_experts=256, routed_scaling_factor=2.5, kv_lora_rank=512, q_lora_rank=1536,
                qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, n_group=8, topk_group=4,
                num_experts_per_tok=8, first_k_dense_replace=3, norm_topk_prob=True, max_position_embeddings=4096,
                rope_interleave=True, attention_bias=False)

FAMILY = Family("deepseek_v3", DEFAULTS, read_config, load_params)
