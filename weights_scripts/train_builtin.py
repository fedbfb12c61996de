"""Train tinyinfer's built-in models on tinyshakespeare, with PyTorch on the CPU.

    python weights_scripts/train_builtin.py                      # all three, into tinyinfer/models/
    python weights_scripts/train_builtin.py --only shakespeare-draft --tokenizer tinyinfer/models/shakespeare/tokenizer.json
    python weights_scripts/train_builtin.py --corpus https://example.org/input.txt --out /tmp/models
    python weights_scripts/train_builtin.py --agreement          # the draft's greedy agreement with the target

On a machine whose cores are busy with other work, `--threads 1` is several times faster than two threads
that keep waiting for each other (the shipped models were trained that way; each model card has its command).

Design:
- One corpus, split 90/10 by characters: the first 90% trains, the last 10% is held out.
- One BPE tokenizer for all three models, trained by tinyinfer's own trainer on the training split
  (`Tokenizer.train`), saved as a standard `tokenizer.json` (or reused with `--tokenizer`), so the draft
  model can propose tokens the target model checks.
- Each model is a transformers `LlamaForCausalLM` or `MixtralForCausalLM` built from a config object, so
  the saved folder is an ordinary Hugging Face checkpoint that both transformers and tinyinfer load.
- Training windows start with BOS, as a prompt does at inference time. Dropout on the outputs of every
  attention and MLP block (forward hooks, so the saved model stays a plain Llama) and weight decay fight the
  overfitting that a few-MB corpus invites; the checkpoint scoring best on a quarter of the held-out windows
  is kept (a mild selection on held-out data, as nanoGPT does).
- The reported loss is in nats per character: the summed token NLL over the held-out text divided by its
  number of characters, which compares across tokenizers and with character-level models. It is measured
  on the weights as shipped (16-bit, read back into fp32).
- Fixed seeds: the same command gives the same model when training runs its full `steps` (up to the CPU's
  floating-point threading); a time budget (`minutes`) that runs out first depends on the machine's speed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer as HFTokenizer
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from tinyinfer.tokenizer import Tokenizer  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "corpora" / "tinyshakespeare.txt"
CORPUS_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
BOS, EOS = "<s>", "</s>"
VOCAB_SIZE = 2048
SEED = 1337

# Speaker turns in the play's own format, so a chat reads like a scene: "USER:\n...\n\nASSISTANT:\n".
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] | upper }}:\n"
    "{{ message['content'] | trim }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:\n{% endif %}"
)


@dataclass
class Recipe:
    """One built-in model: its architecture and how long and how hard to train it."""

    description: str
    architecture: dict  # fields of LlamaConfig / MixtralConfig
    minutes: float  # time budget on 2 shared CPU cores; training stops at `steps` or here
    moe: bool = False
    steps: int = 1000
    batch_size: int = 32
    block_size: int = 128
    lr: float = 2.5e-3
    weight_decay: float = 0.1
    dropout: float = 0.0
    eval_every: int = 100


RECIPES = {
    "shakespeare": Recipe(
        description="the default built-in model: a small dense Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention)",
        architecture=dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2,
                          intermediate_size=512),
        minutes=70, dropout=0.1,
    ),
    "shakespeare-draft": Recipe(
        description="a draft model about ten times smaller than `shakespeare`, for speculative decoding",
        architecture=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                          intermediate_size=176),
        minutes=20, lr=3e-3, weight_decay=0.0,
    ),
    "shakespeare-moe": Recipe(
        description="a Mixtral-style Mixture-of-Experts model: 8 SwiGLU experts per layer, 2 chosen per token",
        architecture=dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                          intermediate_size=192, num_local_experts=8, num_experts_per_tok=2,
                          router_aux_loss_coef=0.01),
        moe=True, minutes=35,
    ),
}


def read_corpus(source: str) -> str:
    """The corpus text from a local path or an http(s) URL."""
    if source.startswith(("http://", "https://")):
        print(f"downloading {source}")
        with urllib.request.urlopen(source) as response:
            return response.read().decode("utf-8")
    return Path(source).read_text(encoding="utf-8")


def split_text(text: str) -> tuple[str, str]:
    """First 90% of the characters to train on, last 10% held out: split('abcdefghij') -> ('abcdefghi', 'j')."""
    cut = int(len(text) * 0.9)
    return text[:cut], text[cut:]


def make_tokenizer(train_text: str, reuse: str | None, path: Path) -> HFTokenizer:
    """Train tinyinfer's BPE on the training split (or reuse a tokenizer.json) and save it to `path`.

    The returned encoder is the `tokenizers` library reading the saved file: fast on a megabyte of text, and
    a check that tinyinfer writes a standard tokenizer.json. A sample is compared with tinyinfer's encode.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if reuse:
        if Path(reuse).resolve() != path.resolve():
            path.write_bytes(Path(reuse).read_bytes())
    else:
        print(f"training a {VOCAB_SIZE}-token BPE tokenizer with tinyinfer")
        tokenizer = Tokenizer.train(train_text, VOCAB_SIZE, [BOS, EOS])
        tokenizer.spec["post_processor"] = prepend_bos(tokenizer.spec)
        tokenizer.save(path)
    fast = HFTokenizer.from_file(str(path))
    sample = train_text[:5000]
    ours = Tokenizer.from_file(path).encode(sample, add_special_tokens=False)
    if ours != fast.encode(sample, add_special_tokens=False).ids:
        raise SystemExit(f"{path}: tinyinfer and the tokenizers library encode the training text differently")
    return fast


