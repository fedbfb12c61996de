"""A GGUF file as a model: its Config, its parameters, its tokenizer.

The file is translated into what tinyinfer already reads, by its family's `GGUFLayout` (tinyinfer/families/,
tinyinfer/gguf/architectures.py): the metadata into config.json's fields (then `config_from_hf`), the tensors
into a checkpoint under the family's Hugging Face names (`GGUFCheckpoint`), each dequantised to float32 and
re-laid out as the original file had it when it is read. The family's loader then builds the parameters exactly
as from safetensors, so every family's layout logic is written once.

Two ways to hold the weights (`keep_quantized`):

- dequantised once, at load (the default): float32 arrays, as from any checkpoint. 4 bytes a weight.
- kept quantised: every linear weight (and the LM head, the embedding table with it when tied) keeps the
  file's blocks (`QuantizedRows`) and is dequantised where it is used, on every product. About the file's
  size in memory, but each decode step dequantises all the weights it reads again (chapter 12 measures both).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError
from tinyinfer.families import FAMILIES, Family, config_from_hf, load_params, untie_if_the_file_disagrees
from tinyinfer.gguf.architectures import ROPE_TENSORS, GGUFLayout, Metadata, rope_from_tensors
from tinyinfer.gguf.quants import DEQUANTIZERS, check_supported, dequantize
from tinyinfer.gguf.reader import GGUFFile
from tinyinfer.mlp import matmul
from tinyinfer.tokenizer.gguf import tokenizer_from_gguf
from tinyinfer.weights import matvec_layout

LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
TOP_NAME = re.compile(r"(\w+)\.(weight|bias)")


class GGUFCheckpoint:
    """A GGUF file's tensors under the family's names: `names()`, `shape(name)`, `get(name, dtype)`, like
    safetensors_io.Checkpoint, each read through its re-layout."""

    def __init__(self, gguf: GGUFFile, layout: GGUFLayout, hf_config: dict):
        self.gguf, self.layout, self.hf_config = gguf, layout, hf_config
        self._table = layout.tensor_table(hf_config)
        self._sources = {}  # family name -> (GGUF name, GGUF base name, expert index or None)
        for name, info in gguf.tensors.items():
            if name.removesuffix(".weight") in ROPE_TENSORS:  # read into the config (gguf_hf_config), not a weight
                continue
            target, base = self._family_name(name)
            if "{e}" not in target:
                self._sources[target] = (name, base, None)
                continue
            for e in range(info.shape[0]):  # stacked [E, ...] (merged experts [E, out, in]): one tensor per slice
                self._sources[target.format(e=e)] = (name, base, e)

    def _family_name(self, name: str) -> tuple[str, str]:
        """(the family's name, GGUF's base name) of tensor `name`: blk.3.attn_q.weight -> (model.layers.3.
        self_attn.q_proj.weight, attn_q)."""
        layer, top = LAYER_NAME.fullmatch(name), TOP_NAME.fullmatch(name)
        key = f"blk.{{i}}.{layer[2]}" if layer else top[1] if top else None
        kind = (layer[3] if layer else top[2]) if key else None
        if f"{key}.{kind}" in self._table:  # a whole name: the family's tensor has no .weight (gpt-oss's sinks)
            return self._table[f"{key}.{kind}"].format(i=layer[1] if layer else None), key.split(".")[-1]
        if key not in self._table:
            raise TinyInferError(f"{self.gguf.path}: tensor {name!r} has no place in a {self.hf_config['model_type']} "
                                 "model: the file's architecture has parts tinyinfer does not run")
        return self._table[key].format(i=layer[1] if layer else None, e="{e}") + "." + kind, key.split(".")[-1]

    def names(self) -> list[str]:
        return list(self._sources)

    def __contains__(self, name: str) -> bool:
        return name in self._sources

    def shape(self, name: str) -> tuple[int, ...]:
        gguf_name, base, expert = self._source(name)
        shape = self.gguf.tensors[gguf_name].shape
        return self.layout.reshaped(base, shape if expert is None else shape[1:])  # an expert: [E, out, in] -> [out, in]

    def get(self, name: str, dtype=np.float32) -> np.ndarray:
        """The tensor `name` dequantised, re-laid out as the family's file has it, as `dtype` (a fresh array)."""
        gguf_name, base, expert = self._source(name)
        info = self.gguf.tensors[gguf_name]
        rows = self.gguf.rows(gguf_name)  # [rows, bytes per row]
        if expert is not None:  # one slice's rows only: [E * out, bytes] -> [out, bytes]
            per_expert = rows.shape[0] // info.shape[0]
            rows = rows[expert * per_expert:(expert + 1) * per_expert]
        shape = info.shape if expert is None else info.shape[1:]
        return self._relayout(base, dequantize(rows, info.type_name, shape)).astype(dtype)

    def _source(self, name: str) -> tuple[str, str, int | None]:
        if name not in self._sources:
            raise TinyInferError(f"{self.gguf.path} has no tensor for {name!r}")
        return self._sources[name]

    def _relayout(self, base: str, w: np.ndarray) -> np.ndarray:
        return w if self.layout.relayout is None else self.layout.relayout(base, w, self.hf_config)


