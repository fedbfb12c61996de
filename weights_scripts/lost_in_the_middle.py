"""Lost in the middle, measured: does a real model find a fact placed at each depth of a long prompt?

    python -m tinyinfer pull smollm2-135m-instruct
    python weights_scripts/lost_in_the_middle.py                    # writes chapters/images/lost-in-the-middle.png
    python weights_scripts/lost_in_the_middle.py --filler 120 --distractors 10 --trials 8 --device cuda

Design (after Liu et al., "Lost in the Middle", 2023, scaled down to a 135M model):
- A haystack of `--filler` irrelevant sentences (each names a city and a number, so the needle does not
  stand out by form), `--distractors` of them replaced by codes of *other* accounts spread evenly through it
  (so the answer must be the right code, not any code), and one needle, "The code for the NAME account is
  NUMBER.", inserted after a fraction `depth` of the haystack, for depths 0, 0.25, 0.5, 0.75 and 1.
- The question comes last, in the chat template: "What is the code for the NAME account?". Greedy decoding,
  16 tokens; the answer is right when the needle's number appears in it.
- `--trials` needles per depth (different names and numbers, the same haystack), so each point is an
  accuracy over trials; the prompt length is printed (the same at every depth, within a few tokens).
The plot is a measurement of one small model on one synthetic task, with `--trials` samples per point:
read it as the shape of the effect, not as a benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tinyinfer  # noqa: E402
from tinyinfer.chat import ChatTemplate  # noqa: E402
from tinyinfer.course import figures  # noqa: E402

CITIES = ["Lisbon", "Oslo", "Lima", "Perth", "Quito", "Riga", "Sofia", "Tunis", "Hanoi", "Dakar", "Accra", "Bern",
          "Cairo", "Delhi", "Kyiv", "Minsk", "Nairobi", "Ottawa", "Prague", "Seoul", "Tallinn", "Vienna", "Warsaw", "Zagreb"]
NAMES = ["Mara", "Tobias", "Ingrid", "Kofi", "Lena", "Ravi", "Sofia", "Yusuf", "Elena", "Hugo", "Amara", "Jonas"]
DEPTHS = [0.0, 0.25, 0.5, 0.75, 1.0]


def haystack(n: int, rng) -> list[str]:
    return [f"The train from {CITIES[i % len(CITIES)]} leaves at platform {int(rng.integers(2, 40))} every {int(rng.integers(5, 60))} minutes."
            for i in range(n)]


def prompt_for(sentences: list[str], needle: str, depth: float, question: str, template) -> str:
    """The haystack with the needle after a fraction `depth` of it, then the question, in the chat template
    (or as plain text for a model without one)."""
    at = round(depth * len(sentences))
    text = " ".join(sentences[:at] + [needle] + sentences[at:])
    content = f"Read this text.\n\n{text}\n\nAnswer in one short sentence. {question}"
    if template is None:
        return f"{content}\nAnswer:"
    return template.render([{"role": "user", "content": content}], add_generation_prompt=True)


def with_distractors(sentences: list[str], names: list[str], rng) -> list[str]:
    """`sentences` with len(names) of them, evenly spaced, replaced by those accounts' codes."""
    sentences = list(sentences)
    for i, name in enumerate(names):
        sentences[(2 * i + 1) * len(sentences) // (2 * len(names))] = f"The code for the {name} account is {int(rng.integers(1000, 9999))}."
    return sentences


def measure(model, template, filler: int, trials: int, distractors: int = 0, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    accuracy, lengths = [], []
    for depth in DEPTHS:
        right = 0
        for t in range(trials):
            name, number = NAMES[t % len(NAMES)], int(rng.integers(1000, 9999))
            others = [n for n in NAMES if n != name][:distractors]
            sentences = with_distractors(haystack(filler, np.random.default_rng(seed)), others, np.random.default_rng(seed + 1))
            prompt = prompt_for(sentences, f"The code for the {name} account is {number}.", depth,
                                f"What is the code for the {name} account?", template)
            result = model.generate(prompt, max_tokens=16, temperature=0.0, add_special_tokens=template is None)
            text = result.text
            lengths.append(result.prompt_tokens)
            right += str(number) in text
            print(f"depth {depth:.2f} trial {t}: {'right' if str(number) in text else 'wrong'}  {text.strip()[:60]!r}", flush=True)
        accuracy.append(right / trials)
    return {"depths": DEPTHS, "accuracy": accuracy, "trials": trials, "filler_sentences": filler, "distractors": distractors,
            "prompt_tokens": lengths}


def plot(result: dict, model_name: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(np.array(result["depths"]) * 100, np.array(result["accuracy"]) * 100, marker="o")
    ax.set_ylim(-5, 105)
    ax.set_xlabel("depth of the fact in the prompt (% of the way through)")
    ax.set_ylabel("answers right (%)")
    ax.set_title(f"{model_name}: the right code among {result['distractors'] + 1}, "
                 f"{result['prompt_tokens'][0]}-token prompts, {result['trials']} per depth", fontsize=9)
    return fig


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--filler", type=int, default=40, help="haystack sentences (about 15 tokens each)")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--distractors", type=int, default=6, help="other accounts' codes in the haystack")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=ROOT / figures.IMAGES / "lost-in-the-middle.png")
    args = parser.parse_args(argv)
    template = ChatTemplate.for_model(args.model, required=False)
    model = tinyinfer.load(args.model, device=args.device)
    start = time.perf_counter()
    result = measure(model, template, args.filler, args.trials, args.distractors)
    result |= {"model": args.model, "seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps(result))
    fig = plot(result, args.model)
    figures.save(fig, args.out)
    entries = figures.read_manifest(ROOT)
    entries[args.out.stem] = figures.summary(fig, measured=True)
    figures.write_manifest(ROOT, entries)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
