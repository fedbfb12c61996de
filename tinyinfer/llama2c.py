"""llama2.c checkpoints: the `.bin` files of Karpathy's llama2.c, a header then raw float32 weights.

Two layouts exist:
- legacy: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len), then the weights;
  a negative vocab_size means the output layer is stored separately (not shared with the embedding). The
  old RoPE tables (freq_cis real and imaginary, [seq_len, head_size / 2] each) sit before that output layer.
- version 1: 256-byte header: magic "ak42" (uint32 0x616b3432), int32 version = 1, the same 7 int32, one
  byte `shared_classifier`, zero padding; then all norms first, then the matrices.

llama2.c rotates neighbouring pairs (x[2i], x[2i+1]); tinyinfer's RoPE pairs x[i] with x[i + hd/2] as
Hugging Face does, so the rows of wq and wk are permuted per head at load (`interleaved_to_half`).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from tinyinfer.config import Config
from tinyinfer.errors import TinyInferError

MAGIC_V1 = 0x616B3432  # "ak42" read as a little-endian uint32


def interleaved_to_half(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder each head's output rows from pairs (0,1),(2,3).. to halves (0..hd/2-1 | hd/2..hd-1).

    >>> interleaved_to_half(np.arange(4)[:, None], 1).ravel()  # rows x0 x1 x2 x3 -> x0 x2 x1 x3
    array([0, 2, 1, 3])
    """
    out_dim, in_dim = w.shape
    head_dim = out_dim // n_heads
    return w.reshape(n_heads, head_dim // 2, 2, in_dim).transpose(0, 2, 1, 3).reshape(out_dim, in_dim)


class _Reader:
    """Reads consecutive float32 tensors from a byte buffer, with a clear error when it runs out."""

    def __init__(self, data: bytes, offset: int, path: Path):
        self.data, self.offset, self.path = data, offset, path

    def take(self, *shape: int) -> np.ndarray:
        count = int(np.prod(shape))
        end = self.offset + 4 * count
        if end > len(self.data):
            raise TinyInferError(f"{self.path} is truncated: needs at least {end} bytes, has {len(self.data)}")
        array = np.frombuffer(self.data, dtype="<f4", count=count, offset=self.offset).reshape(shape)
        self.offset = end
        return array.astype(np.float32)


def read_header(data: bytes, path: Path) -> tuple[dict, int, bool]:
    """(header fields, byte offset of the weights, is_version_1)."""
    if len(data) < 28:
        raise TinyInferError(f"{path} is too short to be a llama2.c checkpoint")
    names = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")
    magic, version = struct.unpack("<Ii", data[:8])
    if magic == MAGIC_V1:
        if version != 1:
            raise TinyInferError(f"{path}: llama2.c format version {version} is not supported (only legacy and 1)")
        if len(data) < 256:
            raise TinyInferError(f"{path} is truncated: a llama2.c version 1 header is 256 bytes, the file has {len(data)}")
        header = dict(zip(names, struct.unpack("<7i", data[8:36])))
        header["shared_classifier"] = bool(data[36])
        return header, 256, True
    header = dict(zip(names, struct.unpack("<7i", data[:28])))
    header["shared_classifier"] = header["vocab_size"] > 0
    header["vocab_size"] = abs(header["vocab_size"])
    return header, 28, False


def weight_count(h: dict, v1: bool) -> int:
    """How many float32 numbers follow the header: the tensors `load_llama2c` reads, counted from the header.

    >>> weight_count(dict(dim=8, hidden_dim=16, n_layers=1, n_heads=2, n_kv_heads=2, vocab_size=10, seq_len=4,
    ...                   shared_classifier=True), v1=True)
    744
    """
    d, f, L, V = h["dim"], h["hidden_dim"], h["n_layers"], h["vocab_size"]
    kv_dim = h["n_kv_heads"] * (d // h["n_heads"])
    per_layer = 2 * d + 2 * d * d + 2 * kv_dim * d + 3 * f * d  # norms, wq wo, wk wv, w1 w2 w3
    rope_tables = 0 if v1 else h["seq_len"] * (d // h["n_heads"])  # legacy files keep cos and sin tables
    return V * d + L * per_layer + d + rope_tables + (0 if h["shared_classifier"] else V * d)


def _config(h: dict, path: Path, file_size: int, offset: int, v1: bool) -> Config:
    """The Config of a header, after checking that it is consistent and that the file holds its weights
    (an absurd header, like a billion layers, is refused before anything is sized by it)."""
    if min(h["dim"], h["hidden_dim"], h["n_layers"], h["n_heads"], h["n_kv_heads"], h["vocab_size"], h["seq_len"]) <= 0 \
            or h["dim"] % h["n_heads"] or h["n_heads"] % h["n_kv_heads"] or (h["dim"] // h["n_heads"]) % 2:
        raise TinyInferError(f"{path} is not a llama2.c checkpoint: its header is inconsistent ({h}); give a .bin "
                             "written by llama2.c's export.py, or a Hugging Face model folder")
    needed = offset + 4 * weight_count(h, v1)
    if file_size < needed:
        raise TinyInferError(f"{path} is truncated or not a llama2.c checkpoint: its header describes {needed:,} "
                             f"bytes, the file has {file_size:,}; re-export or re-download it")
    return Config(
        model_type="llama", vocab_size=h["vocab_size"], d_model=h["dim"], n_layers=h["n_layers"],
        n_heads=h["n_heads"], n_kv_heads=h["n_kv_heads"], head_dim=h["dim"] // h["n_heads"], d_ff=h["hidden_dim"],
        max_seq_len=h["seq_len"], norm_eps=1e-5, tie_word_embeddings=h["shared_classifier"],
        bos_token_id=1, eos_token_ids=[2],
    )


def llama2c_config(path: Path) -> Config:
    """The Config in a llama2.c file's header (the weights are not read)."""
    with open(path, "rb") as f:
        head = f.read(256)
    header, offset, v1 = read_header(head, Path(path))
    return _config(header, Path(path), Path(path).stat().st_size, offset, v1)


def load_llama2c(path: Path) -> tuple[Config, dict]:
    """Config and tinyinfer params (see tinyinfer/weights.py for the layout) of a llama2.c .bin file."""
    path = Path(path)
    data = path.read_bytes()
    header, offset, v1 = read_header(data, path)
    cfg = _config(header, path, len(data), offset, v1)
    r = _Reader(data, offset, path)
    d, f, L, V = cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.vocab_size
    kv_dim = cfg.n_kv_heads * cfg.head_dim
    if v1:
        attn_norm, mlp_norm, final_norm, embed = r.take(L, d), r.take(L, d), r.take(d), r.take(V, d)
    else:
        embed, attn_norm = r.take(V, d), r.take(L, d)
    wq, wk, wv, wo = r.take(L, d, d), r.take(L, kv_dim, d), r.take(L, kv_dim, d), r.take(L, d, d)
    if not v1:
        mlp_norm = r.take(L, d)
    w1, w2, w3 = r.take(L, f, d), r.take(L, d, f), r.take(L, f, d)
    if not v1:
        final_norm = r.take(d)
        r.take(2, cfg.max_seq_len, cfg.head_dim // 2)  # legacy RoPE tables (cos, sin): tinyinfer recomputes them
    lm_head = embed.T if cfg.tie_word_embeddings else np.ascontiguousarray(r.take(V, d).T)  # [V, d] -> [d, V]
    layers = [{
        "attn_norm": {"weight": attn_norm[i]},
        "qkv": np.concatenate([interleaved_to_half(wq[i], cfg.n_heads), interleaved_to_half(wk[i], cfg.n_kv_heads),
                               wv[i]]).T,  # 3 x [out, in] -> [in, d + 2 kv_dim]
        "o": np.ascontiguousarray(wo[i].T),  # [out, in] -> [in, out]
        "mlp_norm": {"weight": mlp_norm[i]},
        "mlp": {"gate": np.ascontiguousarray(w1[i].T), "up": np.ascontiguousarray(w3[i].T),
                "down": np.ascontiguousarray(w2[i].T)},
    } for i in range(L)]
    return cfg, {"embed": embed, "layers": layers, "final_norm": {"weight": final_norm}, "lm_head": lm_head}
