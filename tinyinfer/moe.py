"""Mixture-of-Experts: many expert MLPs per layer, and a router that sends each token to a few of them.

A MoE layer replaces the one dense MLP by E experts (each an ordinary SwiGLU MLP) and a router, a linear layer
that scores every expert for every token:

    probs          = softmax(h @ router)                  [T, d] -> [T, E]
    weights, chosen = top_k(probs, k)                     [T, k] each: every token's k best experts
    if norm_topk_prob: weights /= weights.sum(-1)          Mixtral always; Qwen and OLMoE as the config says
    out[t]         = sum_j weights[t, j] * expert[chosen[t, j]](h[t])
    Qwen2-MoE:     out += sigmoid(h @ shared_gate) * shared_expert(h)      an always-on expert, gated per token
    DeepSeek:      out += shared_experts(h)                                 always on, ungated

DeepSeek-V3 routes differently (`route_grouped`, `Config.router` "sigmoid_grouped"). Each expert's score is a
sigmoid, not a share of a softmax; a per-expert bias, tuned during training to even out the experts' loads,
steers which experts are chosen but not how much they weigh; and the experts come in groups (one per device in
training) of which a token may use only the best few, ranked by the sum of their two best biased scores:

    scores   = sigmoid(h @ router)                              [T, E]
    biased   = scores + e_score_correction_bias                 [T, E]   only for choosing
    groups   = the topk_groups groups with the best top-2 sums of `biased`
    chosen   = top_k of `biased` within those groups            [T, k]
    weights  = scores[chosen] (/ their sum, norm_topk_prob) x routed_scaling_factor

DeepSeek-V2 ("softmax_grouped") ranks softmax probabilities, each group by its best expert, without a bias (its
"greedy" routing is one group holding every expert).

gpt-oss ("topk_softmax", `route_topk_softmax`) chooses before it normalises: the top-k of the router's logits
(with a bias), then a softmax over those k alone, so the weights always sum to 1 and the other experts never enter
the denominator. Its experts have biases and a clamped SwiGLU (`clamped_swiglu`).

A token pays for k experts, not E: the parameters grow with E (and all of them must be resident in memory,
since the next token may want any expert), the compute per token grows with k only. Mixtral-8x7B holds 47B
parameters but runs 13B per token (`moe_param_counts`).

Dispatch is grouped, never "every expert on every token": the T*k (token, expert) pairs are sorted by
expert, each expert runs once, as one matrix product, on the block of tokens routed to it, and its weighted
outputs are added back to those tokens' rows. An expert that received no token costs nothing.

    chosen = [[0, 2], [2, 1], [0, 2]]   ->   expert 0: tokens [0, 2]   expert 1: [1]   expert 2: [0, 1, 2]

Routing statistics (`RoutingStats`, collected when `model.expert_load` holds one) count per layer the tokens
each expert received, and the router's entropy: log2(E) bits when it spreads a token evenly over all experts,
0 when it is certain.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from tinyinfer.attention import softmax
from tinyinfer.backend import to_numpy, xp_of
from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.mlp import linear, swiglu


def route(h, router, top_k: int, norm_topk_prob: bool):
    """Each token's top-k experts, best first, and their weights.

    h [T, d], router [d, E] -> weights [T, k] (h's dtype), chosen [T, k] (expert ids), probs [T, E] (float32)

    >>> h = np.array([[1.0, 0.0]]); router = np.array([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]])  # logits (2, 0, 1)
    >>> weights, chosen, probs = route(h, router, 2, norm_topk_prob=True)
    >>> chosen.tolist(), weights.round(3).tolist()   # experts 0 and 2, weights e^2 : e^1 rescaled to sum to 1
    ([[0, 2]], [[0.731, 0.269]])
    >>> route(h, router, 2, norm_topk_prob=False)[0].round(3).tolist()  # the raw softmax probabilities
    [[0.665, 0.245]]
    """
    # BEGIN EXERCISE 7.1: the router: softmax over experts, top-k, optional renormalisation
    xp = xp_of(h)
    probs = softmax((h @ router).astype(np.float32))  # [T, d] -> [T, E]; float32 like the reference
    chosen = xp.argsort(-probs, axis=-1)[:, :top_k]  # [T, E] -> [T, k], the most probable expert first
    weights = xp.take_along_axis(probs, chosen, axis=-1)  # [T, k]
    if norm_topk_prob:
        weights = weights / weights.sum(axis=-1, keepdims=True)  # the k chosen weights now sum to 1
    return weights.astype(h.dtype), chosen, probs
    # END EXERCISE 7.1


def route_grouped(h, mlp: dict, cfg: Config):
    """DeepSeek's group-limited routing: each token's top-k experts among those of its best `topk_groups` groups,
    and their weights times `routed_scaling`. "sigmoid_grouped" (V3): sigmoid scores, ranked with the bias
    mlp["router_bias"] [E] added and each group by the sum of its two best; "softmax_grouped" (V2): softmax
    probabilities, each group by its best.

    h [T, d] -> weights [T, k] (h's dtype), chosen [T, k] (expert ids), probs [T, E] (float32; sigmoid scores
    divided by their sum, so that routing statistics read them as a distribution)

    Four experts in two groups, scores (0.9, 0.1 | 0.6, 0.5), one group kept, top-2: the second group (0.6 + 0.5
    = 1.1 beats 0.9 + 0.1), so experts 2 and 3, though expert 0 scores best (tests/test_deepseek.py works it out).
    """
    xp, T, E, k = xp_of(h), h.shape[0], cfg.n_experts, cfg.n_experts_per_tok
    logits = (h @ mlp["router"]).astype(np.float32)  # [T, d] -> [T, E]; float32 like the reference
    if cfg.router == "sigmoid_grouped":
        scores = 1.0 / (1.0 + xp.exp(-logits))  # [T, E], each in (0, 1) on its own
        ranked = scores + mlp["router_bias"].astype(np.float32)  # [T, E]: the bias steers the choice only
        per_group = xp.sort(ranked.reshape(T, cfg.n_groups, -1), axis=-1)  # [T, G, E/G], ascending
        group_scores = per_group[..., -2:].sum(axis=-1)  # [T, G]: each group's two best
    else:
        scores = ranked = softmax(logits)  # [T, E]
        group_scores = ranked.reshape(T, cfg.n_groups, -1).max(axis=-1)  # [T, G]: each group's best
    best_groups = xp.argsort(-group_scores, axis=-1, kind="stable")[:, :cfg.topk_groups]  # [T, G] -> [T, topk_groups]
    kept = xp.zeros(group_scores.shape, dtype=bool)  # [T, G]
    kept[xp.arange(T)[:, None], best_groups] = True
    kept = xp.repeat(kept, E // cfg.n_groups, axis=-1)  # [T, G] -> [T, E]: each expert, whether its group is kept
    chosen = xp.argsort(-xp.where(kept, ranked, -xp.inf), axis=-1, kind="stable")[:, :k]  # [T, E] -> [T, k]
    weights = xp.take_along_axis(scores, chosen, axis=-1)  # [T, k]: unbiased
    if cfg.norm_topk_prob:
        weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)  # transformers' guard against 0 / 0
    weights = weights * np.float32(cfg.routed_scaling)
    return weights.astype(h.dtype), chosen, scores / scores.sum(axis=-1, keepdims=True)


def route_topk_softmax(h, mlp: dict, top_k: int):
    """gpt-oss's router: the top-k of the biased logits, softmaxed among themselves.

    h [T, d] -> weights [T, k] (h's dtype), chosen [T, k] (expert ids), probs [T, E] (float32, the softmax over all
    experts: only for routing statistics)

    >>> h = np.array([[1.0, 0.0]]); mlp = {"router": np.array([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]]),
    ...                                    "router_bias": np.array([0.0, 0.5, 0.0])}  # logits (2, 0.5, 1)
    >>> weights, chosen, _ = route_topk_softmax(h, mlp, 2)
    >>> chosen.tolist(), weights.round(3).tolist()   # e^2 : e^1, whatever expert 1's logit
    ([[0, 2]], [[0.731, 0.269]])
    """
    xp = xp_of(h)
    logits = h @ mlp["router"] + mlp["router_bias"]  # [T, d] -> [T, E], in h's dtype like the reference
    chosen = xp.argsort(-logits, axis=-1, kind="stable")[:, :top_k]  # [T, E] -> [T, k], the largest logit first
    weights = softmax(xp.take_along_axis(logits, chosen, axis=-1))  # [T, k]: the k chosen only
    return weights.astype(h.dtype), chosen, softmax(logits.astype(np.float32))


def clamped_swiglu(x, mlp: dict, alpha: float, limit: float):
    """gpt-oss's expert: a SwiGLU with biases whose gate is clamped from above and its up from both sides,
    down((clip(up, -limit, limit) + 1) * g sigmoid(alpha g)), g = min(gate, limit).  [T, d] -> [T, d_ff] -> [T, d]

    >>> one = {name: np.ones((1, 1)) for name in ("gate", "up", "down")}
    >>> round(float(clamped_swiglu(np.array([[10.0]]), one, alpha=1.0, limit=7.0)[0, 0]), 3)  # 8 * 7 sigmoid(7)
    55.949
    """
    xp = xp_of(x)
    gate = xp.minimum(linear(x, mlp, "gate"), limit)  # [T, d] -> [T, d_ff]
    up = xp.clip(linear(x, mlp, "up"), -limit, limit)  # [T, d] -> [T, d_ff]
    return linear((up + 1) * gate / (1.0 + xp.exp(-alpha * gate)), mlp, "down")  # [T, d_ff] -> [T, d]


def dispatch(h, chosen, weights, experts: list[dict], expert_mlp=None):
    """Run each expert once on the tokens routed to it and add its weighted outputs back to their rows.

    h [T, d], chosen and weights [T, k], experts: E weight dicts -> [T, d]. `expert_mlp(x, params)` runs one
    expert: by default a SwiGLU with SiLU (`moe_feed_forward` passes the model's: `expert_function`).
    """
    expert_mlp = expert_mlp or swiglu
    # BEGIN EXERCISE 7.2: grouped dispatch: one expert call per expert, on its group of tokens
    xp = xp_of(h)
    k = chosen.shape[1]
    expert_of_pair = chosen.reshape(-1)  # [T, k] -> [T*k]: pair p is (token p // k, expert chosen[p // k, p % k])
    order = xp.argsort(expert_of_pair)  # [T*k]: the pairs, grouped by expert
    token_of_pair = order // k  # [T*k]
    weight_of_pair = weights.reshape(-1)[order]  # [T*k]
    group_ends = to_numpy(xp.cumsum(xp.bincount(expert_of_pair, minlength=len(experts))))  # [E], on the host
    out = xp.zeros_like(h)  # [T, d]
    start = 0
    for e, end in enumerate(group_ends.tolist()):
        if end > start:  # an expert no token chose is skipped
            rows = token_of_pair[start:end]  # [n_e]: distinct, since top-k never picks one expert twice
            y = expert_mlp(h[rows], experts[e])  # [n_e, d] -> [n_e, d]
            out[rows] += y * weight_of_pair[start:end, None]  # [n_e, d] scaled by each token's weight
        start = end
    return out
    # END EXERCISE 7.2


def shared_expert(h, mlp: dict, activation: str = "silu"):
    """Qwen2-MoE's shared expert: a SwiGLU every token goes through, scaled by a per-token sigmoid gate.

    h [T, d] -> [T, d];  mlp["shared_gate"] is [d, 1]: one gate value in (0, 1) per token
    """
    # BEGIN EXERCISE 7.3: the gated shared expert
    gate = 1.0 / (1.0 + np.exp(-(h @ mlp["shared_gate"])))  # [T, d] -> [T, 1]
    return gate * swiglu(h, mlp["shared"], activation)  # [T, 1] * [T, d] -> [T, d]
    # END EXERCISE 7.3


def moe_feed_forward(h, mlp: dict, cfg: Config, stats: RoutingStats | None = None, layer: int = 0):
    """One Mixture-of-Experts layer: route, dispatch, add the shared expert when there is one.  [T, d] -> [T, d]"""
    weights, chosen, probs = choose_experts(h, mlp, cfg)
    if stats is not None:
        stats.record(layer, chosen, probs)
    out = dispatch(h, chosen, weights, mlp["experts"], expert_function(cfg))
    return add_shared_expert(out, h, mlp, cfg)


def choose_experts(h, mlp: dict, cfg: Config):
    """The model's router: weights [T, k], chosen [T, k] (expert ids), probs [T, E] (see `route`)."""
    if cfg.router == "softmax":
        return route(h, mlp["router"], cfg.n_experts_per_tok, cfg.norm_topk_prob)
    if cfg.router == "topk_softmax":  # gpt-oss
        return route_topk_softmax(h, mlp, cfg.n_experts_per_tok)
    return route_grouped(h, mlp, cfg)  # DeepSeek


def add_shared_expert(out, h, mlp: dict, cfg: Config):
    """out plus the shared expert's output on h, when the layer has one (gated: Qwen2-MoE).  [T, d] -> [T, d]"""
    if "shared" not in mlp:
        return out
    gated = cfg.shared_expert_gated
    return out + (shared_expert(h, mlp, cfg.activation) if gated else swiglu(h, mlp["shared"], cfg.activation))


def expert_function(cfg: Config):
    """`expert(x, params) -> y` of the model's experts: gpt-oss's clamped SwiGLU, or a SwiGLU with its activation."""
    if cfg.swiglu_limit is not None:
        return partial(clamped_swiglu, alpha=cfg.swiglu_alpha, limit=cfg.swiglu_limit)
    return partial(swiglu, activation=cfg.activation)


def moe_param_counts(cfg: Config) -> tuple[int, int]:
    """(total, active per token) parameters of one MoE feed-forward layer: router, experts, shared expert.

    Mixtral-8x7B (d=4096, expert width 14336, 8 experts, top-2): each expert is 3 x 4096 x 14336 = 176M,
    so a layer holds 1.41B and a token uses 352M of them (plus the router, 32K).
    """
    d, E, k = cfg.d_model, cfg.n_experts, cfg.n_experts_per_tok
    expert = 3 * d * cfg.moe_d_ff + (2 * cfg.moe_d_ff + d) * cfg.expert_bias  # gate, up and down (gpt-oss: biases)
    shared = 3 * d * cfg.shared_expert_d_ff + d * cfg.shared_expert_gated if cfg.shared_expert_d_ff else 0  # + gate
    router_bias = cfg.router in ("sigmoid_grouped", "topk_softmax")  # DeepSeek-V3's correction bias, gpt-oss's
    always = d * E + E * router_bias + shared  # router (and its bias), shared expert
    return always + E * expert, always + k * expert


def entropy_bits(probs) -> np.ndarray:
    """Entropy of each row of probabilities, in bits.  [T, E] -> [T]

    >>> entropy_bits(np.array([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]]))
    array([2., 0.])
    """
    probs = to_numpy(probs).astype(np.float64)
    return -(probs * np.log2(np.clip(probs, 1e-30, None))).sum(axis=-1) + 0.0  # + 0.0 turns -0.0 into 0.0


class RoutingStats:
    """What the routers did: tokens per expert per layer, and each layer's mean router entropy.

    Turn it on with `track_routing(model)`; every forward pass then adds to it (prefill and decode alike).
    `tokens[layer, e]` counts the tokens expert e of that layer received; each token counts in k experts.
    """

    def __init__(self, cfg: Config):
        self.layers = [i for i in range(cfg.n_layers) if cfg.is_moe_layer(i)]
        self.n_experts, self.top_k = cfg.n_experts, cfg.n_experts_per_tok
        self.tokens = np.zeros((cfg.n_layers, cfg.n_experts), dtype=np.int64)  # [L, E]
        self.entropy_sum = np.zeros(cfg.n_layers)  # [L], bits summed over the tokens routed
        self.routed = np.zeros(cfg.n_layers, dtype=np.int64)  # [L], tokens routed

    def record(self, layer: int, chosen, probs) -> None:
        chosen = to_numpy(chosen)
        self.tokens[layer] += np.bincount(chosen.reshape(-1), minlength=self.n_experts)  # [T, k] -> [E]
        self.entropy_sum[layer] += entropy_bits(probs).sum()
        self.routed[layer] += chosen.shape[0]

    def mean_entropy(self, layer: int) -> float:
        """Mean router entropy of a layer in bits (max log2(E): a router that cannot choose)."""
        return float(self.entropy_sum[layer] / max(self.routed[layer], 1))

    def table(self, max_columns: int = 16) -> str:
        """A compact per-layer expert-load table (with many experts, the busiest `max_columns` are shown).

        layer | tokens per expert  e0 e1 ... | idle | max/mean | entropy (bits)
        """
        wide = self.n_experts > max_columns
        head = f"busiest experts (id:tokens), of {self.n_experts}" if wide else " ".join(
            f"{f'e{e}':>5}" for e in range(self.n_experts))
        tokens = int(self.routed[self.layers[0]]) if self.layers else 0
        summary = (f"routing: {tokens} tokens per layer, top-{self.top_k} of {self.n_experts} experts; "
                   f"entropy max {np.log2(self.n_experts):.2f} bits")
        lines = [summary, f"layer | {head} | idle | max/mean | entropy"]
        for i in self.layers:
            load = self.tokens[i]
            if wide:
                busiest = np.argsort(-load, kind="stable")[:max_columns]
                cells = " ".join(f"{e}:{load[e]}" for e in busiest)
            else:
                cells = " ".join(f"{n:5d}" for n in load)
            imbalance = load.max() / max(load.mean(), 1e-9)
            lines.append(f"{i:5d} | {cells} | {int((load == 0).sum()):4d} | {imbalance:8.2f} | "
                         f"{self.mean_entropy(i):.2f} bits")
        return "\n".join(lines)


def track_routing(model) -> RoutingStats:
    """Start collecting routing statistics on `model` (a fresh RoutingStats, also kept as model.expert_load)."""
    if not model.config.n_experts:
        raise TinyInferError(f"this {model.config.model_type} model is dense: it has no experts, so no routing to show")
    model.expert_load = RoutingStats(model.config)
    return model.expert_load
