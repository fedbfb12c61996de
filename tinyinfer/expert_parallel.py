"""Expert parallelism: a Mixture-of-Experts layer's experts placed whole on ranks, tokens sent to their experts.

With E experts over n ranks, rank r holds experts r E/n .. (r + 1) E/n - 1, whole (tensor parallelism instead
cuts every expert into n slices). Attention stays split by heads (tinyinfer/parallel.py), so after its
all-reduce every rank holds all T tokens; the MoE layer then goes:

    mine    = h[rank's share of the T rows]             each rank routes T/n tokens (the router is whole)
    send    = all_to_all(those tokens' rows, grouped     a token goes to each rank holding one of its k experts
              by the rank of their experts)
    compute = each rank runs its experts on what came   one matrix product per expert, as in dispatch (moe.py)
    return  = all_to_all(the outputs, back)             the outputs go home, in the order they came
    combine = weighted sum over each token's k experts  (+ the shared expert, which every rank holds whole)
    out     = all_gather(every rank's rows)             every rank holds all T tokens again  [T, d]

Two all-to-alls of k T/n rows of d numbers per rank (less what stays on the rank itself: (n - 1)/n of it when
routing is even) and one all-gather per MoE layer. The experts' weights, the bulk of a MoE model, are divided by
n; the arithmetic per token stays that of k experts. A popular expert's rank does more than the others: that
imbalance is why routers are trained to spread their load (chapter 07 measures it).

vLLM's `--enable-expert-parallel` places experts over the tensor-parallel ranks the same way:

    mpirun -n 2 python -m tinyinfer generate --model M --tensor-parallel-size 2 --enable-expert-parallel "..."
"""

from __future__ import annotations

import numpy as np

from tinyinfer.backend import to_numpy
from tinyinfer.errors import TinyInferError
from tinyinfer.moe import add_shared_expert, choose_experts, expert_function
from tinyinfer.parallel import TensorParallelModel, shard_feed_forward


def expert_owner(e, n_experts: int, n: int):
    """The rank holding expert e (or each of an array of them): contiguous blocks of E / n experts.

    >>> expert_owner(np.arange(8), 8, 2).tolist()
    [0, 0, 0, 0, 1, 1, 1, 1]
    """
    return e * n // n_experts


def place_experts(mlp: dict, cfg, n: int, d: int) -> dict:
    """Rank d's experts whole (the others left out, as {}), the router and shared expert whole; a dense layer is
    split by hidden units as in tensor parallelism."""
    if "experts" not in mlp:
        return shard_feed_forward(mlp, cfg, n, d)
    experts = [expert if expert_owner(e, cfg.n_experts, n) == d else {} for e, expert in enumerate(mlp["experts"])]
    return dict(mlp, experts=experts)


