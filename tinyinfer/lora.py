"""LoRA adapters: many fine-tunes of one model at once, chosen per request (multi-LoRA serving).

Fine-tuning changes every weight matrix a little. LoRA (low-rank adaptation) trains that change as the
product of two thin matrices, so a fine-tune is a small file beside the base model:

    W' = W + s * B @ A        A: [r, in], B: [out, r], r small (4-64);  s = alpha / r  (alpha / sqrt(r): rsLoRA)

An adapter holds r * (in + out) numbers per matrix instead of in * out: on a 4096 x 4096 projection with
r = 16, 131,072 numbers instead of 16.8 million (0.8%).

Merging (computing W' once) serves one fine-tune at no cost. Keeping the adapters apart serves all of them
with one copy of the base weights, and requests of different adapters share a batch: every row takes the
base product, and the rows of each adapter add their own low-rank term, two thin products on those rows only:

    x @ (W + s * (B @ A).T)  =  x @ W  +  s * (x @ A.T) @ B.T      (W stored [in, out], as tinyinfer stores it)
                                            [n, in] @ [in, r] -> [n, r] @ [r, out] -> [n, out]

That is what this module does. `LoraWeight` stands wherever the model reads a targeted weight: the base weight
and every adapter's updates of it. A forward pass asks `AdapterSet.route` which of its rows use which adapter
(each chunk names its sequence's adapter), and reads each layer through `AdapterSet.bind`, which puts the pass's
routes beside each LoraWeight (`RoutedWeight`): `x @ w` calls its `__rmatmul__`, so the model code is unchanged,
and no state is left behind on the model between passes.

    model = tinyinfer.load("path/to/base")
    load_adapter(model, "sql", "path/to/sql-adapter")          # any number of them, each under a name
    model.generate("SELECT", lora="sql")
    llm = LLM(model); llm.add_request(prompt, params, lora="sql")  # mixed adapters in one batch

Files: the PEFT layout Hugging Face uses, a folder with adapter_config.json (r, lora_alpha, use_rslora,
rank_pattern, alpha_pattern, ...) and adapter_model.safetensors, whose tensors are named
`base_model.model.<module>.lora_A.weight` [r, in] and `...lora_B.weight` [out, r]. Supported modules: the
attention and MLP projections of the dense architectures, under each family's names (q/k/v/o_proj and
gate/up/down_proj; Phi-3's fused qkv_proj and gate_up_proj; Phi's dense, fc1, fc2; StarCoder2's c_fc, c_proj;
GPT-NeoX's and Falcon's query_key_value, dense, dense_h_to_4h, dense_4h_to_h; GPT-2's c_attn, c_proj, c_fc). Options that change the math otherwise (DoRA, trained biases, extra trained modules) are refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyinfer.backend import to_device
from tinyinfer.errors import TinyInferError
from tinyinfer.families import family_of
from tinyinfer.resolve import BUILTIN_DIR
from tinyinfer.safetensors_io import Checkpoint


@dataclass
class LoraUpdate:
    """One adapter's update of some output columns of one weight: (x @ a) @ b * scale lands on y[:, columns]."""

    columns: slice  # of the weight's outputs (q, k and v are stacked in one matrix, each has its own update)
    a: object  # [in, r]  (A transposed)
    b: object  # [r, width]  (B transposed)
    scale: float


class AdapterSet:
    """The adapters loaded on a model, by name; for each forward pass, which of its rows use which of them."""

    def __init__(self):
        self.names: list[str] = []

    def route(self, chunks, xp=np) -> list[tuple[str, object]]:
        """A forward pass's routes, (adapter, row indices) for each adapter its chunks ask for: the rows (tokens)
        of each chunk use its `adapter`. The row indices go to the model's device (`xp`) once here, not in every
        layer's products.

        >>> from tinyinfer.model import SeqChunk
        >>> adapters = AdapterSet(); adapters.names = ["a", "b"]
        >>> routes = adapters.route([SeqChunk(0, 0, [5, 6], "b"), SeqChunk(1, 0, [7]), SeqChunk(2, 4, [8], "b")])
        >>> [(name, rows.tolist()) for name, rows in routes]
        [('b', [0, 1, 3])]
        """
        rows: dict[str, list[int]] = {}
        first = 0
        for chunk in chunks:
            if chunk.adapter is not None:
                self.check(chunk.adapter)
                rows.setdefault(chunk.adapter, []).extend(range(first, first + len(chunk.tokens)))
            first += len(chunk.tokens)
        return [(name, xp.asarray(ids)) for name, ids in rows.items()]

    @staticmethod
    def bind(params: dict, routes: list) -> dict:
        """A layer's parameters as one forward pass reads them: each LoraWeight with the pass's `routes` beside
        it (a shallow copy; the model's own parameters stay as they are)."""
        return {key: RoutedWeight(value, routes) if isinstance(value, LoraWeight) else
                AdapterSet.bind(value, routes) if isinstance(value, dict) else value for key, value in params.items()}

    def check(self, name: str) -> None:
        if name not in self.names:
            raise TinyInferError(f"no LoRA adapter named {name!r} is loaded (loaded: {', '.join(self.names) or 'none'}); "
                                 "load it first with tinyinfer.lora.load_adapter(model, name, folder)")


