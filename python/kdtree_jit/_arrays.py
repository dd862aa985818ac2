"""Device arrays: torch tensors or anything with ``__cuda_array_interface__``
(CuPy, Numba), checked for device, dtype, shape and contiguity, and new
outputs allocated with torch (or CuPy when torch is absent).

The checks sit on the launch path, so they read each attribute once and
build no message unless something is wrong.
"""

_torch = None  # the module, once imported; False when unavailable
_cupy = None
_TORCH_DT = {}
_TORCH_OF = {}


def torch_module():
    global _torch, _TORCH_DT, _TORCH_OF
    if _torch is None:
        try:
            import torch
        except ImportError:
            _torch = False
        else:
            _torch = torch
            _TORCH_DT = {torch.float32: "float32", torch.int32: "int32",
                         torch.bfloat16: "bfloat16", torch.uint8: "uint8"}
            if hasattr(torch, "uint32"):
                _TORCH_DT[torch.uint32] = "uint32"
            _TORCH_OF = {"float32": torch.float32, "int32": torch.int32,
                         "bfloat16": torch.bfloat16, "uint8": torch.uint8}
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


# __cuda_array_interface__ typestrs.  bf16 has none of its own: 2-byte
# integer or void storage stands for it.
_CAI_DT = {"<f4": "float32", "<i4": "int32", "<u4": "uint32",
           "|u1": "uint8", "<u1": "uint8",
           "<u2": "bfloat16", "<i2": "bfloat16", "<V2": "bfloat16",
           "|V2": "bfloat16"}
_ITEMSIZE = {"float32": 4, "int32": 4, "uint32": 4, "bfloat16": 2,
             "uint8": 1}


def _fmt_shape(shape):
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def describe(x):
    """(pointer, shape tuple, dtype name, device ordinal or None,
    contiguous) of a device array; TypeError for anything else."""
    torch = torch_module()
    if torch is not None and isinstance(x, torch.Tensor):
        if not x.is_cuda:
            raise TypeError("a tensor on %s, not on a CUDA device" % x.device)
        return (x.data_ptr(), tuple(x.shape), _TORCH_DT.get(x.dtype, str(x.dtype)),
                x.get_device(), x.is_contiguous())
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError("a %s, not a CUDA tensor or an object with "
                        "__cuda_array_interface__" % type(x).__name__)
    shape = tuple(cai["shape"])
    dt = _CAI_DT.get(cai["typestr"], cai["typestr"])
    strides = cai.get("strides")
    contiguous = True
    if strides is not None:
        item = _ITEMSIZE.get(dt)
        if item is None:
            contiguous = False
        else:
            want, acc = [], item
            for d in reversed(shape):
                want.append(acc)
                acc *= d
            contiguous = all(s == w for s, w, d in
                             zip(strides, reversed(want), shape) if d != 1)
    dev = getattr(x, "device", None)
    dev = getattr(dev, "id", None)  # CuPy's Device
    return cai["data"][0], shape, dt, dev, contiguous


_fast = {}  # dtypes tuple -> {torch dtype: name}


def _torch_fast(dtypes):
    m = _fast.get(dtypes)
    if m is None:
        torch_module()
        m = {_TORCH_OF[d]: d for d in dtypes if d in _TORCH_OF}
        if "uint32" in dtypes and _torch and hasattr(_torch, "uint32"):
            m[_torch.uint32] = "uint32"
        _fast[dtypes] = m
    return m


def check(fn, name, x, dtypes, shape, device):
    """The pointer of argument `name` of `fn`, after checking it: a device
    array (TypeError), of one of `dtypes` (TypeError), on `device`
    (ValueError), of `shape` where a None dimension matches any
    (ValueError), C-contiguous (ValueError).  Returns (pointer, shape,
    dtype name)."""
    # The common case first, in as few attribute reads as possible: a
    # torch tensor that passes every check.  Anything else, or any
    # failure, takes the general path below, which words the error.
    if _torch and type(x) is _torch.Tensor:
        dt = _torch_fast(dtypes).get(x.dtype)
        if dt is not None and x.is_cuda and x.get_device() == device and \
                x.is_contiguous():
            shp = x.shape
            if shape is None or shp == shape:
                return x.data_ptr(), shp, dt
            if len(shp) == len(shape) and all(
                    w is None or w == d for w, d in zip(shape, shp)):
                return x.data_ptr(), shp, dt
    try:
        ptr, shp, dt, dev, contiguous = describe(x)
    except TypeError as e:
        raise TypeError("%s: %s must be a CUDA array, got %s" % (fn, name, e))
    if dt not in dtypes:
        raise TypeError("%s: %s must be %s, got %s" % (
            fn, name, " or ".join(dtypes), dt))
    if dev is not None and dev != device:
        raise ValueError("%s: %s is on CUDA device %d, the runtime on %d"
                         % (fn, name, dev, device))
    if shape is not None:
        if len(shp) != len(shape) or any(
                w is not None and w != d for w, d in zip(shape, shp)):
            raise ValueError("%s: %s must have shape %s, got %s" % (
                fn, name, _fmt_shape(shape), _fmt_shape(shp)))
    if not contiguous:
        raise ValueError("%s: %s must be contiguous (C order); call "
                         ".contiguous() first" % (fn, name))
    return ptr, shp, dt


def empty(shape, dtype, device, like=None):
    """A new uninitialised device array: torch unless `like` is not a torch
    tensor and CuPy is there."""
    torch = torch_module()
    use_torch = torch is not None and (
        like is None or isinstance(like, torch.Tensor) or cupy_module() is None)
    if use_torch:
        return torch.empty(shape, dtype=_TORCH_OF[dtype],
                           device=torch.device("cuda", device))
    cupy = cupy_module()
    if cupy is None:
        raise RuntimeError("kdtree_jit: neither torch nor cupy is available "
                           "to allocate outputs; pass out=")
    np_dt = {"float32": "float32", "int32": "int32", "uint32": "uint32",
             "bfloat16": "uint16", "uint8": "uint8"}[dtype]
    with cupy.cuda.Device(device):
        return cupy.empty(shape, dtype=np_dt)


def current_stream(device):
    """The handle (an int) of the current stream of torch, else CuPy, else
    0 (the legacy default stream)."""
    torch = torch_module()
    if torch is not None:
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(device)
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
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise TypeError("stream must be None, an int handle, a torch.cuda.Stream "
                    "or a cupy stream, got %s" % type(stream).__name__)
