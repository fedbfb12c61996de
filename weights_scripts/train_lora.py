"""Fine-tune a LoRA adapter for the built-in `shakespeare` model with PyTorch and peft, on the CPU.

    python weights_scripts/train_lora.py                   # -> tinyinfer/models/shakespeare-shout/
    python weights_scripts/train_lora.py --steps 50 --out /tmp/shout

The task is one a reader can see at a glance: SHOUTING. The training text is the model's own corpus in
capitals, so what the adapter has to learn is a change of style, not new knowledge. Only the adapter trains
(rank 8 on every attention and MLP projection); the base weights stay frozen, and the saved folder is a
standard PEFT adapter (adapter_config.json + adapter_model.safetensors) that peft and tinyinfer both load.

Design:
- The corpus split and the BOS-first training windows are train_builtin.py's, so the adapter sees text the
  way the base model did; the held-out loss is measured on the last 10% of the corpus, in capitals too.
- The README written beside the adapter records the command, the held-out loss before and after, and the
  share of capital letters in the text the model writes with and without the adapter (measured by
  tinyinfer, sampling at temperature 0.8 from a fixed seed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import peft
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer as HFTokenizer
from transformers import LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import tinyinfer  # noqa: E402
from tinyinfer.lora import load_adapter  # noqa: E402

BASE = ROOT / "tinyinfer" / "models" / "shakespeare"
DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "corpora" / "tinyshakespeare.txt"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SEED = 1337


def windows(ids: np.ndarray, bos: int, n: int, length: int, rng: np.random.Generator) -> torch.Tensor:
    """n random training windows of `length` tokens, each starting with BOS (as a prompt does)."""
    starts = rng.integers(0, len(ids) - length, size=n)
    rows = [np.concatenate([[bos], ids[s:s + length - 1]]) for s in starts]
    return torch.tensor(np.stack(rows), dtype=torch.long)  # [n, length]


def loss_of(model, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch).logits  # [B, T, V]
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


@torch.no_grad()
def held_out_loss(model, batches: list[torch.Tensor]) -> float:
    model.eval()
    loss = float(np.mean([loss_of(model, b).item() for b in batches]))
    model.train()
    return loss


def capital_share(text: str) -> float:
    """The share of letters that are capitals.  capital_share("ROMEO: ah") -> 0.714..."""
    letters = [c for c in text if c.isalpha()]
    return sum(c.isupper() for c in letters) / max(1, len(letters))


def measure_style(out: Path, prompts: list[str]) -> tuple[float, float]:
    """Capital share of what tinyinfer generates from `prompts`, without and with the adapter in `out`."""
    model = tinyinfer.load(BASE)
    load_adapter(model, "shout", out)
    shares = []
    for lora in (None, "shout"):
        text = "".join(model.generate(p, max_tokens=100, temperature=0.8, seed=i, lora=lora).text
                       for i, p in enumerate(prompts))
        shares.append(capital_share(text))
    return shares[0], shares[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    parser.add_argument("--out", default=str(ROOT / "tinyinfer" / "models" / "shakespeare-shout"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(SEED)

    text = Path(args.corpus).read_text().upper()
    split = int(len(text) * 0.9)
    tokenizer = HFTokenizer.from_file(str(BASE / "tokenizer.json"))
    bos = tokenizer.token_to_id("<s>")
    train_ids = np.array(tokenizer.encode(text[:split], add_special_tokens=False).ids)
    val_ids = np.array(tokenizer.encode(text[split:], add_special_tokens=False).ids)
    val = [windows(val_ids, bos, args.batch, args.length, rng) for _ in range(8)]

    base = LlamaForCausalLM.from_pretrained(BASE, dtype=torch.float32)
    config = peft.LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=TARGETS, lora_dropout=0.05)
    model = peft.get_peft_model(base, config)
    before = held_out_loss(model, val)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    start = time.time()
    for step in range(1, args.steps + 1):
        loss = loss_of(model, windows(train_ids, bos, args.batch, args.length, rng))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == args.steps:
            print(f"step {step}: train loss {loss.item():.3f}", flush=True)
    after = held_out_loss(model, val)
    out = Path(args.out)
    model.save_pretrained(out)
    adapter_config = json.loads((out / "adapter_config.json").read_text())
    adapter_config["base_model_name_or_path"] = "shakespeare"  # the built-in name, not this machine's path
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2) + "\n")
    prompts = ["ROMEO:", "First Citizen:\nWe are", "JULIET:\nO", "KING HENRY:\nNow"]
    plain, shouting = measure_style(out, prompts)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    (out / "README.md").write_text(
        f"# shakespeare-shout\n\nA LoRA adapter for the built-in `shakespeare` model (tinyinfer/models/shakespeare): "
        f"it writes in capitals.\n\n- Made by `python weights_scripts/train_lora.py --steps {args.steps} --batch "
        f"{args.batch} --length {args.length} --rank {args.rank} --lr {args.lr}` in {time.time() - start:.0f} s "
        f"(training and evaluation) on {args.threads} CPU thread(s): tinyshakespeare in capitals, the first 90% for training.\n"
        f"- Rank {args.rank} on {', '.join(TARGETS)}: {trainable:,} trained numbers.\n"
        f"- Held-out loss (last 10% of the corpus, in capitals), nats per token: {before:.3f} without the adapter, "
        f"{after:.3f} with it.\n"
        f"- Capital letters in 100-token samples (temperature 0.8, seeds 0-3, prompts {prompts!r}): "
        f"{plain:.0%} without the adapter, {shouting:.0%} with it.\n\n"
        "    python -m tinyinfer generate \"ROMEO:\" --lora shakespeare-shout\n")
    print(f"held-out loss {before:.3f} -> {after:.3f}; capitals {plain:.0%} -> {shouting:.0%}; saved to {out}")


if __name__ == "__main__":
    main()