def check_adapter(model, name: str | None) -> None:
    """Refuse a request for an adapter the model does not have (None: no adapter, always fine)."""
    if name is not None:
        (model.adapters or AdapterSet()).check(name)


class LoraWeight:
    """A base weight [in, out] and the LoRA updates of every loaded adapter. Alone, `x @ w` is x @ base (no row
    asked for an adapter); a forward pass reads it as a RoutedWeight."""

    __array_ufunc__ = None  # NumPy and CuPy: `x @ w` must not turn w into an array; it calls w.__rmatmul__(x)
    ndim = 2

    def __init__(self, base):
        self.base = base  # an array, or a QuantizedWeight
        self.updates: dict[str, list[LoraUpdate]] = {}  # adapter name -> its updates of this weight
        self.shape = tuple(base.shape)

    def __rmatmul__(self, x):
        return x @ self.base  # [T, in] @ [in, out] -> [T, out]

    def product(self, x, routes: list):
        """x @ base for every row, plus on the rows routed to each adapter that adapter's low-rank updates."""
        y = x @ self.base  # [T, in] @ [in, out] -> [T, out]: the shared product, one for every row
        for name, rows in routes:
            for update in self.updates.get(name, ()):
                y[rows, update.columns] += lora_delta(x[rows], update)  # [n, width]
        return y

    @property
    def size(self) -> int:
        return self.base.size

    @property
    def nbytes(self) -> int:
        return self.base.nbytes

    @property
    def dtype(self):
        return self.base.dtype


class RoutedWeight:
    """A LoraWeight as one forward pass reads it, with that pass's routes: `x @ w` is `weight.product(x, routes)`."""

    __array_ufunc__ = None
    ndim = 2

    def __init__(self, weight: LoraWeight, routes: list):
        self.weight, self.routes, self.shape = weight, routes, weight.shape

    def __rmatmul__(self, x):
        return self.weight.product(x, self.routes)  # [T, in] -> [T, out]


def lora_delta(x, update: LoraUpdate):
    """What one adapter adds to x's product with one weight: s * (x @ A.T) @ B.T, through the rank-r bottleneck.

    >>> update = LoraUpdate(slice(None), a=np.ones((3, 1)), b=np.array([[1.0, -1.0]]), scale=0.5)
    >>> lora_delta(np.array([[1.0, 2.0, 3.0]]), update)  # 0.5 * (1 + 2 + 3) * [1, -1]
    array([[ 3., -3.]])
    """
    # BEGIN EXERCISE 13.1: the low-rank update of a batch of rows
    return (x @ update.a) @ update.b * update.scale  # [n, in] @ [in, r] -> [n, r] @ [r, width] -> [n, width]
    # END EXERCISE 13.1


# -- reading PEFT adapters ---------------------------------------------------------------------------------------

REFUSED_OPTIONS = {  # config key -> why its adapters cannot be applied as W + s * B @ A
    "use_dora": "DoRA also rescales each weight's columns",
    "lora_bias": "it trains a bias for lora_B",
    "modules_to_save": "it replaces whole modules with trained copies",
    "layer_replication": "it repeats layers of the base model",
    "alora_invocation_tokens": "it applies the update only after certain tokens",
}


