"""A strict stand-in for CuPy: the GPU path's mistakes, caught on a machine without a GPU.

CuPy keeps its arrays in device memory, and refuses what would silently copy them to the host or mix them with
host arrays. Code written on NumPy usually makes those mistakes without noticing, because NumPy accepts them.
This module has CuPy's surface (the functions tinyinfer's array code may call, `ndarray.get()`, `asnumpy`,
`cuda.get_current_stream().synchronize()`), keeps each array as a host NumPy array wrapped in a type of its own,
and refuses exactly what CuPy refuses:

- `np.asarray(device_array)` (implicit conversion to NumPy): TypeError, as CuPy's `__array__` raises;
- a NumPy array mixed into an expression or a call with device arrays: TypeError ("Unsupported type");
- a function CuPy does not have (the allow-list below, kept from CuPy's API reference), called as `xp.name` or
  reached through NumPy's dispatch (`np.name(device_array)`): AttributeError / TypeError.

What CuPy allows but costs a device-to-host synchronisation is counted, not refused: `.get()`, `asnumpy`,
`float(x)`, `int(x)`, `bool(x)`, `x.item()` and `x.tolist()`. Host-to-device copies (`asarray` of host data) are
counted too, so a test can assert how many bytes cross per decode step.

Tests select it through backend.py, the way a user selects CUDA:

    >>> from tinyinfer import backend
    >>> with backend.cuda_module(strict_cupy):
    ...     model = tinyinfer.load("shakespeare", device="cuda")

CUDA graphs (`stream.begin_capture()` ... `graph = stream.end_capture()`, `graph.launch(stream)`) are modelled
strictly, as CUDA's stream capture and CuPy treat them. While a stream captures, each operation run on it is
recorded on the stream's tape as well as run; `graph.launch()` replays the tape: every recorded operation is
computed again from the arrays it read, as they are now, and written into the very arrays it wrote the first time
(the same "addresses"), so a graph's outputs change when its static input buffers are copied into, and only then.
(This is the test double's model of a replay: a GPU re-runs the recorded kernels on the recorded pointers; it does
not re-run Python.) During capture, what CUDA or CuPy refuse raises here too, with their messages:

- a synchronisation (`stream.synchronize()`, `.get()`, `asnumpy`, `float(x)`, `x.item()`, `bool(x)`...) or a copy of
  host data to the device (`asarray(host)`, a host index array): cudaErrorStreamCaptureUnsupported, and the
  capture is invalidated (`end_capture` raises cudaErrorStreamCaptureInvalidated), as in CUDA;
- a function whose result's shape depends on the data (nonzero, unique, boolean-mask indexing...): RuntimeError,
  as CuPy raises (it would have to read a count back from the device);
- a floating-point matrix product (matmul, `@`, dot, einsum...): NotImplementedError, as CuPy 13 and 14 raise
  ("calling cuBLAS API during stream capture is currently unsupported");
- work run while a capture is under way on a stream that is not the current one: RuntimeError (on a GPU it would
  run at once and be missing from the graph).

After `end_capture` every floating-point array the capture created holds NaN until the graph is launched: on a GPU
nothing ran yet. Captures and launches are counted (`transfers.captures`, `transfers.graph_launches`). Not modelled:
device memory (a graph's private memory pool, addresses reused by later allocations), the values of arrays that
existed before the capture and that it wrote (here computed at once; on a GPU unchanged until the launch), timing,
and kernels.

On a machine with a real GPU the GPU tests use CuPy itself, unchanged.
"""

from __future__ import annotations

import builtins
import contextlib
import operator
import sys
import types
from dataclasses import dataclass

import numpy as np

# ---------------------------------------------------------------------------------------------------------------------
# The transfer counter
# ---------------------------------------------------------------------------------------------------------------------

