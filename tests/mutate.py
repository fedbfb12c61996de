"""Mutation check: plant plausible bugs, one at a time, in a copy of the project, and see whether the tests fail.

    python tests/mutate.py            # every mutation (a while: each runs its own tests)
    python tests/mutate.py --quick    # the quick subset CI runs (under 2 minutes)
    python tests/mutate.py NAME...    # the named ones; --list prints them all

Each mutation is a source-text replacement in one file of `tinyinfer/` (one bug per core rule: attention scale and
mask, the RoPE variants, each sampling control and the draw, stop strings, the BPE rules, the block allocator and
prefix hashes, the scheduler's budgets, each JSON-Schema keyword family, MoE routing and renormalisation, each
quantisation format, speculative acceptance, the CLI's flags) and the tests that should catch it. The project is
copied once into a temporary folder; each mutation is planted there, its tests run (`pytest -x`, the copy
first on PYTHONPATH), and the file restored. A mutation is "caught" when its tests fail, "SURVIVED" when they
pass. Before anything runs, every target text must occur exactly once in its file: a mutation whose target moved
or was renamed fails loudly, so the list follows the code. Exit status 1 when any survives or cannot be planted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("tinyinfer", "tests", "weights_scripts", "pyproject.toml")
TIMEOUT_S = 900  # a mutation that makes its tests hang counts as caught


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the project root
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, node ids, -k expressions
    quick: bool = False  # in the subset CI runs


SAMPLING = "tinyinfer/sampling.py"
GGUF = "tinyinfer/gguf/quants.py"
STATS = "tests/test_sampling_statistics.py"
MUTATIONS = [
    # --- attention and RoPE
    Mutation("attention scale: head_dim^-1/4 instead of ^-1/2", "tinyinfer/attention.py",
             "    scale = hd**-0.5 if scale is None else scale\n    scores", "    scale = hd**-0.25 if scale is None else scale\n    scores",
             ("tests/test_core.py", "-k", "stories260k_greedy or grouped_query"), quick=True),
    Mutation("tiled attention's query tiles as long as its key tiles", "tinyinfer/flash_attention.py",
             "    query_tile = min(QUERY_TILE, tile) if query_tile is None else query_tile",
             "    query_tile = tile if query_tile is None else query_tile",
             ("tests/test_flash_attention.py", "-k", "skipped")),
    Mutation("a query tile's last key tile cut at the tile's first query", "tinyinfer/flash_attention.py",
             "        end = min(last + 1, L)", "        end = min(first + 1, L)",
             ("tests/test_flash_attention.py", "-k", "shorter_than_key_tiles")),
    Mutation("a short chunk over many scores attends untiled", "tinyinfer/model.py",
             "if n >= TILED_ATTENTION_MIN_QUERIES or cfg.n_heads * n * end > TILED_ATTENTION_MAX_SCORES:",
             "if n >= TILED_ATTENTION_MIN_QUERIES:",
             ("tests/test_flash_attention.py", "-k", "many_scores")),
    Mutation("decode attention scale forgotten", "tinyinfer/attention.py",
             "    q = q * scale  # scaling", "    q = q * 1.0  # scaling", ("tests/test_paged_cache.py",)),
    Mutation("causal mask lets each query see the next token", "tinyinfer/attention.py",
             "    visible = key_pos <= query_pos  # [n, L]", "    visible = key_pos <= query_pos + 1  # [n, L]",
             ("tests/test_core.py",)),
    Mutation("sliding window one key too wide", "tinyinfer/attention.py",
             "visible &= key_pos > query_pos - window  # forget", "visible &= key_pos >= query_pos - window  # forget",
             ("tests/test_parity_hf.py", "-k", "window")),
    Mutation("RoPE rotates the second half the wrong way", "tinyinfer/rope.py",
             "    rotated[..., half:] = x2 * cos + x1 * sin", "    rotated[..., half:] = x2 * cos - x1 * sin",
             ("tests/test_core.py",)),
    Mutation("RoPE linear scaling multiplies the frequencies", "tinyinfer/rope.py",
             '        return inv_freq / scaling["factor"]', '        return inv_freq * scaling["factor"]',
             ("tests/test_parity_hf.py", "-k", "rope_linear")),
    Mutation("RoPE llama3 scaling leaves the low frequencies alone", "tinyinfer/rope.py",
             "    scaled = np.where(wavelength > old_context / low, inv_freq / factor, inv_freq)",
             "    scaled = np.where(wavelength > old_context / low, inv_freq, inv_freq)",
             ("tests/test_parity_hf.py", "-k", "llama3")),
    Mutation("RoPE YaRN ramp reversed", "tinyinfer/rope.py",
             "    kept = 1 - np.clip(ramp, 0, 1)", "    kept = np.clip(ramp, 0, 1)",
             ("tests/test_config_variants.py", "-k", "yarn")),
    Mutation("RoPE YaRN attention factor 0.2 ln(factor) + 1", "tinyinfer/rope.py",
             "0.1 * m * math.log(factor) + 1.0", "0.2 * m * math.log(factor) + 1.0",
             ("tests/test_config_variants.py", "-k", "yarn")),
    # --- sampling
    Mutation("draw without normalising its CDF", SAMPLING,
             "    cdf /= cdf[-1]  # exactly 1 at the end", "    pass  # exactly 1 at the end",
             ("tests/test_sampling.py", "-k", "empirical"), quick=True),
    Mutation("draw without normalising its CDF, through generate", SAMPLING,
             "    cdf /= cdf[-1]  # exactly 1 at the end", "    pass  # exactly 1 at the end", (STATS, "-k", "generate and default")),
    Mutation("draw without normalising its CDF, through the engine's batched sampling and the server", SAMPLING,
             "    cdf /= cdf[-1]  # exactly 1 at the end", "    pass  # exactly 1 at the end", (STATS, "-k", "engine or server")),
    Mutation("temperature multiplies the logits", SAMPLING,
             "    return logits / temperature", "    return logits * temperature", ("tests/test_sampling.py", STATS, "-k", "temperature")),
    Mutation("top-k drops the k-th token too", SAMPLING,
             "xp.where(logits < kth_largest, -xp.inf, logits)", "xp.where(logits <= kth_largest, -xp.inf, logits)",
             ("tests/test_sampling.py", STATS, "-k", "top_k")),
    Mutation("top-p drops the token that crosses the threshold", SAMPLING,
             "    mass_above = xp.cumsum(probs) - probs  #", "    mass_above = xp.cumsum(probs)  #", ("tests/test_sampling.py", STATS, "-k", "top_p")),
    Mutation("min-p threshold not relative to the top token", SAMPLING,
             "probs < min_p * probs.max()", "probs < min_p", ("tests/test_sampling.py", STATS, "-k", "min_p")),
    Mutation("repetition penalty divides negative logits too", SAMPLING,
             "xp.where(scores < 0, scores * penalty, scores / penalty)", "xp.where(scores < 0, scores / penalty, scores / penalty)",
             ("tests/test_sampling.py", STATS, "-k", "repetition")),
    Mutation("presence penalty counted per occurrence", SAMPLING,
             "- presence * (counts > 0)", "- presence * counts", ("tests/test_sampling.py", STATS, "-k", "presence")),
    Mutation("logit_bias subtracted", SAMPLING,
             "        out[token_id] += value", "        out[token_id] -= value", ("tests/test_sampling.py", STATS, "-k", "logit_bias")),
    # --- stop strings
    Mutation("the stop that starts first wins (not the one that ends first)", "tinyinfer/stopping.py",
             "key=lambda m: (m[0] + len(m[1]), m[0])", "key=lambda m: m[0]", ("tests/test_stopping.py",)),
    Mutation("held-back text one character short", "tinyinfer/stopping.py",
             "range(min(len(stop) - 1, len(text)), longest, -1)", "range(min(len(stop) - 2, len(text)), longest, -1)",
             ("tests/test_stopping.py",)),
    # --- BPE
    Mutation("BPE: a repeated merge pair, the first wins", "tinyinfer/tokenizer/bpe.py",
             "            self.ranks[vocab[left], vocab[right]] = (rank, vocab[merged])",
             "            self.ranks.setdefault((vocab[left], vocab[right]), (rank, vocab[merged]))",
             ("tests/test_tokenizer_bpe.py", "-k", "repeated"), quick=True),
    Mutation("BPE: stale heap entries not checked", "tinyinfer/tokenizer/bpe.py",
             "        if found is None or found[0] != rank:", "        if found is None:",
             ("tests/test_tokenizer_bpe.py",)),
    # --- paged KV cache, prefix cache, scheduler
    Mutation("prefix hashes not chained", "tinyinfer/engine/block_manager.py",
             "        previous = block_hash(previous, token_ids[start:start + block_size])",
             "        previous = block_hash(root, token_ids[start:start + block_size])", ("tests/test_paged_cache.py",)),
    Mutation("prefix hit without comparing the token ids", "tinyinfer/engine/block_manager.py",
             "return block if block is not None and self.tokens_of[block] == tuple(token_ids) else None",
             "return block", ("tests/test_paged_cache.py", "tests/test_prefix_cache_safety.py")),
    Mutation("a shared block's refcount reset to 1", "tinyinfer/engine/block_manager.py",
             "        self.refcount[block] += 1\n        return block", "        self.refcount[block] = 1\n        return block",
             ("tests/test_paged_cache.py",)),
    Mutation("eviction takes the most recently freed block", "tinyinfer/engine/block_manager.py",
             "self.free_blocks.popitem(last=False)", "self.free_blocks.popitem(last=True)", ("tests/test_paged_cache.py",)),
    Mutation("chunked prefill ignores the token budget", "tinyinfer/engine/scheduler.py",
             "            return min(missing, budget)", "            return missing", ("tests/test_engine.py",)),
    Mutation("one sequence more than max_num_seqs admitted", "tinyinfer/engine/scheduler.py",
             "len(self.running) < self.config.max_num_seqs", "len(self.running) <= self.config.max_num_seqs",
             ("tests/test_engine.py",)),
    # --- JSON Schema, one keyword family each
    Mutation("JSON Schema strings: minLength ignored", "tinyinfer/constrain/json_schema.py",
             '        lo, hi = schema.get("minLength", 0), schema.get("maxLength")\n        fmt',
             '        lo, hi = 0, schema.get("maxLength")\n        fmt', ("tests/test_json_schema_strings.py",)),
    Mutation("JSON Schema numbers: minimum ignored", "tinyinfer/constrain/json_schema.py",
             '    lo, hi = schema.get("minimum"), schema.get("maximum")', '    lo, hi = None, schema.get("maximum")',
             ("tests/test_json_schema_numbers.py",)),
    Mutation("JSON Schema arrays: minItems ignored", "tinyinfer/constrain/json_schema.py",
             '        lo, hi = schema.get("minItems", 0), schema.get("maxItems")', '        lo, hi = 0, schema.get("maxItems")',
             ("tests/test_json_schema_arrays.py",)),
    Mutation("JSON Schema objects: required ignored", "tinyinfer/constrain/json_schema.py",
             '        required = list(dict.fromkeys(schema.get("required", [])))', "        required = []",
             ("tests/test_json_schema_objects.py",)),
    Mutation("JSON Schema enum: only the first value", "tinyinfer/constrain/json_schema_check.py",
             '        return list(schema["enum"])\n', '        return list(schema["enum"])[:1]\n',
             ("tests/test_json_schema_logic.py",)),
    Mutation("JSON Schema anyOf read as oneOf's first branch", "tinyinfer/constrain/json_schema.py",
             '        for key in ("anyOf", "oneOf"):\n            if key in schema:',
             '        for key in ("oneOf",):\n            if key in schema:', ("tests/test_json_schema_logic.py",)),
    # --- MoE
    Mutation("MoE routes to the least probable experts", "tinyinfer/moe.py",
             "    chosen = xp.argsort(-probs, axis=-1)[:, :top_k]", "    chosen = xp.argsort(probs, axis=-1)[:, :top_k]",
             ("tests/test_moe.py",)),
    Mutation("MoE chosen weights not renormalised", "tinyinfer/moe.py",
             "        weights = weights / weights.sum(axis=-1, keepdims=True)  # the k chosen",
             "        weights = weights  # the k chosen", ("tests/test_moe.py",)),
    Mutation("DeepSeek grouped routing not renormalised", "tinyinfer/moe.py",
             "        weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)", "        weights = weights",
             ("tests/test_deepseek.py",)),
    # --- quantisation formats
    Mutation("gpt-oss's Hub MXFP4: the high nibble read first", "tinyinfer/families/gpt_oss.py",
             "np.stack([blocks & 0x0F, blocks >> 4], axis=-1)", "np.stack([blocks >> 4, blocks & 0x0F], axis=-1)",
             ("tests/test_gpt_oss.py", "-k", "mxfp4")),
    Mutation("gpt-oss's Hub MXFP4: the codes not repacked into GGUF's order", "tinyinfer/families/gpt_oss.py",
             "codes[:, :16] | codes[:, 16:] << 4", "codes[:, 0::2] | codes[:, 1::2] << 4",
             ("tests/test_gpt_oss.py", "-k", "mxfp4")),
    Mutation("int8/int4 weights: qmax one too large", "tinyinfer/quantize.py",
             "    qmax = 2 ** (bits - 1) - 1\n", "    qmax = 2 ** (bits - 1)\n", ("tests/test_quantize.py",)),
    Mutation("int4 unpacking: the odd rows off by one", "tinyinfer/quantize.py",
             "    high = (packed >> 4).astype(np.int8) - 8", "    high = (packed >> 4).astype(np.int8) - 7",
             ("tests/test_quantize.py",)),
    Mutation("int8 KV cache read back without its scale", "tinyinfer/kv_quant.py",
             "    return codes * scales  #", "    return codes * scales.max()  #", ("tests/test_kv_quant.py",)),
    # --- FP8 checkpoints (tinyinfer/fp8.py), against torch's float8_e4m3fn and PyTorch's dequantisation
    *[Mutation(f"FP8 {name}", "tinyinfer/fp8.py", old, new, ("tests/test_fp8_checkpoints.py",)) for name, old, new in [
        ("E4M3: subnormals given a leading 1", "m * 2.0 ** -9)", "(8 + m) * 2.0 ** -9)"),
        ("E4M3: the exponent biased by 8", "(8 + m) * 2.0 ** (e - 10)", "(8 + m) * 2.0 ** (e - 11)"),
        ("edge blocks sized by the scales' count", "    rows, cols = block or (out, d_in)  #",
         "    rows, cols = (-(-out // scale_inv.shape[-2]), -(-d_in // scale_inv.shape[-1])) if block else (out, d_in)  #"),
        ("the scales left out", "    return codes * expanded[..., :out, :d_in]", "    return codes + 0 * expanded[..., :out, :d_in]"),
    ]],
    # --- GGUF block formats (tinyinfer/gguf/quants.py), each against the gguf library's dequantiser
    *[Mutation(f"GGUF {name}", GGUF, old, new, ("tests/test_gguf_quants.py",)) for name, old, new in [
        ("Q8_0: the scale read as an integer", "    return q * d  # [n, 32]", "    return q * np.round(d)  # [n, 32]"),
        ("Q4_0: codes offset by 7", "np.int8(8)  # [n, 16] -> [n, 32], -8..7", "np.int8(7)  # [n, 16] -> [n, 32], -8..7"),
        ("Q4_1: the minimum left out", "    q = _nibbles(blocks[:, 4:20], 16).astype(np.float32)  # [n, 16] -> [n, 32]\n    return d * q + m",
         "    q = _nibbles(blocks[:, 4:20], 16).astype(np.float32)  # [n, 16] -> [n, 32]\n    return d * q"),
        ("Q5_0: codes offset by 15", "np.int8(16)  # [n, 32], -16..15", "np.int8(15)  # [n, 32], -16..15"),
        ("Q5_1: the fifth bit dropped", "q = _q5_codes(blocks[:, 4:8], blocks[:, 8:24]).astype(np.float32)",
         "q = (_q5_codes(blocks[:, 4:8], blocks[:, 8:24]) & 0x0F).astype(np.float32)"),
        ("Q2_K: the minimum from the scale's nibble", "ml = (dmin * (scales >> 4)", "ml = (dmin * (scales & 0xF)"),
        ("Q3_K: 6-bit scales offset by 31", "np.int8(32)  # [n, 16], -32..31", "np.int8(31)  # [n, 16], -32..31"),
        ("Q4_K: the minimum added", "    return (step * q - minimum).reshape(n, QK_K)", "    return (step * q + minimum).reshape(n, QK_K)"),
        ("Q5_K: the fifth bit one place low", "(_bits(blocks[:, 16:48], QK_K) << 4)", "(_bits(blocks[:, 16:48], QK_K) << 3)"),
        ("Q6_K: codes offset by 31", "np.int8(32)  # [n, 2, 128], -32..31", "np.int8(31)  # [n, 2, 128], -32..31"),
        ("K-quant 6-bit scales: the high bits one place low", "(c & 0x0F) | ((a >> 6) << 4)", "(c & 0x0F) | ((a >> 6) << 3)"),
        ("IQ4_NL: each code's neighbouring level", "KVALUES_IQ4NL[_nibbles(blocks[:, 2:18], 16)]",
         "KVALUES_IQ4NL[_nibbles(blocks[:, 2:18], 16) ^ 1]"),
        ("IQ4_XS: 6-bit scales offset by 31", "(ls.astype(np.int8) - np.int8(32))", "(ls.astype(np.int8) - np.int8(31))"),
        ("TQ1_0: a byte's trits read last first", "POW3[:per_byte].reshape(1, -1, 1)", "POW3[:per_byte][::-1].reshape(1, -1, 1)"),
        ("TQ2_0: codes not offset", "_crumbs(blocks[:, 0:64]).astype(np.int8) - np.int8(1)", "_crumbs(blocks[:, 0:64]).astype(np.int8)"),
        ("MXFP4: the E8M0 scale not halved", "e.astype(np.int32) - 128", "e.astype(np.int32) - 127"),
        ("NVFP4: nibbles in chunks of 16", "_nibbles(blocks[:, 4:36], 8)", "_nibbles(blocks[:, 4:36], 16)"),
        ("UE4M3: subnormal scales given a leading 1", "np.where(e > 0, m + 8, m)", "(m + 8)"),
        ("IQ2: the step halved, not quartered", "np.float32(0.25))[..., None]", "np.float32(0.5))[..., None]"),
        ("IQ2_S: the index's high bits one place low", "(high.reshape(n, 32).astype(np.uint16) << 8)",
         "(high.reshape(n, 32).astype(np.uint16) << 7)"),
        ("IQ3_S: the ninth index bits read high bit first", 'np.unpackbits(blocks[:, 66:74], axis=-1, bitorder="little")',
         'np.unpackbits(blocks[:, 66:74], axis=-1, bitorder="big")'),
        ("IQ1_S: the shift's sign from bit 14", "np.where(qh & 0x8000, -IQ1S_DELTA", "np.where(qh & 0x4000, -IQ1S_DELTA"),
        ("IQ1_M: d's nibbles put back in reverse order", "np.array([0, 4, 8, 12], dtype=np.uint16)  # [n, 4]: d's bits",
         "np.array([12, 8, 4, 0], dtype=np.uint16)  # [n, 4]: d's bits"),
    ]],
    *[Mutation(f"GGUF {name}", "tinyinfer/gguf/iq_grids.py", old, new, ("tests/test_gguf_quants.py",)) for name, old, new in [
        ("codebooks: weight 0 read as a pattern's top digit", "len(levels) ** np.arange(width)",
         "len(levels) ** np.arange(width)[::-1]"),
        ("ksigns: the 8th sign makes the count of minus signs odd", "return i | (odd << 7)", "return i | ((odd ^ 1) << 7)"),
    ]],
    # --- speculative decoding
    Mutation("speculative: a guess kept with probability p, not min(1, p / q)", "tinyinfer/speculative.py",
             "        if rng.random() >= p[i, x] / q[i, x]:", "        if rng.random() >= p[i, x]:",
             ("tests/test_speculative.py",)),
    Mutation("speculative: residual max(0, q - p)", "tinyinfer/speculative.py",
             "    extra = np.maximum(p - q, 0.0)", "    extra = np.maximum(q - p, 0.0)", ("tests/test_speculative.py",)),
    Mutation("speculative: the guess budget never backs off after a miss", "tinyinfer/speculative.py",
             "            self.wait = min(2 ** self.misses, self.MAX_WAIT)", "            self.wait = 0",
             ("tests/test_speculative.py", "-k", "budget or greedy_with_a_draft")),
    Mutation("row-by-row products: each row multiplied by the first", "tinyinfer/mlp.py",
             "        return np.matmul(x[:, None, :], w)[:, 0]", "        return np.matmul(x[:1, None, :], w)[[0] * len(x), 0]",
             ("tests/test_core.py", "-k", "row_by_row")),
    # --- the command line
    Mutation("generate --quantize quantises a discarded copy", "tinyinfer/commands/generate.py",
             "        quantize_model(model, args.quantize)",
             "        quantize_model(tinyinfer.load(args.model, kv_cache_dtype=args.kv_cache_dtype), args.quantize)",
             ("tests/test_cli_flags.py", "-k", "quantize"), quick=True),
    # --- strict JSON Schema grammars for generation
    Mutation("generation's schemas compiled with the spec's open objects", "tinyinfer/constrain/build.py",
             "return schema_to_grammar(load_schema(spec), strict=True)", "return schema_to_grammar(load_schema(spec))",
             ("tests/test_json_schema_strict.py", "-k", "generation")),
    Mutation("strict objects drop the required keys they do not declare", "tinyinfer/constrain/json_schema.py",
             "named = declared | {key: True for key in", "named = declared or {key: True for key in",
             ("tests/test_json_schema_strict.py", "-k", "required")),
    Mutation("strict tuples left open", "tinyinfer/constrain/json_schema.py",
             'schema = {**schema, "items" if "prefixItems" in schema else "additionalItems": False}',
             'schema = {**schema, "items" if "prefixItems" in schema else "additionalItems": True}',
             ("tests/test_json_schema_strict.py", "-k", "tuple")),
    Mutation("the server's warm-up freezes nothing", "tinyinfer/commands/serve.py",
             "    gc.collect()\n    gc.freeze()\n", "    gc.collect()\n", ("tests/test_server.py", "-k", "warm_up")),
    Mutation("tokenize reads a .gguf file as a tokenizer.json", "tinyinfer/loading.py",
             "    if path.is_file() and is_gguf(path):\n        from tinyinfer.gguf.model_file import gguf_tokenizer",
             "    if False:\n        from tinyinfer.gguf.model_file import gguf_tokenizer",
             ("tests/test_tokenizer_cli.py", "-k", "gguf")),
    # --- the server's abort of a client that left; bench serve's products-only ceiling; the vocabulary's warm-up
    Mutation("the server never notices a client leaving while it waits", "tinyinfer/engine/server.py",
             "        self.submission.events.put_nowait(GONE)", "        pass",
             ("tests/test_server.py", "-k", "leaves")),
    Mutation("the products bound forgets sequential's one-row steps", "tinyinfer/bench/serve.py",
             "(len(ids) - 1) * products(1, 1)", "0 * products(1, 1)",
             ("tests/test_engine.py", "-k", "products_alone")),
    Mutation("product timings keep the slowest run", "tinyinfer/bench/serve.py",
             "self.layer_s = [min(t, self._fastest(n, 0))",
             "self.layer_s = [max(0.0 if t == np.inf else t, self._fastest(n, 0))",
             ("tests/test_engine.py", "-k", "product_times")),
    Mutation("warm_vocabulary compiles the grammar and walks nothing", "tinyinfer/constrain/build.py",
             "    masker.mask(masker.parser.step(masker.parser.initial, ord('\"')))",
             "    masker.parser.step(masker.parser.initial, ord('\"'))",
             ("tests/test_constrain_masks.py", "-k", "warmed")),
]


def check_targets(root: Path, mutations: list[Mutation]) -> list[str]:
    """Why each mutation that cannot be planted cannot (its target text is not found exactly once)."""
    problems = []
    for m in mutations:
        path = root / m.path
        count = path.read_text(encoding="utf-8").count(m.old) if path.is_file() else -1
        if count != 1:
            where = "the file is missing" if count < 0 else f"found {count} times"
            problems.append(f"{m.name}: the target text in {m.path} is {where}: the code moved; update tests/mutate.py")
    return problems


def copy_project(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)


def environment(workspace: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(workspace)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("TINYINFER_SHARED_DATA", str(ROOT.parent / "shared" / "data"))  # tests/conftest.py reads it
    return env


def run_tests(workspace: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    """pytest's exit status on `tests` in the workspace (-1: timed out), and what it said: the first failure's
    line, else its last line."""
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--tb=line", *tests]
    try:
        done = subprocess.run(command, cwd=workspace, env=environment(workspace), capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, "timed out"
    lines = (done.stdout + done.stderr).strip().splitlines() or [""]
    failures = [line for line in lines if line.startswith(str(workspace)) or line.startswith("E ")]
    return done.returncode, (failures or lines[-1:])[0].replace(str(workspace) + os.sep, "")


def check_imports_the_copy(workspace: Path) -> None:
    """The tests of the copy must import the copy's tinyinfer (first on PYTHONPATH), not an installed one."""
    done = subprocess.run([sys.executable, "-c", "import tinyinfer; print(tinyinfer.__file__)"], cwd=workspace,
                          env=environment(workspace), capture_output=True, text=True, check=True)
    imported = Path(done.stdout.strip()).resolve()
    if workspace.resolve() not in imported.parents:
        raise SystemExit(f"error: the copy's tests import tinyinfer from {imported}, not from {workspace}")


