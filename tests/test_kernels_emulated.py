"""tinyinfer's CUDA kernels (tinyinfer/kernels.py's RawKernels) run on the CPU by a small CUDA emulator, against the
array code they replace: no GPU has run them, so their indexing, barriers and reductions are checked here.

The emulator (tests/cuda_emulator.h) compiles the kernel's CUDA C as C++ with a thread per CUDA thread; it needs a
C++20 compiler (g++ or clang++), and the tests skip with the reason where there is none. Tolerance: the kernels sum
in float32 in another order than NumPy's products: rounding_bound over the longest sum (tests/tolerances.py).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tolerances import assert_close, rounding_bound

from tinyinfer.attention import decode_attention, decode_mask
from tinyinfer.kernels import (DECODE_MATMUL_ROWS, DECODE_MATMUL_SOURCE, DECODE_MATMUL_SPLITS, DECODE_MATMUL_THREADS,
                               PAGED_ATTENTION_THREADS, paged_attention_source)

COMPILER = shutil.which("g++") or shutil.which("clang++")
EMULATOR = Path(__file__).with_name("cuda_emulator.h")
C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float16): "__half", np.dtype(np.int64): "long long"}

pytestmark = pytest.mark.skipif(COMPILER is None, reason="the CUDA emulator needs a C++20 compiler (g++ or clang++)")


def emulate(source: str, kernel: str, grid: tuple, block: int, args: list, folder: Path) -> None:
    """Run `kernel` of the CUDA C `source` on grid x block threads; array arguments are written back in place."""
    lines, call = [], []
    for i, arg in enumerate(args):
        if isinstance(arg, np.ndarray):
            np.ascontiguousarray(arg).tofile(folder / f"a{i}.bin")
            lines.append(f'auto a{i} = load<{C_TYPES[arg.dtype]}>("{folder}/a{i}.bin", {arg.size});')
            call.append(f"a{i}.data()")
        else:
            call.append(f"({'int' if isinstance(arg, np.int32) else 'float'})({float(arg).hex() if isinstance(arg, np.float32) else int(arg)})")
    saves = [f'save("{folder}/a{i}.bin", a{i});' for i, arg in enumerate(args) if isinstance(arg, np.ndarray)]
    grid = tuple(grid) + (1,) * (3 - len(grid))
    program = (f'#include "{EMULATOR}"\n' + source.replace("#include <cuda_fp16.h>", "") +
               "\nint main() {\n" + "\n".join(lines) +
               f"\nlaunch({{{grid[0]}, {grid[1]}, {grid[2]}}}, {{{block}}}, [&] {{ {kernel}({', '.join(call)}); }});\n" +
               "\n".join(saves) + "\n}\n")
    (folder / "kernel.cpp").write_text(program)
    subprocess.run([COMPILER, "-std=c++20", "-O0", "-pthread", "-w", str(folder / "kernel.cpp"), "-o",
                    str(folder / "kernel")], check=True)
    subprocess.run([str(folder / "kernel")], check=True, timeout=120)
    for i, arg in enumerate(args):
        if isinstance(arg, np.ndarray):
            arg[...] = np.fromfile(folder / f"a{i}.bin", dtype=arg.dtype).reshape(arg.shape)


@pytest.mark.parametrize("x_dtype, w_dtype", [(np.float32, np.float32), (np.float32, np.float16)])
def test_decode_matmul_kernels_compute_x_at_w_in_both_layouts(x_dtype, w_dtype, tmp_path):
    """Both kernels of `decode_matmul`, on shapes that fill none of their tiles: rows not a multiple of ROWS, columns
    not of the warps or threads of a block, K not of the split-K slices."""
    rng = np.random.default_rng(0)
    M, K, N = 11, 200, 77
    x, w = rng.standard_normal((M, K)).astype(x_dtype), rng.standard_normal((K, N)).astype(w_dtype)
    want = x.astype(np.float64) @ w.astype(np.float64)
    source = f"#define X_T {C_TYPES[x.dtype]}\n#define W_T {C_TYPES[w.dtype]}\n" + DECODE_MATMUL_SOURCE
    rows, warps = -(-M // DECODE_MATMUL_ROWS), DECODE_MATMUL_THREADS // 32
    columns_out = np.zeros((M, N), dtype=np.float32)
    emulate(source, "matmul_columns", (-(-N // warps), rows), DECODE_MATMUL_THREADS,
            [x, np.ascontiguousarray(w.T), columns_out, np.int32(M), np.int32(K), np.int32(N)], tmp_path)  # F order
    partial = np.zeros((DECODE_MATMUL_SPLITS, M, N), dtype=np.float32)
    emulate(source, "matmul_rows", (-(-N // DECODE_MATMUL_THREADS), rows, DECODE_MATMUL_SPLITS), DECODE_MATMUL_THREADS,
            [x, w, partial, np.int32(M), np.int32(K), np.int32(N), np.int32(-(-K // DECODE_MATMUL_SPLITS))], tmp_path)
    bound = rounding_bound(np.float32, np.abs(want).max(), K)
    assert_close(columns_out, want, bound)
    assert_close(partial.sum(axis=0), want, bound)


@pytest.mark.parametrize("window, softcap, sinks, kv_dtype", [(0, 0.0, False, np.float32), (3, 5.0, True, np.float16)])
def test_paged_attention_kernel_equals_decode_attention_over_the_gathered_blocks(window, softcap, sinks, kv_dtype,
                                                                                tmp_path):
    """Sequences of 1, 5 and 11 tokens in blocks of 4 (one, two and three blocks of a 3-wide table), grouped heads,
    a sliding window, a soft cap and attention sinks: the kernel reads the pool through the block table as the array
    code reads its gathered copy."""
    rng = np.random.default_rng(1)
    B, H, KV, hd, N, bs = 3, 4, 2, 16, 7, 4
    q = rng.standard_normal((B, H, hd)).astype(np.float32)
    k_pool, v_pool = (rng.standard_normal((KV, N, bs, hd)).astype(kv_dtype) for _ in range(2))
    tables = np.array([[5, 0, 0], [2, 6, 0], [1, 3, 4]], dtype=np.int64)
    lengths = np.array([1, 5, 11], dtype=np.int64)
    sink_logits = rng.standard_normal(H).astype(np.float32)
    n, scale = tables.shape[1], hd ** -0.5
    out = np.zeros((B, H, hd), dtype=np.float32)
    scores = np.zeros((B, H, n * bs), dtype=np.float32)
    emulate(paged_attention_source("float32", str(np.dtype(kv_dtype))), "paged_decode_attention", (B, H),
            PAGED_ATTENTION_THREADS,
            [q, k_pool, v_pool, tables, lengths, sink_logits, scores, out, np.int32(H), np.int32(KV), np.int32(N),
             np.int32(bs), np.int32(hd), np.int32(n), np.int32(window), np.float32(scale), np.float32(softcap),
             np.int32(sinks)], tmp_path)
    keys, values = (pool.astype(np.float32).take(tables, axis=1).reshape(KV, B, n * bs, hd) for pool in (k_pool, v_pool))
    want = decode_attention(q, keys, values, decode_mask(lengths, n * bs, window or None), scale, softcap or None,
                            sink_logits if sinks else None)
    assert_close(out.reshape(B, H * hd), want, rounding_bound(np.float32, np.abs(want).max(), n * bs, depth=2))