@dataclass
class Transfers:
    """What crossed between host and device since the last reset."""

    to_device_calls: int = 0
    to_device_bytes: int = 0
    to_host_calls: int = 0
    to_host_bytes: int = 0
    scalar_syncs: int = 0  # float(x), int(x), bool(x), x.item(): each one waits for the device
    synchronizes: int = 0
    captures: int = 0  # CUDA graphs captured (stream.end_capture)
    graph_launches: int = 0  # and launched (graph.launch)

    def reset(self) -> None:
        self.__init__()


transfers = Transfers()


# ---------------------------------------------------------------------------------------------------------------------
# CuPy's namespace (top-level functions tinyinfer may call; from CuPy's API reference, v13)
# ---------------------------------------------------------------------------------------------------------------------

FUNCTIONS = frozenset("""
abs absolute add all allclose amax amin angle any append arange arccos arccosh arcsin arcsinh arctan arctan2 arctanh
argmax argmin argpartition argsort argwhere around array array_equal array_split asanyarray asarray ascontiguousarray
asfortranarray atleast_1d atleast_2d atleast_3d average bincount bitwise_and bitwise_not bitwise_or bitwise_xor
broadcast_arrays broadcast_to cbrt ceil choose clip column_stack compress concatenate conj conjugate copy copysign
copyto cos cosh count_nonzero cov cumprod cumsum deg2rad degrees diag diagflat diagonal diff digitize divide divmod
dot dsplit dstack einsum empty empty_like equal exp exp2 expand_dims expm1 extract eye fabs fill_diagonal flatnonzero
flip fliplr flipud float_power floor floor_divide fmax fmin fmod frexp frombuffer fromfunction fromiter full
full_like gcd greater greater_equal heaviside histogram hsplit hstack hypot identity imag inner interp intersect1d
invert isclose iscomplex isfinite isin isinf isnan isreal isscalar kron lcm ldexp left_shift less less_equal
linspace log log10 log1p log2 logaddexp logaddexp2 logical_and logical_not logical_or logical_xor logspace matmul
max maximum mean median meshgrid min minimum mod moveaxis multiply nan_to_num nanargmax nanargmin nancumsum nanmax
nanmean nanmin nanprod nanstd nansum nanvar ndim negative nextafter nonzero not_equal ones ones_like outer packbits
pad partition percentile place positive power prod ptp put put_along_axis quantile rad2deg radians ravel real
reciprocal remainder repeat require reshape resize result_type right_shift rint roll rollaxis rot90 round
searchsorted select shape sign signbit sin sinc sinh size sort split sqrt square squeeze stack std subtract sum
swapaxes take take_along_axis tan tanh tensordot tile trace transpose trapz tri tril tril_indices triu triu_indices
true_divide trunc union1d unique unpackbits unravel_index var vdot vsplit vstack where zeros zeros_like
can_cast promote_types dtype finfo iinfo issubdtype
""".split())

# Types and constants CuPy re-exports from NumPy unchanged.
PASSTHROUGH = frozenset("""
bool_ int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 complex64 complex128 intp uintp
integer floating number signedinteger unsignedinteger inexact generic e pi inf nan newaxis
""".split())

# Functions whose array arguments CuPy takes only as device arrays (a Python scalar is refused), by position.
DEVICE_ONLY_ARGS = {"searchsorted": ("a", "v")}

# NumPy's dispatch reaches a device array under the function's own name; a few names differ from the namespace's.
_DISPATCH_ALIASES = {"round_": "round", "amax": "max", "amin": "min", "concat": "concatenate"}


def _refuse_host(value, where: str):
    if isinstance(value, np.ndarray):
        raise TypeError(f"Unsupported type {type(value)} in {where}: a NumPy array mixed with device arrays "
                        "(move it with cupy.asarray first)")


def _unwrap(value, where: str):
    """Device arrays -> their host array; a NumPy array -> TypeError; containers recursively."""
    if isinstance(value, ndarray):
        return value._host
    _refuse_host(value, where)
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, where) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v, where) for k, v in value.items()}
    return value


def _wrap(value):
    if isinstance(value, np.ndarray):
        return ndarray(value)
    if isinstance(value, np.generic):
        return ndarray(np.asarray(value))  # CuPy returns 0-d device arrays, never NumPy scalars
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


