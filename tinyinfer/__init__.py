"""tinyinfer: a transformer inference runtime in NumPy (CuPy on a GPU) that is also a course."""

__version__ = "0.1.0"

from tinyinfer.errors import TinyInferError  # noqa: E402
from tinyinfer.generation import generate  # noqa: E402
from tinyinfer.loading import load  # noqa: E402
from tinyinfer.sampling import SamplingParams  # noqa: E402
from tinyinfer.tokenizer import Tokenizer  # noqa: E402

__all__ = ["SamplingParams", "TinyInferError", "Tokenizer", "__version__", "generate", "load"]