def prepend_bos(spec: dict) -> dict:
    """A post-processor that starts every encoded text with BOS, as Llama's does, after the byte-level one."""
    bos_id = next(t["id"] for t in spec["added_tokens"] if t["content"] == BOS)
    bos = {"SpecialToken": {"id": BOS, "type_id": 0}}
    return {"type": "Sequence", "processors": [spec["post_processor"], {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos, {"Sequence": {"id": "B", "type_id": 0}}],
        "special_tokens": {BOS: {"id": BOS, "ids": [bos_id], "tokens": [BOS]}},
    }]}


def encode(fast: HFTokenizer, text: str) -> torch.Tensor:
    return torch.tensor(fast.encode(text, add_special_tokens=False).ids, dtype=torch.long)


def build_model(recipe: Recipe, vocab_size: int, bos_id: int, eos_id: int) -> torch.nn.Module:
    # the context window is the windows it learns from: beyond them its loss rises
    common = dict(vocab_size=vocab_size, max_position_embeddings=recipe.block_size, rms_norm_eps=1e-5,
                  rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=bos_id, eos_token_id=eos_id,
                  hidden_act="silu", initializer_range=0.02)
    if recipe.moe:
        return MixtralForCausalLM(MixtralConfig(**common, **recipe.architecture))
    return LlamaForCausalLM(LlamaConfig(**common, attention_bias=False, mlp_bias=False, **recipe.architecture))


def add_residual_dropout(model: torch.nn.Module, p: float) -> None:
    """Dropout on each attention and MLP output while training; a no-op at eval, and nothing is saved."""
    if p == 0:
        return
    for layer in model.model.layers:
        block_mlp = layer.mlp if hasattr(layer, "mlp") else layer.block_sparse_moe
        for block in (layer.self_attn, block_mlp):
            block.register_forward_hook(lambda mod, args, out: _dropout_output(out, p, mod.training))


def _dropout_output(out, p: float, training: bool):
    if isinstance(out, tuple):
        return (F.dropout(out[0], p, training),) + tuple(out[1:])
    return F.dropout(out, p, training)


def training_batch(train_ids: torch.Tensor, recipe: Recipe, bos_id: int, gen: torch.Generator):
    """Random windows of the training tokens, each preceded by BOS: inputs and next-token targets."""
    n = recipe.block_size  # tokens per window, BOS included
    starts = torch.randint(0, len(train_ids) - n, (recipe.batch_size,), generator=gen)
    windows = torch.stack([train_ids[s:s + n] for s in starts])  # [B, n]
    bos = torch.full((recipe.batch_size, 1), bos_id)
    x = torch.cat([bos, windows[:, :-1]], dim=1)  # [B, n]: BOS then the window's first n-1 tokens
    return x, windows


@torch.no_grad()
def validation_nll(model: torch.nn.Module, val_ids: torch.Tensor, block_size: int, bos_id: int) -> float:
    """Summed NLL (nats) of every given held-out token, in consecutive windows that each start with BOS."""
    model.eval()
    total = 0.0
    for start in range(0, len(val_ids), block_size):
        targets = val_ids[start:start + block_size]  # [n]
        x = torch.cat([torch.tensor([bos_id]), targets[:-1]])[None]  # [1, n]
        logits = model(x).logits[0].float()  # [n, vocab]
        total += F.cross_entropy(logits, targets, reduction="sum").item()
    model.train()
    return total