def _call(fn, name: str, args, kwargs):
    for position, arg_name in enumerate(DEVICE_ONLY_ARGS.get(name, ())):
        value = args[position] if position < len(args) else kwargs.get(arg_name)
        if not isinstance(value, ndarray):
            raise NotImplementedError(f"Only int or ndarray are supported for {arg_name} (cupy.{name})")
    if _capturing:
        _check_capturable(name.removeprefix("ndarray."), args, kwargs)
    return _run(lambda: fn(*_unwrap(args, name), **_unwrap(kwargs, name)), (args, kwargs),
                record=name not in ALLOCATIONS)


# ---------------------------------------------------------------------------------------------------------------------
# Stream capture: the tape a capturing stream records, and what CUDA and CuPy refuse while it records
# ---------------------------------------------------------------------------------------------------------------------

class CUDARuntimeError(RuntimeError):
    """CuPy's cupy_backends.cuda.api.runtime.CUDARuntimeError."""


CAPTURE_UNSUPPORTED = "cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing"
# Functions whose result's size CuPy must read back from the device (a synchronisation): refused while capturing.
DATA_DEPENDENT_SHAPES = frozenset("argwhere bincount compress extract flatnonzero histogram intersect1d nonzero "
                                  "union1d unique".split())
# Floating-point products CuPy hands to cuBLAS, which it refuses to call while capturing (CuPy 13, 14).
CUBLAS = frozenset("dot einsum inner matmul tensordot vdot".split())
ALLOCATIONS = frozenset({"empty", "empty_like"})  # memory only: no kernel to record


class _Tape:
    """What a capturing stream recorded: (recompute, the arrays it wrote) per operation, in order."""

    def __init__(self):
        self.ops: list[tuple] = []
        self.created: list[ndarray] = []  # the arrays the capture allocated
        self.invalidated: str | None = None  # why CUDA invalidated the capture, if it did


_streams: list = []  # the `with stream:` stack: its top is the current stream
_capturing: list = []  # the streams capturing now


def _tape():
    """The tape the work about to run is recorded on, or None when no stream captures."""
    if not _capturing:
        return None
    stream = _streams[-1] if _streams else None
    if stream is None or stream._tape is None:
        raise RuntimeError("work queued on a stream that is not capturing while a capture is under way: on a GPU "
                           "it would run at once and be missing from the graph (queue it inside `with stream:`)")
    return stream._tape


def _refuse_in_capture(what: str) -> None:
    """A synchronisation or a host-to-device copy while a stream captures: CUDA refuses it and invalidates the
    capture."""
    if _capturing:
        for stream in _capturing:
            stream._tape.invalidated = what
        raise CUDARuntimeError(f"{CAPTURE_UNSUPPORTED} ({what})")


def _check_capturable(name: str, args, kwargs) -> None:
    if name in DATA_DEPENDENT_SHAPES or (name == "where" and len(args) + len(kwargs) == 1):
        raise RuntimeError(f"cupy.{name} needs a synchronisation (its result's size depends on the data), which "
                           "is not allowed while the stream is capturing")
    if name in CUBLAS and any(h.dtype.kind in "fc" for h in _hosts((args, kwargs))):
        raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported "
                                  f"(cupy.{name} of floating-point arrays)")


