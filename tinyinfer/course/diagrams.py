"""Diagrams where a picture beats prose, drawn with matplotlib from the numbers written here.

Each function returns a figure; `DIAGRAMS` names them, and `python -m tinyinfer course figures` saves each as
chapters/images/diagram-NAME.png (see figures.py). They draw the ideas, not measurements: every number is
below, so a diagram is the same on every machine.
"""

from __future__ import annotations

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def prefill_decode():
    """Chapter 05: one request's life. Prefill is one wide pass over the whole prompt (matrix-matrix, compute
    bound); each decode step is one token and re-reads every weight (memory bound)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 2.6))
    prompt, steps, prefill_ms, step_ms = 12, 8, 6.0, 2.0
    ax.barh(0, prefill_ms, left=0, color="tab:orange")
    ax.text(prefill_ms / 2, 0, f"prefill: {prompt} prompt tokens\nin one pass", ha="center", va="center", fontsize=8)
    for i in range(steps):
        ax.barh(0, step_ms * 0.9, left=prefill_ms + i * step_ms, color="tab:blue")
        ax.text(prefill_ms + (i + 0.45) * step_ms, 0, f"t{i + 1}", ha="center", va="center", color="white", fontsize=8)
    ax.annotate("", xy=(prefill_ms, 0.55), xytext=(0, 0.55), arrowprops={"arrowstyle": "<->"})
    ax.text(prefill_ms / 2, 0.62, "TTFT (after queueing)", ha="center", fontsize=8)
    ax.annotate("", xy=(prefill_ms + 2 * step_ms, -0.55), xytext=(prefill_ms + step_ms, -0.55), arrowprops={"arrowstyle": "<->"})
    ax.text(prefill_ms + 1.5 * step_ms, -0.75, "TPOT", ha="center", fontsize=8)
    ax.set_xlim(0, prefill_ms + steps * step_ms + 0.5)
    ax.set_ylim(-1, 1)
    ax.set_yticks([])
    ax.set_xlabel("time (ms, illustrative)")
    ax.set_title("Prefill is compute-bound (all prompt tokens at once); decode is memory-bound (one token per pass)")
    return fig


def block_table():
    """Chapter 09: two sequences' logical blocks mapped onto scattered physical blocks of one pool; the
    shared prompt prefix is one physical block held by both (reference count 2)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.6))
    n_pool, block = 10, 4
    tables = {"seq A": [3, 7, 1], "seq B": [3, 5]}  # block 3: the shared prefix
    owner = {3: "shared", 7: "seq A", 1: "seq A", 5: "seq B"}
    colours = {"seq A": "tab:blue", "seq B": "tab:green", "shared": "tab:purple"}
    for b in range(n_pool):
        colour = colours.get(owner.get(b), "white")
        ax.add_patch(plt.Rectangle((b, 0), 0.9, 0.9, facecolor=colour, edgecolor="black", alpha=0.6))
        ax.text(b + 0.45, 0.45, str(b), ha="center", va="center")
    ax.text(-0.2, 0.45, "pool", ha="right", va="center")
    for row, (name, table) in enumerate(tables.items()):
        y = 2.2 + 1.2 * row
        ax.text(-0.2, y + 0.45, f"{name}\nblock table", ha="right", va="center", fontsize=8)
        for i, b in enumerate(table):
            ax.add_patch(plt.Rectangle((i * 1.2, y), 1.0, 0.9, facecolor=colours[owner[b]], edgecolor="black", alpha=0.6))
            ax.text(i * 1.2 + 0.5, y + 0.45, f"logical {i}\n-> {b}", ha="center", va="center", fontsize=7)
            ax.annotate("", xy=(b + 0.45, 0.92), xytext=(i * 1.2 + 0.5, y), arrowprops={"arrowstyle": "->", "alpha": 0.5})
    ax.text(n_pool - 0.1, 4.3, f"block size {block} tokens\nposition p -> table[p // {block}], offset p % {block}\n"
            "block 3: the shared prefix, refcount 2", ha="right", va="top", fontsize=8)
    ax.set_xlim(-2.2, n_pool + 0.2)
    ax.set_ylim(-0.3, 4.6)
    ax.axis("off")
    ax.set_title("Paged KV cache: block tables map each sequence's logical blocks onto one pool")
    return fig


def batching_timeline():
    """Chapter 10: the same five requests under static and continuous batching, 3 slots. Static batching
    waits for the whole batch to finish; continuous batching gives a freed slot to the next request at once."""
    plt = _plt()
    lengths = [6, 14, 4, 9, 5]  # decode steps each request needs, in arrival order
    fig, axes = plt.subplots(1, 2, figsize=(10, 3), sharey=True)
    slots = 3
    # static: batches of 3, each as long as its longest
    t, rows = 0, []
    for start in range(0, len(lengths), slots):
        batch = lengths[start:start + slots]
        rows += [(start + i, t, n, max(batch)) for i, n in enumerate(batch)]
        t += max(batch)
    static_end = t
    # continuous: a request starts as soon as a slot frees
    free = [0] * slots
    cont = []
    for i, n in enumerate(lengths):
        s = int(np.argmin(free))
        cont.append((i, free[s], n, n))
        free[s] += n
    for ax, name, runs in ((axes[0], "static", rows), (axes[1], "continuous", cont)):
        for i, begin, n, held in runs:
            ax.barh(i, n, left=begin, color="tab:blue")
            if held > n:
                ax.barh(i, held - n, left=begin + n, color="lightgrey", hatch="//")
        ax.set_title(f"{name} batching: done at step {static_end if name == 'static' else max(free)}")
        ax.set_xlabel("decode step")
    axes[0].set_ylabel("request")
    axes[0].invert_yaxis()
    axes[0].legend(["decoding", "slot held, idle"], loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


DIAGRAMS = {"prefill-decode": prefill_decode, "block-table": block_table, "batching-timeline": batching_timeline}
