"""What the notebooks run on: the built-in model when its weights ship, else a small real checkpoint.

The fallback is Karpathy's 260K-parameter TinyStories model in the project's shared test data
(../shared/data beside the checkout, or the folder named by TINYINFER_SHARED_DATA). Either loads and
generates in well under a second on a laptop CPU, so every notebook runs top to bottom in under a minute.
"""

from __future__ import annotations

import tinyinfer
from tinyinfer.course.workspace import project_root, shared_data_dir
from tinyinfer.errors import TinyInferError
from tinyinfer.resolve import DEFAULT_MODEL, builtin_models

FALLBACK = "models/stories260K/stories260K.bin"


def course_model(device: str = "cpu"):
    """Load the model the notebooks use."""
    if DEFAULT_MODEL in builtin_models():
        return tinyinfer.load(DEFAULT_MODEL, device=device)
    path = shared_data_dir(project_root()) / FALLBACK
    if not path.is_file():
        raise TinyInferError(f"the built-in model {DEFAULT_MODEL!r} has no weights and {path} is absent: "
                             "train it with weights_scripts/ or put the shared data beside the checkout")
    return tinyinfer.load(path, device=device)
