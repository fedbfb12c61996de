"""Multi-head latent attention (MLA, DeepSeek-V2 and V3): cache one small latent per token, not every head's K and V.

Grouped-query attention shrinks the KV cache by sharing key/value heads among query heads. MLA goes further: each
token's keys and values, for all H heads, are one linear function of a single latent vector c of kv_lora_rank (r)
numbers, and the cache keeps c. With dn = qk_nope_head_dim, dr = qk_rope_head_dim, dv = v_head_dim:

    kv     = h @ kv_a                        [T, d] -> [T, r + dr]      (kv_a_proj_with_mqa)
    c      = rmsnorm(kv[:, :r])              [T, r]                     the latent (kv_a_layernorm)
    k_rope = rope(kv[:, r:])                 [T, 1, dr]                 one rotated key shared by every head
    k_h    = [c @ W_uk[h]^T | k_rope]        [T, dn + dr]               head h's key   (kv_b_proj's key half)
    v_h    = c @ W_uv[h]^T                   [T, dv]                    head h's value (kv_b_proj's value half)

RoPE cannot pass through W_uk (a rotation depends on the position, the matrix does not), so the positional part of
the key is a separate, shared dr-wide vector: "decoupled RoPE". Queries are split the same way, q_h = [q_nope_h |
q_rope_h] (from q_proj, or through a low-rank bottleneck q_a_proj -> norm -> q_b_proj when q_lora_rank is set).

The "absorbed" form never builds k_h or v_h. A score is a dot product, so W_uk moves to the query side:

    q_nope_h . (W_uk[h] c)  =  (q_nope_h @ W_uk[h]) . c         [dn] @ [dn, r] -> [r]: the query "absorbs" W_uk
    score_h = q_absorbed_h . c  +  q_rope_h . k_rope            one dot product over [c | k_rope], r + dr wide

and the value matrix moves past the attention weights, which sum over tokens while W_uv acts on each token alike:

    sum_t p_t (W_uv[h] c_t)  =  W_uv[h] (sum_t p_t c_t)          mix the latents, then expand once per head

So attention runs as multi-query attention over ONE key/value head of r + dr numbers per token: the query of head h
is [q_absorbed_h | q_rope_h], the key [c | k_rope], and the value the same vector (the first r numbers of each
head's output are its mix of latents; the last dr, a mix of rotary keys, are dropped). The existing cache, paged
cache and batched decode serve it unchanged (`Config.n_kv_heads` 1, `Config.head_dim` r + dr), keeping one array
for keys and values since they are the same (`Config.values_are_keys`). DeepSeek-V3 (r 512, dr 64, 128 heads of
dn 128 and dv 128) caches 576 numbers per token and layer, where expanded keys and values would take
128 x (192 + 128) = 40,960.

The absorbed order of operations differs from transformers' expanded one by float rounding only. The scale of
the scores is (dn + dr)^-1/2 (what the expanded key is wide), times mscale^2 under YaRN (`Config.attn_multiplier`).
"""

from __future__ import annotations

from tinyinfer.backend import xp_of
from tinyinfer.config import Config
from tinyinfer.mlp import linear
from tinyinfer.norms import rms_norm
from tinyinfer.rope import apply_rope

MLA_NORM_EPS = 1e-6  # q_a_layernorm's and kv_a_layernorm's epsilon: transformers' default, not rms_norm_eps


def latent_qkv(h, layer: dict, cfg: Config, rope):
    """Queries, keys and values of latent attention in the absorbed form, for all tokens at once.

    h [T, d] -> q [T, H, r + dr], k [T, 1, r + dr] and v (the same array as k); rope: (cos, sin) or None
    """
    xp = xp_of(h)
    T, H, dn, r = h.shape[0], cfg.n_heads, cfg.qk_nope_head_dim, cfg.kv_lora_rank
    if cfg.q_lora_rank:  # a low-rank bottleneck: d -> q_lora_rank -> H heads
        q_latent = rms_norm(linear(h, layer, "q_a"), layer["q_a_norm"], MLA_NORM_EPS)  # [T, d] -> [T, q_lora_rank]
        q = linear(q_latent, layer, "q_b")  # [T, q_lora_rank] -> [T, H*(dn + dr)]
    else:
        q = linear(h, layer, "q")  # [T, d] -> [T, H*(dn + dr)]
    q = q.reshape(T, H, -1)  # -> [T, H, dn + dr]
    q_nope, q_rope = q[..., :dn], q[..., dn:]  # [T, H, dn], [T, H, dr]
    kv = linear(h, layer, "kv_a")  # [T, d] -> [T, r + dr]
    latent = rms_norm(kv[:, :r], layer["kv_a_norm"], MLA_NORM_EPS)  # [T, r]
    k_rope = kv[:, None, r:]  # [T, 1, dr]: one rotary key for every head
    if rope is not None:
        q_rope, k_rope = apply_rope(q_rope, *rope), apply_rope(k_rope, *rope)
    # the key half of kv_b_proj moves into the query: head h's q_nope [dn] @ W_uk[h] [dn, r] -> [r]
    q_absorbed = (q_nope.transpose(1, 0, 2) @ layer["kv_b_key"]).transpose(1, 0, 2)  # [H, T, dn] @ [H, dn, r] -> [T, H, r]
    q = xp.concatenate([q_absorbed, q_rope], axis=-1)  # [T, H, r + dr]
    k = xp.concatenate([latent[:, None, :], k_rope], axis=-1)  # [T, 1, r + dr]: what the cache holds
    return q, k, k


def expand_values(out, layer: dict, cfg: Config):
    """Each head's attention-weighted mix of latents, expanded by the value half of kv_b_proj into its value.

    out [T, H*(r + dr)] (attention's output over the latent key/value head) -> [T, H*dv]
    """
    T, H, r = out.shape[0], cfg.n_heads, cfg.kv_lora_rank
    mixed = out.reshape(T, H, -1)[..., :r]  # [T, H, r]: the last dr numbers mixed rotary keys, not values
    values = mixed.transpose(1, 0, 2) @ layer["kv_b_value"]  # [H, T, r] @ [H, r, dv] -> [H, T, dv]
    return values.transpose(1, 0, 2).reshape(T, H * cfg.v_head_dim)  # -> [T, H*dv]


def mla_param_count(cfg: Config) -> int:
    """Parameters of one latent-attention layer: the query path, kv_a (+ its norm), kv_b, the output projection.

    DeepSeek-V3 (d 7168, q_lora_rank 1536, r 512, dr 64, 128 heads of dn 128, dv 128): 187M per layer.
    """
    d, H, r, dr = cfg.d_model, cfg.n_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    q_width = H * (cfg.qk_nope_head_dim + dr)
    ql = cfg.q_lora_rank
    query = d * ql + ql + ql * q_width if ql else d * q_width  # q_a, its norm, q_b; or q_proj
    return query + d * (r + dr) + r + r * H * (cfg.qk_nope_head_dim + cfg.v_head_dim) + H * cfg.v_head_dim * d