def gguf_family(gguf: GGUFFile) -> tuple[Family, Metadata]:
    """The family that stores itself as the file's general.architecture (Mixtral: llama with an expert_count),
    and the file's metadata view; an architecture tinyinfer cannot run is refused by name."""
    arch = gguf.metadata.get("general.architecture")
    m = Metadata(gguf.metadata, arch, gguf.path)
    with_experts = bool(m.get("expert_count", 0))
    stored = [f for f in FAMILIES.values() if f.gguf is not None and f.gguf.architecture == arch]
    if not stored:
        known = sorted({f.gguf.architecture for f in FAMILIES.values() if f.gguf is not None})
        raise TinyInferError(f"{gguf.path}: GGUF architecture {arch!r} is not supported; tinyinfer runs "
                             f"{', '.join(known)} (Mixtral as llama with experts)")
    return next((f for f in stored if f.gguf.experts == with_experts), stored[0]), m


def gguf_hf_config(gguf: GGUFFile) -> tuple[GGUFLayout, dict]:
    """The file's GGUFLayout and its config.json fields, with the vocabulary size and special tokens."""
    family, m = gguf_family(gguf)
    names = set(gguf.tensors)
    c = family.gguf.config(m, names)
    c |= rope_from_tensors(m, c, {name: gguf.dequantize(f"{name}.weight") for name in ROPE_TENSORS
                                  if f"{name}.weight" in names})
    if "token_embd.weight" not in gguf.tensors:
        raise TinyInferError(f"{gguf.path}: has no token_embd.weight (the embedding table): the file is incomplete")
    c["vocab_size"] = gguf.tensors["token_embd.weight"].shape[0]
    special = {key: gguf.metadata.get(f"tokenizer.ggml.{key}_token_id") for key in ("bos", "eos", "eot")}
    c["bos_token_id"] = special["bos"]
    c["eos_token_id"] = [t for t in dict.fromkeys((special["eos"], special["eot"])) if t is not None]
    return family.gguf, c


def read_gguf_config(path) -> Config:
    """Only the Config of a GGUF file (its header is read; no tensor is)."""
    return config_from_hf(gguf_hf_config(GGUFFile(path))[1])


def load_gguf(path: Path, dtype=np.float32):
    """(Config, params, the GGUFFile) of a .gguf file, its weights dequantised (its tokenizer: gguf_tokenizer)."""
    gguf = GGUFFile(path)
    layout, c = gguf_hf_config(gguf)
    config = config_from_hf(c)
    checkpoint = GGUFCheckpoint(gguf, layout, c)
    for name, info in gguf.tensors.items():  # refuse unsupported types by name before any work
        check_supported(info.type_name, f"{path}: tensor {name!r}")
    config = untie_if_the_file_disagrees(checkpoint, config)
    params = load_params(checkpoint, config, dtype)
    return config, params, gguf


def gguf_tokenizer(gguf: GGUFFile):
    """The tokenizer the file's metadata describes (tinyinfer/tokenizer/gguf.py), or None without one."""
    if "tokenizer.ggml.model" not in gguf.metadata:
        return None
    return tokenizer_from_gguf(gguf.metadata)


# -- weights kept quantised ------------------------------------------------------------------------------------

class QuantizedRows:
    """A weight matrix [in, out] held as GGUF blocks: column j is one row of a file tensor, kept as its bytes.

    `parts` are runs of consecutive columns of one type: (type name, bytes [columns, bytes per row]).
    `x @ w` dequantises all of them and multiplies: exactly the product with the float32 matrix.
    """

    __array_ufunc__ = None  # `x @ w` calls w.__rmatmul__(x) (as quantize.QuantizedWeight)
    ndim = 2

    def __init__(self, parts: list[tuple[str, np.ndarray]], n_in: int):
        self.parts = parts
        self.shape = (n_in, sum(rows.shape[0] for _, rows in parts))

    def dequantize_rows(self):
        """The matrix transposed, as the file holds it.  -> [out, in] (float32)"""
        return np.concatenate([dequantize(rows, kind, (rows.shape[0], self.shape[0])) for kind, rows in self.parts])

    def dequantize(self):
        return self.dequantize_rows().T  # [out, in] -> [in, out]

    def __rmatmul__(self, x):
        w = matvec_layout(self.dequantize_rows().T)  # [out, in] -> [in, out], laid out as the float32 model's
        return matmul(x, w)  # [T, in] @ [in, out] -> [T, out]: the very product the float32 model computes

    def columns(self, ids) -> QuantizedRows:
        """Output columns `ids` (rows of the file's tensors), still quantised; e.g. the rows of an embedding."""
        return QuantizedRows([(kind, rows) for kind, rows in self._runs(np.asarray(ids))], self.shape[0])

    def _runs(self, ids):
        starts = np.cumsum([0] + [rows.shape[0] for _, rows in self.parts])
        part = np.searchsorted(starts, ids, side="right") - 1  # [n]: which part holds each column
        for p in np.unique(part):
            kind, rows = self.parts[p]
            yield kind, rows[ids[part == p] - starts[p]]

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def nbytes(self) -> int:
        return sum(rows.nbytes for _, rows in self.parts)

    @property
    def dtype(self):
        return np.dtype(np.float32)

    def __repr__(self) -> str:
        return f"QuantizedRows({'+'.join(dict.fromkeys(kind for kind, _ in self.parts))}, shape={list(self.shape)})"