def verdict(status: int) -> str:
    """pytest's exit status -> the mutation's fate: 1 (tests failed) caught; 0 survived; anything else an error
    of the check itself (no test collected, a usage error), reported as such."""
    return {0: "SURVIVED", 1: "caught", -1: "caught (timeout)"}.get(status, f"ERROR (pytest exit {status})")


def mutate(workspace: Path, m: Mutation) -> tuple[str, float, str]:
    path = workspace / m.path
    original = path.read_text(encoding="utf-8")
    path.write_text(original.replace(m.old, m.new), encoding="utf-8")
    start = time.perf_counter()
    try:
        status, last = run_tests(workspace, m.tests)
    finally:
        path.write_text(original, encoding="utf-8")
    return verdict(status), time.perf_counter() - start, last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="only the quick subset CI runs")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="print how the tests failed on each mutation")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if (not args.quick or m.quick) and (not args.names or m.name in args.names)]
    unknown = set(args.names) - {m.name for m in MUTATIONS}
    if unknown:
        print(f"error: no mutation named {', '.join(sorted(unknown))} (see --list)", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            print(f"{m.name}  [{m.path}]{'  (quick)' if m.quick else ''}")
        return 0
    problems = check_targets(ROOT, MUTATIONS)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 1
    survivors = errors = 0
    with tempfile.TemporaryDirectory(prefix="tinyinfer-mutate-") as tmp:
        workspace = Path(tmp)
        copy_project(workspace)
        check_imports_the_copy(workspace)
        for m in chosen:
            fate, seconds, last = mutate(workspace, m)
            survivors += fate == "SURVIVED"
            errors += fate.startswith("ERROR")
            print(f"{fate:<16} {seconds:6.1f}s  {m.name}  [{m.path}]" + (f"\n{'':24}{last}" if args.verbose or
                                                                          fate.startswith("ERROR") else ""), flush=True)
    print(f"{len(chosen) - survivors - errors} of {len(chosen)} mutations caught, {survivors} survived, {errors} errors")
    return 1 if survivors or errors else 0


if __name__ == "__main__":
    sys.exit(main())
