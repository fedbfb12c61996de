"""GGUF files (llama.cpp's format): the reader (reader.py), the block types' dequantisers (quants.py), and the
translation of a file's metadata and tensor names into a tinyinfer model (model_file.py)."""
