"""Tokenisation from scratch: byte-level and SentencePiece-style BPE, trained and loaded.

    from tinyinfer.tokenizer import Tokenizer
    tok = Tokenizer.from_file("path/to/tokenizer.json")   # or a model folder, or a llama2.c tokenizer.bin
    ids = tok.encode("Hello world")                       # -> [15496, 995] with GPT-2
    tok.decode(ids)                                        # -> 'Hello world'

Read in this order: byte_level.py (the 256-symbol alphabet), bpe.py (merging), train.py (learning
merges), pre_tokenizers.py / normalizers.py / added_tokens.py (what happens before BPE), decoders.py
and post_processors.py (after), tokenizer.py (the pipeline), llama2c.py, streaming.py.
"""

from tinyinfer.tokenizer.streaming import StreamingDetokenizer
from tinyinfer.tokenizer.tokenizer import Tokenizer

__all__ = ["StreamingDetokenizer", "Tokenizer"]
