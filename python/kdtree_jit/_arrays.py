"""Device arrays: torch tensors or anything with ``__cuda_array_interface__``
(CuPy, Numba), checked for device, dtype, shape and contiguity, and new
outputs allocated with torch (or CuPy when torch is absent).

These checks run on every call that is not the same as the runtime's last
one (kdtree_jit._runtime says which are), so the common case -- a torch
tensor that passes -- reads each attribute once, in one expression, and
builds no message; anything else, or any failure, takes the general path,
which words the error.
"""

_torch = None  # the module, once imported; False when unavailable
_raw_stream = None  # torch's current raw stream of a device, as an int
_Tensor = None  # torch.Tensor, for the fast path's class test
_cupy = None


class DType(object):
    """An element type: its name, its torch dtype (once torch is
    imported), its __cuda_array_interface__ typestrs and size."""

    __slots__ = ("name", "torch", "typestrs", "itemsize")

    def __init__(self, name, typestrs, itemsize):
        self.name, self.typestrs, self.itemsize = name, typestrs, itemsize
        self.torch = None

    def __repr__(self):
        return self.name


# bf16 has no typestr of its own: 2-byte integer or void storage stands
# for it.
F32 = DType("float32", ("<f4",), 4)
I32 = DType("int32", ("<i4",), 4)
U32 = DType("uint32", ("<u4",), 4)
BF16 = DType("bfloat16", ("<u2", "<i2", "<V2", "|V2"), 2)
U8 = DType("uint8", ("|u1", "<u1"), 1)
# FP8 e4m3 (torch.float8_e4m3fn): torch only; a CuPy array of e4m3 bytes
# comes as uint8.
E4M3 = DType("float8_e4m3fn", (), 1)
# Accepted nowhere; named so that a wrong one is reported by its name.
I64 = DType("int64", ("<i8",), 8)
F64 = DType("float64", ("<f8",), 8)
F16 = DType("float16", ("<f2",), 2)
_ALL = (F32, I32, U32, BF16, U8, E4M3, I64, F64, F16)
_BY_TYPESTR = {t: d for d in _ALL for t in d.typestrs}


def torch_module():
    global _torch, _Tensor
    if _torch is None:
        try:
            import torch
        except ImportError:
            _torch = False
        else:
            _torch, _Tensor = torch, torch.Tensor
            global _raw_stream
            _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            for d in _ALL:
                d.torch = getattr(torch, d.name, None)
    return _torch or None


def cupy_module():
    global _cupy
    if _cupy is None:
        try:
            import cupy
        except ImportError:
            _cupy = False
        else:
            _cupy = cupy
    return _cupy or None


def _fmt_shape(shape):
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _dtype_name(x_dtype):
    for d in _ALL:
        if d.torch is not None and x_dtype is d.torch:
            return d.name
    return str(x_dtype).replace("torch.", "")


def describe(x):
    """(pointer, shape tuple, dtype name, device ordinal or None,
    contiguous) of a device array; TypeError for anything else."""
    torch = torch_module()
    if torch is not None and isinstance(x, torch.Tensor):
        if not x.is_cuda:
            raise TypeError("a tensor on %s, not on a CUDA device" % x.device)
        return (x.data_ptr(), tuple(x.shape), _dtype_name(x.dtype),
                x.get_device(), x.is_contiguous())
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError("a %s, not a CUDA tensor or an object with "
                        "__cuda_array_interface__" % type(x).__name__)
    shape = tuple(cai["shape"])
    d = _BY_TYPESTR.get(cai["typestr"])
    dt = d.name if d else cai["typestr"]
    strides = cai.get("strides")
    contiguous = True
    if strides is not None:
        if d is None:
            contiguous = False
        else:
            want, acc = [], d.itemsize
            for n in reversed(shape):
                want.append(acc)
                acc *= n
            contiguous = all(s == w for s, w, n in
                             zip(strides, reversed(want), shape) if n != 1)
    dev = getattr(x, "device", None)
    dev = getattr(dev, "id", None)  # CuPy's Device
    return cai["data"][0], shape, dt, dev, contiguous


def checked(fn, name, x, dtypes, shape, device):
    """The general check of argument `name` of `fn`: a device array
    (TypeError), of one of `dtypes` (TypeError), on CUDA device `device`
    (ValueError), of `shape` -- a tuple where None matches any size, or
    None for any shape -- (ValueError), C-contiguous (ValueError).
    Returns (pointer, shape, DType)."""
    try:
        ptr, shp, dt, dev, contiguous = describe(x)
    except TypeError as e:
        raise TypeError("%s: %s must be a CUDA array, got %s" % (fn, name, e))
    match = [d for d in dtypes if d.name == dt]
    if not match:
        raise TypeError("%s: %s must be %s, got %s" % (
            fn, name, " or ".join(d.name for d in dtypes), dt))
    if dev is not None and dev != device:
        raise ValueError("%s: %s is on CUDA device %d, the runtime on %d"
                         % (fn, name, dev, device))
    if shape is not None:
        if len(shp) != len(shape) or any(
                w is not None and w != n for w, n in zip(shape, shp)):
            raise ValueError("%s: %s must have shape %s, got %s" % (
                fn, name, _fmt_shape(shape), _fmt_shape(shp)))
    if not contiguous:
        raise ValueError("%s: %s must be contiguous (C order); call "
                         ".contiguous() first" % (fn, name))
    return ptr, shp, match[0]