def _hosts(value):
    """The host arrays of the device arrays in an argument structure."""
    if isinstance(value, ndarray):
        yield value._host
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _hosts(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _hosts(v)


def _devices(value):
    if isinstance(value, ndarray):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _devices(v)


def _run(compute, inputs, record: bool = True):
    """Run one operation (`compute` returns host values) and, while a stream captures, record it on the tape."""
    result = _wrap(compute())
    tape = _tape()
    if tape is not None and record:
        tape.ops.append((compute, result))
        read = list(_hosts(inputs))
        tape.created += [r for r in _devices(result) if not any(np.may_share_memory(r._host, h) for h in read)]
    return result


def _store(result, host) -> None:
    """A replayed operation's values into the arrays it wrote at capture (a view of them already sees them)."""
    if isinstance(result, ndarray):
        host = np.asarray(host)
        if not np.may_share_memory(result._host, host):
            np.copyto(result._host, host)
    elif isinstance(result, (tuple, list)):
        for r, h in zip(result, host):
            _store(r, h)


class Graph:
    """cupy.cuda.Graph: what a capture recorded, replayed by `launch` (see the module docstring)."""

    def __init__(self, ops: list):
        self._ops = ops

    def upload(self, stream=None) -> None:
        pass

    def launch(self, stream=None) -> None:
        if _capturing:
            raise CUDARuntimeError(f"{CAPTURE_UNSUPPORTED} (a graph launched while a stream captures)")
        transfers.graph_launches += 1
        for compute, result in self._ops:
            _store(result, compute())


# ---------------------------------------------------------------------------------------------------------------------
# The device array
# ---------------------------------------------------------------------------------------------------------------------

class ndarray:  # noqa: N801 - CuPy's own name
    """A device array: a host NumPy array that refuses to be used as one."""

    __slots__ = ("_host",)
    __array_priority__ = 100

    def __init__(self, host: np.ndarray):
        self._host = host

    # What CuPy refuses ---------------------------------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc.__name__ not in FUNCTIONS and ufunc.__name__ not in _DISPATCH_ALIASES:
            return NotImplemented
        return _call(getattr(ufunc, method), ufunc.__name__, inputs, kwargs)

    def __array_function__(self, func, types_, args, kwargs):
        name = _DISPATCH_ALIASES.get(func.__name__, func.__name__)
        if name not in FUNCTIONS:
            raise TypeError(f"numpy.{func.__name__} has no CuPy implementation: it cannot take a device array")
        return _call(func, name, args, kwargs)

    # What CuPy allows at the cost of a synchronisation -------------------------------------------------------------
    def get(self, stream=None, order="C", out=None) -> np.ndarray:
        _refuse_in_capture("a device-to-host copy, .get()")
        transfers.to_host_calls += 1
        transfers.to_host_bytes += self._host.nbytes
        return self._host.copy()

    def item(self):
        _refuse_in_capture("a scalar read back to the host")
        transfers.scalar_syncs += 1
        return self._host.item()

    def tolist(self):
        _refuse_in_capture("a device-to-host copy, .tolist()")
        transfers.to_host_calls += 1
        transfers.to_host_bytes += self._host.nbytes
        return self._host.tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._host.ndim != 0 or self._host.dtype.kind not in "iub":
            raise TypeError("only integer scalar arrays can be converted to a scalar index")
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __complex__(self):
        return complex(self.item())

    def set(self, arr, stream=None) -> None:
        """Copy a host array into this device array's memory (CuPy's ndarray.set): same shape and dtype."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, not {type(arr).__name__}")
        if arr.shape != self._host.shape or arr.dtype != self._host.dtype:
            raise ValueError(f"a {arr.dtype}{list(arr.shape)} array cannot be set to a "
                             f"{self._host.dtype}{list(self._host.shape)} one")
        _count_to_device(arr)
        np.copyto(self._host, arr)

    # Attributes and methods: those of the host array, results kept on the device ------------------------------------
    shape = property(lambda self: self._host.shape)
    dtype = property(lambda self: self._host.dtype)
    ndim = property(lambda self: self._host.ndim)
    size = property(lambda self: self._host.size)
    nbytes = property(lambda self: self._host.nbytes)
    itemsize = property(lambda self: self._host.itemsize)
    strides = property(lambda self: self._host.strides)
    flags = property(lambda self: self._host.flags)
    T = property(lambda self: ndarray(self._host.T))
    real = property(lambda self: ndarray(self._host.real))
    imag = property(lambda self: ndarray(self._host.imag))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        attribute = getattr(self._host, name)  # AttributeError as NumPy's (CuPy's methods are NumPy's)
        if not callable(attribute):
            return _wrap(attribute)
        return lambda *args, **kwargs: _call(attribute, f"ndarray.{name}", args, kwargs)

    def __len__(self):
        return len(self._host)

    def __iter__(self):
        return (ndarray(np.asarray(row)) for row in self._host)

    def __repr__(self):
        return f"array({self._host!r}, device='strict-cupy')"

    def __getitem__(self, key):
        if _capturing and any(k.dtype == np.bool_ for k in _devices(key if isinstance(key, tuple) else (key,))):
            raise RuntimeError("indexing with a boolean mask needs a synchronisation (the result's size depends on "
                               "the data), which is not allowed while the stream is capturing")
        return _run(lambda: self._host[_unwrap_index(key)], (self, key))

    def __setitem__(self, key, value):
        def assign():
            self._host[_unwrap_index(key)] = _unwrap_value(value)
        _run(assign, (self, key, value))

    def __reduce__(self):
        raise TypeError("a device array is not pickled here: bring it to the host with .get()")


def _unwrap_index(key):
    """CuPy accepts host index arrays (it copies them to the device): count them, unwrap device ones."""
    if isinstance(key, tuple):
        return tuple(_unwrap_index(k) for k in key)
    if isinstance(key, ndarray):
        return key._host
    if isinstance(key, np.ndarray):
        _count_to_device(key)
    return key


def _unwrap_value(value):
    """`device[...] = value`: CuPy copies a host array in (counted) and takes a device array as it is."""
    if isinstance(value, ndarray):
        return value._host
    if isinstance(value, np.ndarray):
        _count_to_device(value)
    return value


def _binary(op, reflected=False):
    def method(self, other):
        if isinstance(other, np.ndarray):
            _refuse_host(other, f"the operator {op.__name__}")
        if not isinstance(other, (ndarray, builtins.int, builtins.float, builtins.bool, builtins.complex, np.generic)):
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        if _capturing:
            _check_capturable(op.__name__, (a, b), {})
        return _run(lambda: op(_unwrap(a, op.__name__), _unwrap(b, op.__name__)), (a, b))
    return method


def _inplace(op):
    def method(self, other):
        _refuse_host(other, f"the operator {op.__name__}")
        if _capturing:
            _check_capturable(op.__name__.removeprefix("i"), (self, other), {})
        _run(lambda: op(self._host, _unwrap(other, op.__name__)), (self, other))  # NumPy's in-place ops keep the buffer
        return self
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
              "rshift"):
    _op = getattr(operator, _name + ("_" if _name in ("and", "or") else ""))
    setattr(ndarray, f"__{_name}__", _binary(_op))
    setattr(ndarray, f"__r{_name}__", _binary(_op, reflected=True))
    setattr(ndarray, f"__i{_name}__", _inplace(getattr(operator, f"i{_name}")))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(ndarray, f"__{_name}__", _binary(getattr(operator, _name)))
for _name in ("neg", "pos", "abs", "invert"):
    setattr(ndarray, f"__{_name}__", (lambda op: lambda self: _run(lambda: op(self._host), self))(getattr(operator, _name)))
ndarray.__hash__ = None


# ---------------------------------------------------------------------------------------------------------------------
# Module functions
# ---------------------------------------------------------------------------------------------------------------------

def _count_to_device(host) -> None:
    _refuse_in_capture("a host-to-device copy")
    transfers.to_device_calls += 1
    transfers.to_device_bytes += np.asarray(host).nbytes


def asarray(a, dtype=None, order=None):
    """Host data -> a device array (a counted copy); a device array stays where it is."""
    if isinstance(a, ndarray):
        return a if dtype is None else _run(lambda: a._host.astype(dtype, copy=False), a)
    if isinstance(a, (list, tuple)) and any(isinstance(v, ndarray) for v in a):
        return stack([asarray(v, dtype) for v in a])  # CuPy accepts a sequence of device arrays
    host = np.array(a, dtype=dtype, order=order or "K", copy=True)
    _count_to_device(host)
    return ndarray(host)


def array(a, dtype=None, copy=True, order="K", ndmin=0):
    out = asarray(a, dtype)
    return _run(lambda: np.array(out._host, copy=copy, order=order, ndmin=ndmin), out)


def asnumpy(a, stream=None, order="C", out=None) -> np.ndarray:
    return a.get() if isinstance(a, ndarray) else np.asarray(a, order=order)


def get_array_module(*args):
    return _this if any(isinstance(a, ndarray) for a in args) else np


def fuse(*args, **kwargs):
    """cupy.fuse: the stand-in runs the Python function as it is (the fusion is CuPy's business)."""
    if args and callable(args[0]):
        return args[0]
    return lambda fn: fn


def __getattr__(name):
    if name in PASSTHROUGH:
        return getattr(np, name)
    if name in FUNCTIONS:
        fn = getattr(np, _DISPATCH_ALIASES.get(name, name))
        return fn if not callable(fn) or isinstance(fn, type) else (lambda *a, **k: _call(fn, name, a, k))
    raise AttributeError(f"module 'cupy' has no attribute {name!r} (the strict stand-in's allow-list follows CuPy's)")


# ---------------------------------------------------------------------------------------------------------------------
# cupy.cuda: streams (and their capture into graphs), synchronisation, memory pools and the device count
# ---------------------------------------------------------------------------------------------------------------------

class Stream:
    """A CUDA stream: `with stream:` makes it current; `synchronize()` counts (and is refused while capturing);
    `begin_capture()` ... `end_capture()` records the work run on it into a Graph (see the module docstring)."""

    null: Stream  # the legacy default stream, which cannot capture

    def __init__(self, null=False, non_blocking=False, ptds=False):
        self.non_blocking = non_blocking
        self._tape: _Tape | None = None

    def __enter__(self):
        _streams.append(self)
        return self

    def __exit__(self, *exc):
        _streams.pop()
        return False

    def synchronize(self) -> None:
        _refuse_in_capture("a stream synchronisation")
        transfers.synchronizes += 1

    def use(self):
        _streams[:] = [self]
        return self

    def begin_capture(self, mode=None) -> None:
        if self is Stream.null:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if self._tape is not None:
            raise CUDARuntimeError("cudaErrorIllegalState: the stream is already capturing")
        self._tape = _Tape()
        _capturing.append(self)

    def end_capture(self) -> Graph:
        if self._tape is None:
            raise CUDARuntimeError("cudaErrorIllegalState: the stream is not capturing")
        tape, self._tape = self._tape, None
        _capturing.remove(self)
        if tape.invalidated:
            raise CUDARuntimeError(f"cudaErrorStreamCaptureInvalidated: the capture was invalidated ({tape.invalidated})")
        for array in tape.created:  # on a GPU nothing has run yet: what the capture allocated holds no values
            if array._host.dtype.kind in "fc":
                array._host.fill(np.nan)
        transfers.captures += 1
        return Graph(tape.ops)

    def is_capturing(self) -> bool:
        return self._tape is not None


Stream.null = Stream(null=True)


class _Device:
    def __init__(self, device_id: int = 0):
        self.id = device_id

    def synchronize(self) -> None:
        _refuse_in_capture("a device synchronisation")
        transfers.synchronizes += 1

    def use(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class MemoryPool:
    """cupy.cuda.MemoryPool: the stand-in keeps no device memory, so a pool only hands out the allocator."""

    def malloc(self, size: int):
        raise NotImplementedError("the strict stand-in does not model device memory")

    def used_bytes(self) -> int:
        return 0

    def free_all_blocks(self) -> None:
        pass


@contextlib.contextmanager
def _using_allocator(allocator=None):
    yield


cuda = types.SimpleNamespace(
    get_current_stream=lambda device_id=-1: _streams[-1] if _streams else Stream.null,
    Stream=Stream,
    Graph=Graph,
    Device=_Device,
    MemoryPool=MemoryPool,
    using_allocator=_using_allocator,
    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1, CUDARuntimeError=CUDARuntimeError,
                                  streamCaptureModeRelaxed=2),
    is_available=lambda: True,
)

_this = sys.modules[__name__]