def train(name: str, recipe: Recipe, data: dict, out: Path, steps: int, max_minutes: float) -> dict:
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = build_model(recipe, data["vocab_size"], data["bos_id"], data["eos_id"])
    add_residual_dropout(model, recipe.dropout)
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {params / 1e6:.2f}M parameters, {steps} steps of {recipe.batch_size}x{recipe.block_size} tokens")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=recipe.lr, betas=(0.9, 0.95))
    # Progress checks score every fourth window of the held-out text (in bf16, to keep them cheap), a sample
    # from all of it (its parts differ in difficulty); the final number scores all of it in fp32.
    windows = data["val"].split(recipe.block_size)
    probe_ids = torch.cat(windows[::4])
    probe_chars = len(data["fast"].decode(probe_ids.tolist()))
    best, best_state, started = float("inf"), None, time.time()
    bar = tqdm(range(1, steps + 1), desc=name, mininterval=30)
    for step in bar:
        # The run ends at `steps` or at `max_minutes`, whichever comes first, and the learning rate decays
        # over whichever is nearer, so a slow (shared) CPU still gets a fully annealed model.
        progress = max((step - 1) / steps, (time.time() - started) / 60 / max_minutes)
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr * learning_rate_scale(step, progress)
        x, y = training_batch(data["train"], recipe, data["bos_id"], gen)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs = model(x, output_router_logits=True) if recipe.moe else model(x)
        loss = F.cross_entropy(outputs.logits.float().flatten(0, 1), y.flatten())
        if recipe.moe:
            loss = loss + model.config.router_aux_loss_coef * outputs.aux_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
        out_of_time = (time.time() - started) / 60 >= max_minutes
        if step % recipe.eval_every == 0 or step == steps or out_of_time:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                val = validation_nll(model, probe_ids, recipe.block_size, data["bos_id"]) / probe_chars
            tqdm.write(f"{name} step {step}: train {loss.item():.3f} nats/token, held-out probe {val:.4f} nats/char, "
                       f"{(time.time() - started) / 60:.1f} min")
            if val < best:
                best, best_state = val, {k: v.detach().clone() for k, v in model.state_dict().items()}
        if out_of_time:
            tqdm.write(f"{name}: stopping at step {step}, the end of the {max_minutes}-minute budget")
            break
    minutes = (time.time() - started) / 60
    model.load_state_dict(best_state)
    save_checkpoint(model, out)
    shipped = load_shipped(out)
    val = validation_nll(shipped, data["val"], recipe.block_size, data["bos_id"]) / data["val_chars"]
    print(f"{name}: held-out loss {val:.4f} nats/char as shipped (16-bit), trained {step} steps in {minutes:.1f} min")
    return {"params": params, "val_nats_per_char": val, "minutes": minutes, "steps": step}


def learning_rate_scale(step: int, progress: float, warmup_steps: int = 20) -> float:
    """Linear warm-up over the first steps, then cosine decay to 10% as progress goes 0 -> 1.

    learning_rate_scale(5, 0.0) -> 0.25;  learning_rate_scale(100, 0.5) -> 0.55;  learning_rate_scale(300, 1.0) -> 0.1
    """
    cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return min(step / warmup_steps, 0.1 + 0.9 * cosine)


def save_checkpoint(model: torch.nn.Module, out: Path) -> None:
    model.config.dtype = torch.bfloat16
    model.to(torch.bfloat16).save_pretrained(out)
    model.float()


def load_shipped(folder: Path) -> torch.nn.Module:
    cls = MixtralForCausalLM if json.loads((folder / "config.json").read_text())["model_type"] == "mixtral" else LlamaForCausalLM
    return cls.from_pretrained(folder, dtype=torch.float32).eval()


@torch.no_grad()
def greedy_agreement(draft: torch.nn.Module, target: torch.nn.Module, data: dict, block_size: int) -> float:
    """Fraction of held-out positions where the draft's and the target's greedy next tokens agree."""
    agree = total = 0
    for start in range(0, len(data["val"]), block_size):
        x = torch.cat([torch.tensor([data["bos_id"]]), data["val"][start:start + block_size - 1]])[None]  # [1, n]
        agree += (draft(x).logits.argmax(-1) == target(x).logits.argmax(-1)).sum().item()
        total += x.shape[1]
    return agree / total


