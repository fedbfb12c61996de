"""`tinyinfer bench grammar`: JSON-Schema coverage, compile time and per-token mask time, tinyinfer next to
llguidance and xgrammar (each where installed), on the same schemas and the same vocabulary in one run.

    python -m tinyinfer bench grammar --schemas ../shared/data/jsonschema --tokens 48

Every engine compiles every schema (one JSON per line in *.jsonl: subset, schema, tests); the ones it
refuses are its coverage gap. On the first --timed-per-subset schemas of each subset that all engines
compile, each engine also compiles against the vocabulary (timed) and walks --tokens random steps: at each
step it computes the mask (timed), draws a uniform token among the allowed ones (what random logits amount
to), and advances. Every engine is also fed the invalid example documents of every schema it covers
(over a byte vocabulary, so any text can be spelled).
Figures: coverage per subset; compile time p50/p99 (tinyinfer: schema -> grammar -> network -> masker,
the grammar's caches cold; the vocabulary's, which hold walks any grammar shares, such as a string's,
persist from schema to schema as in a server); mask time p50/p99 over every step (tinyinfer computes masks
lazily and caches them, so its p99 holds the cold misses and its p50 the cached steady state); and how
many *invalid* example documents each engine's grammar accepts: an engine that skips a keyword compiles
more schemas but lets invalid documents through.

The mask time is set against one decode step of the built-in model, timed here in the same run. The
objects built before the timing (the tokenizer, each engine's vocabulary) are frozen out of Python's
garbage collector, as a server does after startup: otherwise a full collection that one engine's
allocations trigger walks them all inside whatever is being timed (25 ms on a compile, measured).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tinyinfer.constrain.automaton import compile_grammar
from tinyinfer.constrain.build import warm_vocabulary
from tinyinfer.constrain.json_schema import schema_to_grammar
from tinyinfer.constrain.mask import Constraint, TokenMasker, Vocabulary
from tinyinfer.commands import at_least
from tinyinfer.errors import TinyInferError

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def add_arguments(parser) -> None:
    parser.add_argument("--schemas", default=str(SHARED / "jsonschema"), help="folder of *.jsonl schema files")
    parser.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "gpt2" / "tokenizer.json"),
                        help="tokenizer whose vocabulary the masks cover (default: GPT-2, 50,257 tokens)")
    parser.add_argument("--tokens", type=at_least(1), default=48, help="random steps walked per schema")
    parser.add_argument("--timed-per-subset", type=at_least(1), default=4,
                        help="schemas per subset compiled against the vocabulary and walked (coverage uses all)")
    parser.add_argument("--engines", default="tinyinfer,llguidance,xgrammar", help="comma-separated")


# ---------------------------------------------------------------- engines
class TinyInfer:
    name = "tinyinfer"

    def __init__(self, token_bytes: list[bytes], eos: int):
        self.vocab = warm_vocabulary(Vocabulary(token_bytes, [eos]))  # as `tinyinfer serve` starts

    def covers(self, schema) -> bool:
        try:
            compile_grammar(schema_to_grammar(schema))
            return True
        except TinyInferError:
            return False

    def compile(self, schema):
        return TokenMasker(compile_grammar(schema_to_grammar(schema)), self.vocab)

    def walker(self, masker):
        constraint = Constraint(masker)
        return constraint.allowed_mask, constraint.advance

    def accepts(self, masker, data: bytes) -> bool:
        return masker.parser.accepts(masker.parser.step_bytes(masker.parser.initial, data))


class LLGuidance:
    name = "llguidance"

    def __init__(self, token_bytes: list[bytes], eos: int):
        import llguidance
        import llguidance.numpy

        self.ll, self.fill = llguidance, llguidance.numpy.fill_next_token_bitmask
        wrapper = _Wrapper(token_bytes, eos)
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(wrapper))
        self.size = len(token_bytes)

    def covers(self, schema) -> bool:
        return not self.ll.LLMatcher.validate_grammar(self.compile(schema), self.tokenizer)

    def compile(self, schema):
        return self.ll.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})

    def walker(self, grammar):
        matcher = self.ll.LLMatcher(self.tokenizer, grammar, log_level=0)
        bitmask = self.ll.numpy.allocate_token_bitmask(1, self.size)

        def mask():
            self.fill(matcher, bitmask)
            return np.unpackbits(bitmask.view(np.uint8), bitorder="little")[: self.size].astype(bool)

        return mask, matcher.consume_token

    def accepts(self, grammar, data: bytes) -> bool:
        matcher = self.ll.LLMatcher(self.tokenizer, grammar, log_level=0)
        for token in self.tokenizer.tokenize_bytes(data):
            if not matcher.consume_token(token):
                return False
        return matcher.is_accepting()


# Compact JSON like tinyinfer's; strict_mode=False keeps JSON Schema's meaning of an absent
# additionalProperties (any extra key allowed) instead of forbidding extra keys.
XGRAMMAR_OPTIONS = {"any_whitespace": False, "strict_mode": False, "separators": (",", ":")}


@contextlib.contextmanager
def native_stderr_silenced():
    """Send file descriptor 2 to /dev/null for a while: xgrammar's C++ code logs a warning line for every schema
    it approximates, straight to the descriptor, around Python's sys.stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class XGrammar:
    name = "xgrammar"

    def __init__(self, token_bytes: list[bytes], eos: int):
        import xgrammar

        self.xg = xgrammar
        info = xgrammar.TokenizerInfo(token_bytes, xgrammar.VocabType.RAW, stop_token_ids=[eos])
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.size, self.eos = len(token_bytes), eos

    def covers(self, schema) -> bool:
        try:  # the grammar alone, without the vocabulary preprocessing compile() adds
            with native_stderr_silenced():
                self.xg.Grammar.from_json_schema(json.dumps(schema), **XGRAMMAR_OPTIONS)
            return True
        except Exception:  # noqa: BLE001 -- xgrammar raises its own error types for schemas it refuses
            return False

    def compile(self, schema):
        with native_stderr_silenced():
            return self.compiler.compile_json_schema(json.dumps(schema), **XGRAMMAR_OPTIONS)

    def walker(self, compiled):
        matcher = self.xg.GrammarMatcher(compiled)
        bitmask = self.xg.allocate_token_bitmask(1, self.size)

        def mask():
            matcher.fill_next_token_bitmask(bitmask)
            return np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[: self.size].astype(bool)

        return mask, matcher.accept_token

    def accepts(self, compiled, data: bytes) -> bool:
        matcher = self.xg.GrammarMatcher(compiled)
        return matcher.accept_string(data) and matcher.accept_token(self.eos)


