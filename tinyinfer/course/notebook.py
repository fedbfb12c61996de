"""What the notebooks run on: the built-in `shakespeare` model, which ships inside the package.

It loads and generates in well under a second on a laptop CPU, so every notebook runs top to bottom in
under a minute, with no download and no shared data.
"""

from __future__ import annotations

import tinyinfer
from tinyinfer.resolve import DEFAULT_MODEL


def course_model(device: str = "cpu"):
    """Load the model the notebooks use."""
    return tinyinfer.load(DEFAULT_MODEL, device=device)