def write_metadata(folder: Path, name: str, recipe: Recipe, result: dict, command: str, corpus: str) -> None:
    bos, eos = BOS, EOS
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
        "add_bos_token": True, "model_max_length": recipe.block_size * 4, "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")
    config = json.loads((folder / "config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({
        "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
        "do_sample": True, "temperature": 0.8, "top_k": 50, "max_new_tokens": 100,  # fits the context window after a short prompt
    }, indent=2) + "\n")
    arch = ", ".join(f"{k}={v}" for k, v in recipe.architecture.items())
    (folder / "README.md").write_text(f"""# {name}

{recipe.description[0].upper() + recipe.description[1:]}. Built into tinyinfer so that
`python -m tinyinfer generate --model {name} "ROMEO:"` works with no download.

- Data: tinyshakespeare ({corpus}), the works of Shakespeare, public domain. First 90% of the characters
  trained on, last 10% held out.
- Architecture: {config["architectures"][0]} ({config["model_type"]}), {arch}, vocab_size={config["vocab_size"]},
  tied embeddings; weights stored in bfloat16.
- Parameters: {result["params"]:,}.
- Tokenizer: {VOCAB_SIZE}-token byte-level BPE trained by tinyinfer's own trainer on the training split,
  shared by shakespeare, shakespeare-draft and shakespeare-moe.
- Training: {result["steps"]} steps of AdamW, batch {recipe.batch_size} x {recipe.block_size} tokens, lr {recipe.lr},
  weight decay {recipe.weight_decay}, residual dropout {recipe.dropout}, seed {SEED}; {result["minutes"]:.1f} minutes
  on 2 CPU cores.
- Command: `{command}`
- Validation loss: **{result["val_nats_per_char"]:.4f} nats per character** on the held-out 10% (summed token NLL /
  characters), measured on the weights as shipped.
- Context window: {recipe.block_size} tokens, the windows it was trained on (max_position_embeddings): beyond them its
  loss rises (`python -m tinyinfer perplexity --model {name} --ctx-size N` on the held-out text shows it).

It writes Shakespeare-flavoured pseudo-verse; it knows nothing else. Licence of the weights: MIT, as tinyinfer.
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS) if DEFAULT_CORPUS.exists() else CORPUS_URL,
                        help="path or URL of the training text (default: tinyshakespeare)")
    parser.add_argument("--out", type=Path, default=ROOT / "tinyinfer" / "models", help="folder for the model folders")
    parser.add_argument("--only", choices=list(RECIPES), action="append", help="train only this model (repeatable)")
    parser.add_argument("--tokenizer", help="reuse this tokenizer.json instead of training one")
    parser.add_argument("--steps", type=int, help="override each model's number of training steps")
    parser.add_argument("--minutes", type=float, help="override each model's time budget")
    parser.add_argument("--agreement", action="store_true",
                        help="only measure how often shakespeare-draft's greedy choice matches shakespeare's")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for PyTorch")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    command = "python weights_scripts/train_builtin.py " + " ".join(sys.argv[1:])

    train_text, val_text = split_text(read_corpus(args.corpus))
    names = [] if args.agreement else args.only or list(RECIPES)
    corpus_name = args.corpus if "://" in args.corpus else "karpathy/char-rnn data/tinyshakespeare/input.txt"
    tokenizer_path = args.out / (names[0] if names else "shakespeare") / "tokenizer.json"
    reuse = args.tokenizer or (tokenizer_path if args.agreement else None)
    fast = make_tokenizer(train_text, reuse, tokenizer_path)
    data = {"fast": fast, "train": encode(fast, train_text), "val": encode(fast, val_text), "val_chars": len(val_text),
            "vocab_size": fast.get_vocab_size(), "bos_id": fast.token_to_id(BOS), "eos_id": fast.token_to_id(EOS)}
    print(f"{len(train_text):,} training characters -> {len(data['train']):,} tokens; "
          f"{len(val_text):,} held-out characters -> {len(data['val']):,} tokens")

    for name in names:
        recipe = RECIPES[name]
        folder = args.out / name
        folder.mkdir(parents=True, exist_ok=True)
        if folder / "tokenizer.json" != tokenizer_path:
            (folder / "tokenizer.json").write_bytes(tokenizer_path.read_bytes())
        result = train(name, recipe, data, folder, args.steps or recipe.steps, args.minutes or recipe.minutes)
        write_metadata(folder, name, recipe, result, command, corpus_name)
    if "shakespeare-draft" in names or args.agreement:
        report_agreement(args.out, data)


def report_agreement(out: Path, data: dict) -> None:
    """Measure the draft against the target and add the number to the draft's model card."""
    draft, target = out / "shakespeare-draft", out / "shakespeare"
    if not (target / "model.safetensors").exists():
        print("shakespeare is not trained yet: rerun with --agreement once it is")
        return
    rate = greedy_agreement(load_shipped(draft), load_shipped(target), data, RECIPES["shakespeare"].block_size)
    print(f"shakespeare-draft: greedy choices agree with shakespeare's at {rate:.1%} of held-out positions")
    card = draft / "README.md"
    card.write_text(card.read_text() + f"\nGreedy agreement with `shakespeare` on the held-out text (the acceptance "
                    f"rate of speculative decoding at temperature 0): **{rate:.1%}** of positions.\n")


if __name__ == "__main__":
    main()
