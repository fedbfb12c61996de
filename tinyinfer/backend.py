"""The array seam: the only file that knows whether arrays live on the CPU (NumPy) or a GPU (CuPy).

Every other module does `from tinyinfer.backend import xp_of, get_xp` and never imports CuPy. The CPU path
needs no GPU package installed.

    >>> xp = get_xp("cpu"); xp.__name__
    'numpy'
"""

from __future__ import annotations

import contextlib
import mmap
import sys

import numpy as np

from tinyinfer.errors import TinyInferError

DEVICES = ("cpu", "cuda")


def get_xp(device: str = "cpu"):
    """Return the array module for a device: numpy for "cpu", cupy for "cuda"."""
    if device == "cpu":
        return np
    if device == "cuda":
        return _cupy()
    raise TinyInferError(f"unknown device {device!r}: use one of {', '.join(DEVICES)}")


_cuda_standin = None  # a module with CuPy's surface that tests put in CuPy's place (tests/strict_cupy.py)


@contextlib.contextmanager
def cuda_module(module):
    """Run device "cuda" on `module` instead of CuPy while the block runs: how the tests put their strict CuPy
    stand-in behind `device="cuda"` on a machine without a GPU (the code under test cannot tell)."""
    global _cuda_standin
    previous, _cuda_standin = _cuda_standin, module
    try:
        yield module
    finally:
        _cuda_standin = previous


def _cupy():
    if _cuda_standin is not None:
        return _cuda_standin
    try:
        import cupy  # noqa: PLC0415 - the one place CuPy is imported
    except ImportError as e:
        raise TinyInferError(
            "device 'cuda' needs CuPy: install it with `pip install tinyinfer[gpu]` (CUDA 12), or use --device cpu"
        ) from e
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CuPy raises its own CUDARuntimeError when no driver is present
        raise TinyInferError(f"device 'cuda' asked for but no usable NVIDIA GPU was found ({e}); use --device cpu") from e
    if count == 0:
        raise TinyInferError("device 'cuda' asked for but no NVIDIA GPU was found; use --device cpu")
    return cupy


def synchronize(xp) -> None:
    """Wait for the work queued on the device (a no-op for NumPy): a GPU call returns before its kernels have
    run, so a timer must wait for them."""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one GPU (used to skip GPU tests)."""
    try:
        _cupy()
        return True
    except TinyInferError:
        return False


def is_array(value) -> bool:
    """A NumPy array or a device array (CuPy's ndarray), not another object that holds arrays (a quantised
    weight's blocks, a LoRA-wrapped weight)."""
    if isinstance(value, np.ndarray):
        return True
    cupy = _cuda_standin or sys.modules.get("cupy")  # a device array exists only once CuPy is imported
    return cupy is not None and isinstance(value, cupy.ndarray)


def xp_of(array):
    """The array module an array belongs to (numpy or cupy)."""
    return np if isinstance(array, np.ndarray) or np.isscalar(array) else _cupy()


def to_device(array: np.ndarray, device: str):
    """Move a NumPy array to `device` (a no-op on the CPU)."""
    return array if device == "cpu" else get_xp(device).asarray(array)


def to_numpy(array) -> np.ndarray:
    """Bring an array back to host memory as NumPy (a no-op for NumPy arrays)."""
    return array if isinstance(array, np.ndarray) else array.get()


def zeros_in_small_pages(shape: tuple[int, ...], dtype, xp=np):
    """Zeros for memory that is written a little at a time, such as a KV cache: on the CPU, in the operating
    system's small (4 KiB) pages, mapped one by one as they are first written. On a GPU: `xp.zeros`.

    NumPy asks Linux for 2 MiB huge pages behind every array of 4 MiB or more, which spares the TLB when an
    array is read whole (the weights, every step). A KV cache is written a token or a block at a time, spread
    over its layers and heads, and the first write into each 2 MiB page makes the kernel find, often by
    compacting memory, a whole free 2 MiB: about 0.7 ms a page, 1.5 s of system time for the first 200 blocks
    of a 135M model's pool, where small pages take 0.07 s. An anonymous memory map starts zero-filled and is
    never advised into huge pages (and is advised out of them where the system would give them anyway).

    >>> zeros_in_small_pages((2, 3), np.float32).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    if xp is not np:
        return xp.zeros(shape, dtype=dtype)
    count = int(np.prod(shape))
    pages = mmap.mmap(-1, max(count * np.dtype(dtype).itemsize, 1))  # zero-filled, mapped on first write
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux: small pages even where huge ones are the default
        pages.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(pages, dtype=dtype, count=count).reshape(shape)  # the array keeps the map alive