def load_adapter(model, name: str, folder) -> None:
    """Load the PEFT LoRA adapter in `folder` onto `model` under `name`; requests then ask for it by name.
    `folder` may also name an adapter shipped with tinyinfer (tinyinfer/models/, e.g. "shakespeare-shout").

    The base weights are never copied: each targeted weight becomes a LoraWeight holding the base array.
    """
    folder = adapter_folder(folder)
    if model.adapters is not None and name in model.adapters.names:
        raise TinyInferError(f"an adapter named {name!r} is already loaded on this model: choose another name")
    config = _adapter_config(folder)
    tensors = _adapter_tensors(folder)
    updates = [update for module, pair in _pairs(tensors.names()).items()
               for update in _updates(model, module, config, tensors, pair)]
    model.adapters = model.adapters or AdapterSet()  # every file read and checked: now change the model
    for place, update in updates:
        _lora_weight(model, place).updates.setdefault(name, []).append(update)
    model.adapters.names.append(name)


def unload_adapter(model, name: str) -> None:
    """Take the adapter `name` off `model` (the base weights were never changed, so nothing else is)."""
    check_adapter(model, name)

    def walk(params):
        for value in params.values() if isinstance(params, dict) else params:
            if isinstance(value, LoraWeight):
                value.updates.pop(name, None)
            elif isinstance(value, (dict, list)):
                walk(value)

    walk(model.params["layers"])
    model.adapters.names.remove(name)


def builtin_adapters() -> dict[str, Path]:
    """Built-in adapter name -> its folder inside the package (tinyinfer/models/<name>/)."""
    if not BUILTIN_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(BUILTIN_DIR.iterdir()) if (p / "adapter_config.json").is_file()}


def adapter_folder(name_or_path) -> Path:
    """A folder, or the folder of a built-in adapter of that name when no such path exists."""
    path, builtin = Path(name_or_path), BUILTIN_DIR / str(name_or_path)
    return builtin if not path.exists() and (builtin / "adapter_config.json").is_file() else path


def _adapter_config(folder: Path) -> dict:
    path = folder / "adapter_config.json"
    if not path.exists():
        raise TinyInferError(f"{folder} has no adapter_config.json: pass the folder a PEFT LoRA adapter was saved to")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise TinyInferError(f"{path} is not valid JSON ({e}); re-save the adapter") from None
    if not isinstance(config, dict) or str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise TinyInferError(f"{path} is not a LoRA adapter (peft_type {config.get('peft_type')!r}); "
                             "only LoRA adapters are supported")
    for key, why in REFUSED_OPTIONS.items():
        if config.get(key):
            raise TinyInferError(f"{path} sets {key}={config[key]!r}, which tinyinfer does not support ({why}): "
                                 "merge the adapter into the model with peft and load the merged model instead")
    if config.get("bias", "none") != "none":
        raise TinyInferError(f"{path} sets bias={config['bias']!r}: the adapter trains biases, which tinyinfer does "
                             "not apply; merge it with peft and load the merged model instead")
    return config


def _adapter_tensors(folder: Path) -> Checkpoint:
    path = folder / "adapter_model.safetensors"
    if not path.exists():
        pickled = " (adapter_model.bin is a PyTorch pickle, which tinyinfer never unpickles: re-save it with " \
                  "safe_serialization=True)" if (folder / "adapter_model.bin").exists() else ""
        raise TinyInferError(f"{folder} has no adapter_model.safetensors{pickled}")
    return Checkpoint(path)


def _pairs(names: list[str]) -> dict[str, dict[str, str]]:
    """Tensor names grouped by the module they adapt: {module: {"A": name, "B": name}}.

    >>> _pairs(["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
    ...         "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"])
    {'model.layers.0.self_attn.q_proj': {'A': 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight', 'B': 'base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight'}}
    """
    pairs: dict[str, dict[str, str]] = {}
    for name in names:
        match = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.[^.]+)?\.weight", name)
        if match is None:
            raise TinyInferError(f"adapter tensor {name!r} is not a LoRA A or B matrix (embedding adapters and "
                                 "trained copies of modules are not supported)")
        pairs.setdefault(match[1], {})[match[2]] = name
    for module, pair in pairs.items():
        if set(pair) != {"A", "B"}:
            raise TinyInferError(f"adapter module {module!r} has lora_{'A' if 'A' in pair else 'B'} but not its "
                                 "partner; the adapter file is incomplete")
    return pairs


ALL = slice(None)


def _rows(cfg, weight: str):
    """The rows of lora_B for tinyinfer's `weight` ("q", "k", "v", "qkv"): where the loader reorders the file's
    output rows (GPT-NeoX's and Falcon's fused query_key_value, Cohere's q and k), lora_B's rows follow the same
    order, which the model's family gives (`Family.lora_rows`); every other weight keeps them."""
    rows = family_of(cfg.model_type).lora_rows.get(weight)
    return ALL if rows is None else rows(cfg)


