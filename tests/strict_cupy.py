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

On a machine with a real GPU the GPU tests use CuPy itself, unchanged.
"""

from __future__ import annotations

import builtins
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
    return _wrap(fn(*_unwrap(args, name), **_unwrap(kwargs, name)))


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
        transfers.to_host_calls += 1
        transfers.to_host_bytes += self._host.nbytes
        return self._host.copy()

    def item(self):
        transfers.scalar_syncs += 1
        return self._host.item()

    def tolist(self):
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
        return _wrap(self._host[_unwrap_index(key)])

    def __setitem__(self, key, value):
        self._host[_unwrap_index(key)] = _unwrap_value(value)

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
        return _wrap(op(_unwrap(a, op.__name__), _unwrap(b, op.__name__)))
    return method


def _inplace(op):
    def method(self, other):
        _refuse_host(other, f"the operator {op.__name__}")
        self._host = op(self._host, _unwrap(other, op.__name__))  # NumPy's in-place ops keep the same buffer
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
    setattr(ndarray, f"__{_name}__", (lambda op: lambda self: ndarray(op(self._host)))(getattr(operator, _name)))
ndarray.__hash__ = None


# ---------------------------------------------------------------------------------------------------------------------
# Module functions
# ---------------------------------------------------------------------------------------------------------------------

def _count_to_device(host) -> None:
    transfers.to_device_calls += 1
    transfers.to_device_bytes += np.asarray(host).nbytes


def asarray(a, dtype=None, order=None):
    """Host data -> a device array (a counted copy); a device array stays where it is."""
    if isinstance(a, ndarray):
        return a if dtype is None else ndarray(a._host.astype(dtype, copy=False))
    if isinstance(a, (list, tuple)) and any(isinstance(v, ndarray) for v in a):
        return stack([asarray(v, dtype) for v in a])  # CuPy accepts a sequence of device arrays
    host = np.array(a, dtype=dtype, order=order or "K", copy=True)
    _count_to_device(host)
    return ndarray(host)


def array(a, dtype=None, copy=True, order="K", ndmin=0):
    out = asarray(a, dtype)
    out = ndarray(np.array(out._host, copy=copy, order=order, ndmin=ndmin))
    return out


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
# cupy.cuda: streams, synchronisation and the device count, as counted no-ops
# ---------------------------------------------------------------------------------------------------------------------

class _Synchronizing:
    """A stream or a device: `synchronize()` counts, and either works as a context manager."""

    def __init__(self, device_id: int = 0):
        self.id = device_id

    def synchronize(self) -> None:
        transfers.synchronizes += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


cuda = types.SimpleNamespace(
    get_current_stream=_Synchronizing,
    Stream=lambda non_blocking=False: _Synchronizing(),
    Device=_Synchronizing,
    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
    is_available=lambda: True,
)

_this = sys.modules[__name__]
