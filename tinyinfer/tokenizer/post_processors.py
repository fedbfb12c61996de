"""Post-processors: add the special tokens a model expects around the encoded text (BOS, EOS, [CLS]...).

tokenizer.json's "post_processor" says which ones: Llama-2 prepends <s> (id 1) through a
TemplateProcessing entry; GPT-2's ByteLevel post-processor adds nothing to the ids (it only adjusts
character offsets, which tinyinfer does not track). `encode(text, add_special_tokens=False)` skips this.

    build_post_processor(llama_spec)([15043]) -> [1, 15043]
"""

from __future__ import annotations

from collections.abc import Callable

from tinyinfer.errors import TinyInferError

PostProcessor = Callable[[list[int]], list[int]]


def template(spec: dict) -> PostProcessor:
    """TemplateProcessing's "single" template: a list of {"SpecialToken": {"id": name}} and {"Sequence": ...}."""
    before, after, seen_sequence = [], [], False
    for item in spec["single"]:
        if "Sequence" in item:
            seen_sequence = True
        elif "SpecialToken" in item:
            name = item["SpecialToken"]["id"]
            if name not in spec.get("special_tokens", {}):
                raise TinyInferError(f"the post-processor template uses {name!r}, which its special_tokens table lacks; fix tokenizer.json")
            (after if seen_sequence else before).extend(spec["special_tokens"][name]["ids"])
        else:
            raise TinyInferError(f"unknown item {item!r} in a TemplateProcessing template in tokenizer.json")
    return lambda ids: [*before, *ids, *after]


def build_post_processor(spec: dict | None) -> PostProcessor | None:
    """The function a tokenizer.json "post_processor" entry describes (None: ids are left as they are)."""
    if spec is None:
        return None
    kind = spec.get("type")
    if kind == "TemplateProcessing":
        return template(spec)
    if kind == "ByteLevel":
        return None
    if kind in ("RobertaProcessing", "BertProcessing"):
        cls_id, sep_id = spec["cls"][1], spec["sep"][1]
        return lambda ids: [cls_id, *ids, sep_id]
    if kind == "Sequence":
        steps = [p for p in map(build_post_processor, spec["processors"]) if p is not None]

        def run(ids: list[int]) -> list[int]:
            for step in steps:
                ids = step(ids)
            return ids
        return run
    raise TinyInferError(f"tokenizer.json uses the post-processor {kind!r}, which tinyinfer does not implement "
                         "(supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence)")