# module name (after the PEFT prefix) -> where its update lands, as a list of (layer index, path to the weight in
# the layer, which output columns of that weight, which rows of lora_B): q, k and v share one stacked matrix;
# Phi-3's fused gate_up_proj splits into tinyinfer's gate and up; rows the loader reorders are reordered alike
MODULE_PATTERNS = [
    (r"(?:model\.)?layers\.(\d+)\.self_attn\.([qkv])_proj",
     lambda cfg, i, part: [(i, ("qkv",), _qkv_columns(cfg, part), _rows(cfg, part))]),
    (r"(?:model\.)?layers\.(\d+)\.self_attn\.qkv_proj", lambda cfg, i: [(i, ("qkv",), ALL, ALL)]),  # Phi-3
    (r"(?:model\.)?layers\.(\d+)\.self_attn\.(?:o_proj|dense)", lambda cfg, i: [(i, ("o",), ALL, ALL)]),  # Phi: dense
    (r"(?:model\.)?layers\.(\d+)\.mlp\.(gate|up|down)_proj", lambda cfg, i, name: [(i, ("mlp", name), ALL, ALL)]),
    (r"(?:model\.)?layers\.(\d+)\.mlp\.gate_up_proj", lambda cfg, i: [  # Phi-3: [gate; up] rows in one matrix
        (i, ("mlp", "gate"), ALL, slice(0, cfg.d_ff)), (i, ("mlp", "up"), ALL, slice(cfg.d_ff, 2 * cfg.d_ff))]),
    (r"(?:model\.)?layers\.(\d+)\.mlp\.fc([12])", lambda cfg, i, n: [(i, ("mlp", "up" if n == "1" else "down"), ALL, ALL)]),
    (r"(?:model\.)?layers\.(\d+)\.mlp\.c_(fc|proj)",  # StarCoder2
     lambda cfg, i, name: [(i, ("mlp", "up" if name == "fc" else "down"), ALL, ALL)]),
    (r"(?:gpt_neox\.)?layers\.(\d+)\.attention\.query_key_value", lambda cfg, i: [(i, ("qkv",), ALL, _rows(cfg, "qkv"))]),
    (r"(?:gpt_neox\.)?layers\.(\d+)\.attention\.dense", lambda cfg, i: [(i, ("o",), ALL, ALL)]),
    (r"(?:gpt_neox\.)?layers\.(\d+)\.mlp\.dense_(h_to_4h|4h_to_h)",
     lambda cfg, i, way: [(i, ("mlp", "up" if way == "h_to_4h" else "down"), ALL, ALL)]),
    (r"(?:transformer\.)?h\.(\d+)\.self_attention\.query_key_value",  # Falcon: q, k, v fused by group
     lambda cfg, i: [(i, ("qkv",), ALL, _rows(cfg, "qkv"))]),
    (r"(?:transformer\.)?h\.(\d+)\.self_attention\.dense", lambda cfg, i: [(i, ("o",), ALL, ALL)]),
    (r"(?:transformer\.)?h\.(\d+)\.mlp\.dense_(h_to_4h|4h_to_h)",
     lambda cfg, i, way: [(i, ("mlp", "up" if way == "h_to_4h" else "down"), ALL, ALL)]),
    (r"(?:transformer\.)?h\.(\d+)\.attn\.c_attn", lambda cfg, i: [(i, ("qkv",), ALL, ALL)]),  # GPT-2
    (r"(?:transformer\.)?h\.(\d+)\.attn\.c_proj", lambda cfg, i: [(i, ("o",), ALL, ALL)]),
    (r"(?:transformer\.)?h\.(\d+)\.mlp\.c_fc", lambda cfg, i: [(i, ("mlp", "up"), ALL, ALL)]),
    (r"(?:transformer\.)?h\.(\d+)\.mlp\.c_proj", lambda cfg, i: [(i, ("mlp", "down"), ALL, ALL)]),
]