class _Wrapper:
    """The fields llguidance's TokenizerWrapper reads, over the same token bytes the others use."""

    def __init__(self, token_bytes: list[bytes], eos: int):
        self.tokens, self.eos_token_id, self.bos_token_id, self.special_token_ids = token_bytes, eos, None, [eos]
        self._byte_ids = {t[0]: i for i, t in enumerate(token_bytes) if len(t) == 1}

    def __call__(self, data: bytes) -> list[int]:  # llguidance tokenizes text with it: one token per byte
        return [self._byte_ids[b] for b in data]


ENGINES = {"tinyinfer": TinyInfer, "llguidance": LLGuidance, "xgrammar": XGrammar}


# ---------------------------------------------------------------- measuring
def percentiles(times: list[float]) -> str:
    if not times:
        return "     -          -"
    p50, p99 = np.percentile(np.array(times) * 1e3, [50, 99])
    return f"{p50:8.3f} ms {p99:8.2f} ms"


def walk(engine, compiled, steps: int, seed: int, eos: int) -> tuple[list[float], list[float]]:
    """Mask times along a random walk (uniform among allowed tokens) of at most `steps` tokens: wall seconds,
    and this process's CPU seconds (what other work on a shared machine disturbs far less)."""
    mask_fn, advance = engine.walker(compiled)
    rng, times, cpu_times = np.random.default_rng(seed), [], []
    for _ in range(steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        mask = mask_fn()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - start_cpu)
        allowed = np.flatnonzero(mask)
        if allowed.size == 0:
            break
        token = int(allowed[rng.integers(allowed.size)])
        if token == eos:
            break
        advance(token)
    return times, cpu_times


def decode_step_seconds(context: int = 256, steps: int = 20) -> tuple[float, str]:
    """Mean time of one decode step of the built-in model at a `context`-token position."""
    import tinyinfer
    from tinyinfer.model import SeqChunk
    from tinyinfer.resolve import DEFAULT_MODEL

    model = tinyinfer.load(DEFAULT_MODEL)
    context = min(context, model.config.max_seq_len - steps)
    cache = model.new_cache(max_seqs=1, max_len=context + steps)
    model.forward([SeqChunk(0, 0, [1] * context)], cache)
    start = time.perf_counter()
    for i in range(steps):
        model.forward([SeqChunk(0, context + i, [1])], cache)
    seconds = (time.perf_counter() - start) / steps
    return seconds, f"built-in model {DEFAULT_MODEL} ({model.n_params / 1e6:.1f}M parameters, {context}-token context)"


ROW_KEYS = ("subset", "schema", "tests", "source_path")  # one schema row: a line of a *.jsonl file


def read_rows(files: list[Path]) -> list[dict]:
    """The schema rows of the *.jsonl files, each checked to be a row before any engine sees it."""
    rows = []
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise TinyInferError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}): give *.jsonl files") from None
        for number, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TinyInferError(f"{path} line {number} is not JSON ({e}): each line holds one schema row") from None
            if not (isinstance(row, dict) and set(ROW_KEYS) <= row.keys() and isinstance(row["schema"], (dict, bool))
                    and isinstance(row["tests"], list)):
                raise TinyInferError(f"{path} line {number} is not a schema row: give an object with "
                                     f"{', '.join(ROW_KEYS)}, whose schema is a JSON Schema (an object or a boolean)")
            rows.append(row)
    return rows


