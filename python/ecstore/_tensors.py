"""Tensors and arrays <-> the flat byte views and (dtype, shape) the C++ core takes.

torch is optional: without it, numpy arrays and buffers work. numpy has no bfloat16, so a
BF16 entry read as numpy comes back as uint16 holding the raw bf16 bits (or as
ml_dtypes.bfloat16 when ml_dtypes is installed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    import torch
except ImportError:  # numpy-only use
    torch = None

_NUMPY = {
    "F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "U8": np.uint8,
    "I16": np.int16, "I32": np.int32, "I64": np.int64, "BOOL": np.bool_,
}
_NUMPY_NAMES = {np.dtype(v): k for k, v in _NUMPY.items()}
try:
    import ml_dtypes

    _NUMPY["BF16"] = ml_dtypes.bfloat16
    _NUMPY_NAMES[np.dtype(ml_dtypes.bfloat16)] = "BF16"
except ImportError:
    pass

if torch is not None:
    _TORCH = {
        "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
        "F64": torch.float64, "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16,
        "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool,
        "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    }
    _TORCH_NAMES = {v: k for k, v in _TORCH.items()}
else:
    _TORCH, _TORCH_NAMES = {}, {}


def torch_dtype(name: str) -> Any:
    return _TORCH[name]


def is_tensor(value: Any) -> bool:
    return torch is not None and isinstance(value, torch.Tensor)


def dtype_name(value: Any) -> str:
    """The safetensors spelling of a tensor's, array's or dtype's element type."""
    if is_tensor(value):
        value = value.dtype
    if torch is not None and isinstance(value, torch.dtype):
        if value not in _TORCH_NAMES:
            raise ValueError(f"ec-store does not store torch dtype {value}")
        return _TORCH_NAMES[value]
    if isinstance(value, str):
        return value.upper()
    dt = np.dtype(value.dtype if hasattr(value, "dtype") else value)
    if dt not in _NUMPY_NAMES:
        hint = (" (a BF16 entry read as numpy is uint16: put it back with dtype='BF16')"
                if dt == np.uint16 else "")
        raise ValueError(f"ec-store does not store numpy dtype {dt}{hint}")
    return _NUMPY_NAMES[dt]


def host_bytes(value: Any, dtype: str | None, shape: Any) -> tuple[str, list[int], Any]:
    """(dtype name, shape, flat uint8 view on the CPU) of what put() stores. A CUDA tensor
    is copied to the host first; a CPU tensor or array is viewed without a copy when it is
    contiguous."""
    if is_tensor(value):
        t = value.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        t = t.contiguous()
        # dtype/shape given: the tensor holds the entry's bytes (a uint8 staging buffer)
        return (dtype.upper() if dtype else dtype_name(t),
                list(shape if shape is not None else t.shape), t.reshape(-1).view(torch.uint8))
    if isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        name = dtype or dtype_name(a)
        return name, list(shape if shape is not None else a.shape), a.reshape(-1).view(np.uint8)
    if dtype is None or shape is None:
        raise ValueError("raw bytes need dtype= and shape= (or pass a tensor or an array)")
    return dtype.upper(), list(shape), np.frombuffer(memoryview(value), dtype=np.uint8)


def empty(dtype: str, shape: list[int], like: "str | None", pin: bool = False) -> Any:
    """A fresh CPU tensor (like='torch') or array (like='numpy') for an entry; like=None:
    a tensor where torch is installed, else an array."""
    if like is None:
        like = "torch" if torch is not None else "numpy"
    if like == "torch":
        if torch is None:
            raise ValueError("like='torch' needs torch; pass like='numpy'")
        return torch.empty(shape, dtype=_TORCH[dtype], pin_memory=pin)
    np_dtype = _NUMPY.get(dtype, np.uint16 if dtype == "BF16" else None)
    if np_dtype is None:
        raise ValueError(f"numpy has no dtype for {dtype}; use like='torch'")
    return np.empty(shape, dtype=np_dtype)


def flat_bytes(out: Any) -> Any:
    """The writable uint8 view of a CPU tensor or array that get_into() fills."""
    if is_tensor(out):
        if out.device.type != "cpu" or not out.is_contiguous():
            raise ValueError("get_into needs a contiguous CPU tensor; use get(device=...)")
        return out.reshape(-1).view(torch.uint8)
    a = np.asarray(out)
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise ValueError("get_into needs a writable, C-contiguous array")
    return a.reshape(-1).view(np.uint8)


def typed_view(raw: np.ndarray, dtype: str, shape: list[int]) -> Any:
    """A read-only uint8 array over lease memory, as a typed array (no copy)."""
    np_dtype = _NUMPY.get(dtype, np.uint16 if dtype == "BF16" else None)
    return raw.view(np_dtype).reshape(shape)