def _targets(model, module: str) -> list[tuple[int, tuple[str, ...], slice, object]]:
    """Where a PEFT module's update lands in tinyinfer's parameters (see MODULE_PATTERNS)."""
    cfg = model.config
    for pattern, place in MODULE_PATTERNS:
        match = re.fullmatch(pattern, module)
        if match is None:
            continue
        targets = place(cfg, int(match[1]), *match.groups()[1:])
        layer, keys = targets[0][:2]
        if layer >= cfg.n_layers or cfg.is_moe_layer(layer) and keys[0] == "mlp" or not _has(model, layer, keys):
            break
        return targets
    raise TinyInferError(f"the adapter targets {module!r}, which tinyinfer cannot adapt: supported are the "
                         "attention and MLP projections of dense layers (q/k/v/o_proj, gate/up/down_proj; Phi-3's "
                         "qkv_proj and gate_up_proj; Phi's dense, fc1, fc2; StarCoder2's c_fc, c_proj; GPT-NeoX's "
                         "and Falcon's query_key_value, dense, dense_h_to_4h, dense_4h_to_h; GPT-2's c_attn, c_proj, c_fc)")


def _has(model, layer: int, keys: tuple[str, ...]) -> bool:
    """Whether this model's layer has a weight at `keys` (an adapter made for another architecture may not)."""
    node = model.params["layers"][layer]
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def _qkv_columns(cfg, part: str | None) -> slice:
    """The output columns of q, k or v in the stacked qkv matrix [d, q_dim + 2 kv_dim]; None: all columns."""
    q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    starts = {"q": (0, q_dim), "k": (q_dim, q_dim + kv_dim), "v": (q_dim + kv_dim, q_dim + 2 * kv_dim)}
    return slice(*starts[part]) if part else slice(None)


def _updates(model, module: str, config: dict, tensors: Checkpoint, pair: dict) -> list[tuple[tuple, LoraUpdate]]:
    """The LoraUpdates of one module (two for a fused gate_up_proj), A and B checked against the base weights."""
    targets = _targets(model, module)
    a_shape, b_shape = tensors.shape(pair["A"]), tensors.shape(pair["B"])
    r = a_shape[0]
    widths = [len(range(*columns.indices(_layer_weight(model, layer, keys).shape[1])))
              for layer, keys, columns, _ in targets]
    d_in = _layer_weight(model, *targets[0][:2]).shape[0]
    for tensor, found, expected in ((pair["A"], a_shape, (r, d_in)), (pair["B"], b_shape, (sum(widths), r))):
        if tuple(found) != expected:
            raise TinyInferError(f"adapter tensor {tensor!r} has shape {list(found)}, expected {list(expected)} "
                                 "for this base model: the adapter was trained on another model")
    a = to_device(np.ascontiguousarray(tensors.get(pair["A"], model.dtype).T), model.device)  # [r, in] -> [in, r]
    b = tensors.get(pair["B"], model.dtype)  # [out, r]
    scale = _scale(config, module, r)
    return [((layer, keys), LoraUpdate(columns, a, to_device(np.ascontiguousarray(b[rows].T), model.device), scale))
            for layer, keys, columns, rows in targets]  # b[rows]: [width, r] -> [r, width]


def _scale(config: dict, module: str, r: int) -> float:
    """alpha / r (alpha / sqrt(r) with use_rslora); alpha_pattern may set another alpha for some modules, matched
    as PEFT does: a pattern matches a module name that ends with it.

    >>> _scale({"lora_alpha": 16}, "model.layers.0.self_attn.q_proj", 8)
    2.0
    >>> _scale({"lora_alpha": 16, "alpha_pattern": {"q_proj": 4}, "use_rslora": True}, "x.q_proj", 4)
    2.0
    """
    alpha = config.get("lora_alpha", 8)
    for pattern, value in (config.get("alpha_pattern") or {}).items():
        if re.fullmatch(rf"(.*\.)?{pattern}", module):
            alpha = value
    return alpha / (r**0.5 if config.get("use_rslora") else r)


def _layer_weight(model, layer: int, keys: tuple[str, ...]):
    """The weight at `keys` in layer `layer` (a LoraWeight's base if adapters are loaded there already)."""
    weight = model.params["layers"][layer]
    for key in keys:
        weight = weight[key]
    return weight.base if isinstance(weight, LoraWeight) else weight


def _lora_weight(model, place: tuple[int, tuple[str, ...]]) -> LoraWeight:
    """The LoraWeight at a place in the parameters, made (around the base weight) the first time."""
    layer, keys = place
    parent = model.params["layers"][layer]
    for key in keys[:-1]:
        parent = parent[key]
    if not isinstance(parent[keys[-1]], LoraWeight):
        parent[keys[-1]] = LoraWeight(parent[keys[-1]])
    return parent[keys[-1]]