def run(args) -> int:
    from tinyinfer.tokenizer import Tokenizer

    files = sorted(Path(args.schemas).glob("*.jsonl"))
    if not files:
        raise TinyInferError(f"no *.jsonl schema files in {args.schemas}; pass --schemas FOLDER")
    rows = read_rows(files)
    tokenizer = Tokenizer.from_file(args.tokenizer)
    vocab = Vocabulary.from_tokenizer(tokenizer)
    eos = vocab.eos_ids[0]
    token_bytes = [b"" if i in tokenizer.special_ids else tokenizer.token_bytes(i) for i in range(vocab.size)]
    byte_vocab = [bytes([b]) for b in range(256)] + [b""]  # for the soundness check: every text is spellable
    engines, byte_engines = [], {}
    for name in args.engines.split(","):
        if name not in ENGINES:
            raise TinyInferError(f"unknown engine {name!r}; use some of {', '.join(ENGINES)}")
        try:
            engines.append(ENGINES[name](token_bytes, eos))
            byte_engines[name] = ENGINES[name](byte_vocab, 256)
        except ImportError:
            print(f"{name}: not installed, skipped")
    gc.collect()
    gc.freeze()  # what was built so far lives to the end: no full collection inside a timed compile walks it
    print(f"{len(rows)} schemas from {args.schemas}; vocabulary: {args.tokenizer} ({vocab.size} tokens); "
          f"{args.timed_per_subset} timed schemas per subset (every engine covers), {args.tokens} random steps each")

    stats = {e.name: {"compile": [], "mask": [], "compile_cpu": [], "mask_cpu": [], "cover": {}, "invalid": [0, 0],
                      "schemas": set()} for e in engines}
    timed_in: dict[str, int] = {}
    for i, row in enumerate(tqdm(rows, desc="schemas", unit="schema", disable=None)):
        covered = {e.name: e.covers(row["schema"]) for e in engines}
        timed = all(covered.values()) and timed_in.get(row["subset"], 0) < args.timed_per_subset
        timed_in[row["subset"]] = timed_in.get(row["subset"], 0) + timed
        invalid = [json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False).encode()
                   for t in row["tests"] if not t["valid"]]
        for engine in engines:
            s = stats[engine.name]
            done, total = s["cover"].get(row["subset"], (0, 0))
            s["cover"][row["subset"]] = (done + covered[engine.name], total + 1)
            if covered[engine.name] and invalid:  # soundness: does its grammar let invalid documents through?
                checker = byte_engines[engine.name]
                accepted = sum(checker.accepts(checker.compile(row["schema"]), data) for data in invalid)
                s["invalid"][0] += accepted
                s["invalid"][1] += len(invalid)
                if accepted:
                    s["schemas"].add(row["source_path"])
            if not timed:
                continue
            start, start_cpu = time.perf_counter(), time.process_time()
            compiled = engine.compile(row["schema"])
            s["compile"].append(time.perf_counter() - start)
            s["compile_cpu"].append(time.process_time() - start_cpu)
            wall, cpu = walk(engine, compiled, args.tokens, seed=i, eos=eos)
            s["mask"] += wall
            s["mask_cpu"] += cpu

    gc.unfreeze()
    subsets = sorted({row["subset"] for row in rows})
    print("\ncoverage (schemas compiled / schemas):")
    print(f"{'subset':<24}" + "".join(f"{e.name:>14}" for e in engines))
    for subset in subsets + ["total"]:
        cells = []
        for e in engines:
            cover = stats[e.name]["cover"]
            done, total = cover[subset] if subset != "total" else map(sum, zip(*cover.values()))
            cells.append(f"{done:>6}/{total:<7}")
        print(f"{subset:<24}" + "".join(f"{c:>14}" for c in cells))
    step, what = decode_step_seconds()
    print(f"\ndecode step: {step * 1e3:.2f} ms, {what}")
    print(f"{'engine':<12}{'compile p50':>12}{'p99':>11}{'mask p50':>14}{'p99':>12}{'mean':>11}{'p50/decode':>12}"
          f"{'mean/decode':>12}   invalid examples accepted (all covered schemas)")
    for e in engines:
        s = stats[e.name]
        p50 = float(np.median(s["mask"])) if s["mask"] else float("nan")
        mean = float(np.mean(s["mask"])) if s["mask"] else float("nan")
        print(f"{e.name:<12}{percentiles(s['compile'])}  {percentiles(s['mask'])}{mean * 1e3:8.3f} ms"
              f"{p50 / step:>11.1%}{mean / step:>12.1%}"
              f"{s['invalid'][0]:>8} of {s['invalid'][1]} ({len(s['schemas'])} schemas)")
    print(f"\nthe same in CPU time (this process's, so other work on the machine counts less):")
    print(f"{'engine':<12}{'compile p50':>12}{'p99':>11}{'mask p50':>14}{'p99':>12}{'mean':>11}")
    for e in engines:
        s = stats[e.name]
        mean = float(np.mean(s["mask_cpu"])) if s["mask_cpu"] else float("nan")
        print(f"{e.name:<12}{percentiles(s['compile_cpu'])}  {percentiles(s['mask_cpu'])}{mean * 1e3:8.3f} ms")
    return 0
