"""GGUF files (llama.cpp's format), read by tinyinfer itself:

    reader.py         the container: header, metadata, tensor infos, alignment, memory-mapped data
    quants.py         the block types (Q8_0, Q4_K, ...), one dequantiser each
    architectures.py  what the families' GGUF layouts share (each family's own is in tinyinfer/families/)
    model_file.py     a file as a model: its Config, its parameters (dequantised, or kept in their blocks), its tokenizer
"""