class ExpertParallelModel(TensorParallelModel):
    """Rank comm.rank of `model` with attention split by heads and whole experts placed (module docstring)."""

    split_experts = False

    def __init__(self, model, comm):
        if not model.config.n_experts:
            raise TinyInferError(f"--enable-expert-parallel needs a Mixture-of-Experts model; this "
                                 f"{model.config.model_type} model is dense (use --tensor-parallel-size alone)")
        if model.config.n_experts % comm.size:
            raise TinyInferError(f"{model.config.n_experts} experts do not split over {comm.size} ranks: choose a "
                                 f"tensor parallel size dividing the number of experts")
        super().__init__(model, comm)

    shard_feed_forward = staticmethod(place_experts)

    def feed_forward(self, i, layer, h):
        """A MoE layer through the all-to-alls (module docstring); a dense one as in tensor parallelism."""
        if not self.config.is_moe_layer(i):
            return super().feed_forward(i, layer, h)
        n, r, T = self.comm.size, self.comm.rank, h.shape[0]
        per_rank = -(-T // n)  # rows per rank, the last ones padded so that every rank gathers as many
        mine = h[r * per_rank:(r + 1) * per_rank]  # [t, d], t <= per_rank
        out = self.experts_on_ranks(mine, layer["mlp"], i)  # [t, d]
        padded = self.xp.zeros((per_rank, h.shape[1]), dtype=h.dtype)  # [per_rank, d]
        padded[:out.shape[0]] = out
        return self.comm.all_gather(padded, axis=0)[:T]  # [n per_rank, d] -> [T, d]

    def experts_on_ranks(self, mine, mlp: dict, i: int):
        """This rank's tokens through their k experts wherever those live, and the shared expert.  [t, d] -> [t, d]"""
        cfg, n, xp = self.config, self.comm.size, self.xp
        weights, chosen, probs = choose_experts(mine, mlp, cfg)  # [t, k] each
        if self.expert_load is not None:
            self.expert_load.record(i, chosen, probs)
        k = chosen.shape[1]
        pair_expert = to_numpy(chosen).reshape(-1)  # [t k]: pair p is (token p // k, expert pair_expert[p])
        by_rank = np.argsort(expert_owner(pair_expert, cfg.n_experts, n), kind="stable")  # [t k], grouped by rank
        bounds = np.searchsorted(expert_owner(pair_expert[by_rank], cfg.n_experts, n), np.arange(n + 1))  # [n + 1]
        groups = [by_rank[bounds[j]:bounds[j + 1]] for j in range(n)]  # the pairs each rank computes
        rows = self.comm.all_to_all([mine[g // k] for g in groups])  # n x [m_j, d]: the tokens sent here
        ids = [to_numpy(x) for x in self.comm.all_to_all([pair_expert[g] for g in groups])]  # n x [m_j]: their experts
        outputs = self.comm.all_to_all(self.run_experts(rows, ids, mlp))  # n x [m_j, d]: ours, back home
        pair_out = xp.zeros((len(pair_expert), mine.shape[1]), dtype=mine.dtype)  # [t k, d]
        for g, y in zip(groups, outputs):
            pair_out[g] = y
        out = xp.zeros_like(mine)  # [t, d]
        flat_weights = weights.reshape(-1)  # [t k]
        for e in np.unique(pair_expert):  # expert by expert, as `dispatch` adds them (same rounding)
            pairs = np.flatnonzero(pair_expert == e)
            out[pairs // k] += pair_out[pairs] * flat_weights[pairs, None]
        return add_shared_expert(out, mine, mlp, cfg)

    def traffic_formula(self) -> dict[str, tuple[float, str]]:
        """As tensor parallelism's, but one all-reduce per MoE layer (attention's) and the MoE layers' exchange,
        as it would be with routing spread evenly (the measured bytes follow the router's real choices)."""
        cfg, T, b, n, L = self.config, self.tokens, self.dtype.itemsize, self.comm.size, len(self.layers)
        moe = sum(cfg.is_moe_layer(i) for i in self.layers)
        k, d = cfg.n_experts_per_tok, cfg.d_model
        formula = super().traffic_formula()
        formula["all_reduce"] = ((2 * L - moe) * T * d * b, f"(2 x {L} layers - {moe} MoE) x {T} tokens x d {d} x {b} B")
        away = (n - 1) / n  # of a rank's rows go to experts on other ranks, routing spread evenly
        formula["all_to_all"] = (moe * T / n * k * away * (2 * d * b + 8),
                                 f"{moe} MoE layers x {T}/{n} tokens x k {k} x {away:g} away x (2 x d {d} x {b} B + "
                                 f"an 8 B expert id)")
        logits = formula.get("all_gather", (0, "no logits on this stage"))
        formula["all_gather"] = (logits[0] + moe * self.shares * d * b, f"{logits[1]} + {moe} MoE layers x "
                                 f"{self.shares} rows (each pass's tokens / {n}, rounded up) x d {d} x {b} B")
        return formula

    def run_experts(self, rows: list, ids: list, mlp: dict) -> list:
        """Each local expert once, on every row sent to it from any rank; the outputs in the order they came."""
        expert_mlp = expert_function(self.config)
        counts = [len(x) for x in rows]
        x, expert_of = self.xp.concatenate(rows), np.concatenate(ids)  # [m, d], [m]
        y = self.xp.empty_like(x)  # [m, d]
        for e in np.unique(expert_of):
            taken = np.flatnonzero(expert_of == e)
            y[taken] = expert_mlp(x[taken], mlp["experts"][e])  # [m_e, d] -> [m_e, d]
        return self.xp.split(y, np.cumsum(counts)[:-1].tolist())  # -> n x [m_j, d]