def ptr(fn, name, x, dtypes, shape, device):
    """The pointer of `x` after checking it is a contiguous array of one
    of `dtypes` and exactly `shape` on CUDA device `device`."""
    if x.__class__ is _Tensor and x.is_cuda and x.get_device() == device \
            and x.shape == shape and x.is_contiguous():
        xd = x.dtype
        for d in dtypes:
            if xd is d.torch:
                return x.data_ptr()
    return checked(fn, name, x, dtypes, shape, device)[0]


def first(fn, name, x, dtypes, ndim, device):
    """(pointer, shape, DType) of the argument whose shape sets a call's
    sizes: checked like ptr() for one of `dtypes` and `ndim` dimensions
    (None: any number), any sizes."""
    if x.__class__ is _Tensor and x.is_cuda and x.get_device() == device \
            and x.is_contiguous():
        xd = x.dtype
        for d in dtypes:
            if xd is d.torch:
                s = x.shape
                if ndim is None or len(s) == ndim:
                    return x.data_ptr(), s, d
                break
    return checked(fn, name, x, dtypes,
                   None if ndim is None else (None,) * ndim, device)


def new_ptr(x):
    """The pointer of an array empty() made (no checks needed)."""
    if x.__class__ is _Tensor:
        return x.data_ptr()
    return x.__cuda_array_interface__["data"][0]


_devices = {}  # ordinal -> torch.device


def _torch_device(device):
    d = _devices.get(device)
    if d is None:
        # (-1: where a CPU tensor says it is; only the stub benchmark of
        # examples/overhead.py runs a runtime there.)
        d = _devices[device] = _torch.device("cuda", device) \
            if device >= 0 else _torch.device("cpu")
    return d


def allocator(specs, device, like):
    """A function that makes a call's new outputs: an uninitialised array
    for each (shape, DType) of `specs`, returned with their pointers (a
    list, a tuple); torch unless `like` is not a torch tensor and CuPy is
    there.  One torch.empty per array is most of what an allocating call
    costs: the function makes them with nothing else around them."""
    if _torch and (isinstance(like, _Tensor) or cupy_module() is None):
        E, d, dp = _torch.empty, _torch_device(device), _Tensor.data_ptr
        made = tuple((tuple(s), dt.torch) for s, dt in specs)

        def alloc():
            # The sizes as separate arguments: torch's parser takes them
            # in about two thirds of the time it takes a tuple.
            arrays = [E(*s, dtype=t, device=d) for s, t in made]
            return arrays, tuple(map(dp, arrays))
        return alloc

    def alloc():
        arrays = [empty(s, dt, device, like) for s, dt in specs]
        return arrays, tuple(new_ptr(a) for a in arrays)
    return alloc


def empty(shape, dt, device, like=None):
    """A new uninitialised device array of DType `dt`: torch unless `like`
    is not a torch tensor and CuPy is there."""
    if _torch and (like is None or like.__class__ is _Tensor or
                   cupy_module() is None):
        return _torch.empty(*shape, dtype=dt.torch,
                            device=_torch_device(device))
    cupy = cupy_module()
    if cupy is None:
        raise RuntimeError("kdtree_jit: neither torch nor cupy is available "
                           "to allocate outputs; pass out=")
    np_dt = "uint16" if dt is BF16 else dt.name
    with cupy.cuda.Device(device):
        return cupy.empty(shape, dtype=np_dt)


def current_stream(device):
    """The handle (an int) of the current stream of torch, else CuPy, else
    0 (the legacy default stream)."""
    if _raw_stream is not None:
        return _raw_stream(device)
    torch = torch_module()
    if torch is not None:
        return torch.cuda.current_stream(device).cuda_stream
    cupy = cupy_module()
    if cupy is not None:
        return cupy.cuda.get_current_stream().ptr
    return 0


def stream_handle(stream, device):
    """An int handle from None (current stream), an int, a torch stream
    (.cuda_stream) or a CuPy stream (.ptr)."""
    if stream is None:
        return current_stream(device)
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise TypeError("stream must be None, an int handle, a torch.cuda.Stream "
                    "or a cupy stream, got %s" % type(stream).__name__)