def keep_quantized(model, gguf: GGUFFile) -> None:
    """Replace, in place, each linear weight of `model` (built from `gguf`) by its blocks in the file.

    Every re-layout between a file and tinyinfer's parameters (the q/k permutation, q, k and v side by side,
    Phi-3's gate/up split, experts cut apart, GPT-2's transposes) moves whole rows of the file's matrices into
    columns of tinyinfer's [in, out] weights. So each column is found in the file by its exact values: the bytes
    of the row whose dequantisation it is. The weight then dequantises to exactly the array it replaces.
    Embeddings and vectors stay float32; a tied embedding table becomes the LM head's quantised rows.
    """
    from tinyinfer.quantize import FLOAT_KEEP, QuantizedEmbedding  # noqa: PLC0415 - quantize imports model

    lookup = _RowLookup(gguf)
    params = model.params
    params["layers"] = [_quantize_tree(layer, lookup, f"blk.{i}.", FLOAT_KEEP) for i, layer in enumerate(params["layers"])]
    head_source = "output.weight" if "output.weight" in gguf.tensors else "token_embd.weight"
    params["lm_head"] = lookup.match(params["lm_head"], (head_source,)) or params["lm_head"]
    if model.config.tie_word_embeddings and isinstance(params["lm_head"], QuantizedRows):
        params["embed"] = QuantizedEmbedding(params["lm_head"])


def _quantize_tree(tree, lookup, prefix: str, float_keep: tuple[str, ...]):
    """A layer's parameter tree with every matrix found in the file as QuantizedRows, but the MoE gates
    (`float_keep`: tiny, and llama.cpp's converter keeps them F32 anyway)."""
    if isinstance(tree, dict):
        return {key: value if key in float_keep else _quantize_tree(value, lookup, prefix, float_keep)
                for key, value in tree.items()}
    if isinstance(tree, list):
        return [_quantize_tree(value, lookup, prefix, float_keep) for value in tree]
    if tree.ndim != 2:
        return tree
    return lookup.match(tree, lookup.layer_tensors(prefix)) or tree


class _RowLookup:
    """Finds a float32 matrix's columns among the dequantised rows of a file's quantised tensors, by a hash of
    each row's bytes; a match is then checked value for value, so a hash collision can only leave a weight float."""

    def __init__(self, gguf: GGUFFile):
        self.gguf = gguf
        self._index = {}  # tensor name -> {hash of a row's bytes: row number}

    def layer_tensors(self, prefix: str) -> tuple[str, ...]:
        return tuple(name for name in self.gguf.tensors if name.startswith(prefix) and name.endswith(".weight"))

    def _rows_of(self, name: str) -> dict:
        if name not in self._index:
            info = self.gguf.tensors[name]
            quantised = info.type_name in DEQUANTIZERS and info.type_name not in ("F32", "F16", "BF16")
            rows = self.gguf.dequantize(name).reshape(-1, info.shape[-1]) if quantised and len(info.shape) > 1 else []
            self._index[name] = {hash(row.tobytes()): r for r, row in enumerate(rows)}  # rows: [n, in]
        return self._index[name]

    def match(self, w: np.ndarray, candidates: tuple[str, ...]) -> QuantizedRows | None:
        """`w` [in, out] as QuantizedRows, when every column is a row of one of `candidates`; else None."""
        columns = np.ascontiguousarray(np.asarray(w, dtype=np.float32).T)  # [out, in]
        found = []  # (tensor, row) of each column
        for column in columns:
            key = hash(column.tobytes())
            hit = next(((name, index[key]) for name in candidates if key in (index := self._rows_of(name))), None)
            if hit is None:
                return None
            found.append(hit)
        parts = []
        for name, row in found:  # runs of one tensor become one part
            if parts and parts[-1][0] == name:
                parts[-1][1].append(row)
            else:
                parts.append((name, [row]))
        kept = QuantizedRows([(self.gguf.tensors[name].type_name, np.ascontiguousarray(self.gguf.rows(name)[rows]))
                              for name, rows in parts], w.shape[0])
        return kept if np.array_equal(kept.dequantize_rows(), columns) else None
