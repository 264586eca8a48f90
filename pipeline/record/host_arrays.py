"""Batched arrays from any framework, as numpy arrays of the rows a recorder keeps.

A vector or batched env hands over numpy arrays, torch tensors (CPU or CUDA),
JAX arrays (CPU or GPU), CuPy arrays or anything with ``__dlpack__`` or
``__array__``. ``to_host(x, rows, field)`` returns the rows ``rows`` of ``x``
(all of them for ``rows=None``) as a numpy array:

* numpy, and arrays in host memory (torch CPU, JAX CPU, DLPack on the CPU):
  a view without a copy, then one ``take`` of the rows;
* an array in GPU memory: the rows are gathered on the device first, and only
  they cross to the host, once (torch: into a pinned buffer kept per field,
  copied asynchronously then waited for; JAX: ``jax.device_get`` of the
  gathered rows; CuPy: ``.get()``). The whole batch never crosses.

The framework is told by the array's type (``type(x).__module__``): nothing
here imports torch, JAX or CuPy unless the user's arrays come from them.

An array the recorder cannot read (a device with no way to the host, a
batch of another size than the env's, a dtype numpy has not) raises
``RecordError`` naming the field before anything of the step is recorded.

A pinned buffer is reused by the next conversion of its field: the array
returned for a CUDA tensor is valid until then (the recorders copy it into
their ring at once).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import RecordError

__all__ = ["HostArrays", "framework_of", "host_info", "to_host"]

_KDL_CPU, _KDL_CUDA_HOST, _KDL_ROCM_HOST = 1, 3, 11  # DLPack device types whose memory the host can read


_FRAMEWORKS: dict[type, str] = {np.ndarray: "numpy"}  # what each array type seen so far is


def framework_of(x: Any) -> str:
    """``"numpy"``, ``"torch"``, ``"jax"``, ``"cupy"``, ``"dlpack"``, ``"array"`` (``__array__``) or ``"python"``."""
    fw = _FRAMEWORKS.get(type(x))
    if fw is None:
        fw = _FRAMEWORKS[type(x)] = _framework(x)
    return fw


def _framework(x: Any) -> str:
    if isinstance(x, np.ndarray | np.generic):
        return "numpy"
    root = type(x).__module__.partition(".")[0]
    if root == "torch":
        return "torch"
    if root in ("jax", "jaxlib"):
        return "jax"
    if root == "cupy":
        return "cupy"
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return "dlpack"
    if hasattr(x, "__array__"):
        return "array"
    return "python"


def _unreadable(field: str, x: Any, where: str, why: str = "") -> RecordError:
    kind = f"{type(x).__module__}.{type(x).__qualname__}"
    more = f" ({why})" if why else ""
    return RecordError(
        f"{field}: a {kind} on {where} that envrec cannot copy to the host{more}; hand over numpy arrays, "
        "or torch, JAX or CuPy arrays on the CPU or a CUDA GPU"
    )


def _check_batch(x: Any, n: int | None, field: str) -> None:
    if n is None:
        return
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) == 0 or shape[0] != n:
        got = "no batch dimension" if not shape else f"a batch of {shape[0]}"
        raise RecordError(f"{field}: expected a batch of {n} (one row per sub-env), got {got} (shape {shape})")


class HostArrays:
    """Copies batched arrays to the host, one field at a time, keeping a pinned buffer and device indices per field.

    Args:
        num_envs: the batch size every batched array must have (None: not checked).
    """

    def __init__(self, num_envs: int | None = None) -> None:
        self.num_envs = num_envs
        self._pinned: dict[str, Any] = {}
        self._device_rows: dict[tuple[str, int], tuple[np.ndarray, Any]] = {}

    def to_host(self, x: Any, rows: np.ndarray | None, field: str, batched: bool = True) -> np.ndarray:
        """The rows ``rows`` of ``x`` (all for None) as a numpy array (see the module docstring).

        Args:
            x: the batched array (or a scalar or list, read with ``np.asarray``).
            rows: the row indices to keep, an integer array; None: every row.
            field: what it is ("observations", "rewards"...), for error messages.
            batched: whether ``x`` has one row per sub-env (its batch size is checked).

        Raises:
            RecordError: a batch of another size, a device the host cannot read, a dtype numpy has not.
        """
        fw = framework_of(x)
        if fw == "numpy":
            if batched:
                _check_batch(x, self.num_envs, field)
            a = np.asarray(x)
            return a if rows is None else a.take(rows, axis=0)
        if fw == "python":
            a = np.asarray(x)
            if batched:
                _check_batch(a, self.num_envs, field)
            return a if rows is None else a.take(rows, axis=0)
        if batched:
            _check_batch(x, self.num_envs, field)
        if fw == "torch":
            return self._torch(x, rows, field)
        if fw == "jax":
            return _jax(x, rows, field)
        if fw == "cupy":
            return _cupy(x, rows, field)
        return _dlpack_or_array(x, rows, field, fw)

    def _torch(self, x: Any, rows: np.ndarray | None, field: str) -> np.ndarray:
        import torch  # the user's arrays are torch tensors: torch is loaded already

        t = x.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()  # numpy has no bfloat16
        device = t.device
        if device.type == "cpu":
            a = t.numpy()
            return a if rows is None else a.take(rows, axis=0)
        if device.type == "meta":
            raise _unreadable(field, x, "the meta device", "it holds no data")
        if rows is not None:
            t = t.index_select(0, self._rows_on(field, rows, device, torch))
        if device.type != "cuda":
            try:
                return t.to("cpu").numpy()
            except Exception as exc:
                raise _unreadable(field, x, f"device {device}", repr(exc)) from exc
        buf = self._pinned.get(field)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            buf = self._pinned[field] = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        buf.copy_(t, non_blocking=True)
        torch.cuda.current_stream(device).synchronize()
        return buf.numpy()

    def _rows_on(self, field: str, rows: np.ndarray, device: Any, torch: Any) -> Any:
        """The row indices as a tensor on ``device``, made again only when the rows change."""
        key = (field, hash(device))
        held = self._device_rows.get(key)
        if held is None or not np.array_equal(held[0], rows):
            held = self._device_rows[key] = (rows.copy(), torch.as_tensor(rows, dtype=torch.int64).to(device))
        return held[1]

    def info(self, info: dict, rows: np.ndarray | None) -> dict:
        """``host_info`` with this batch size."""
        return host_info(info, rows, self.num_envs, self)


def _jax(x: Any, rows: np.ndarray | None, field: str) -> np.ndarray:
    try:
        platforms = {d.platform for d in x.devices()}
    except Exception as exc:  # a tracer: the recorder was called inside jit
        raise _unreadable(field, x, "no device", f"not a concrete array: {exc!r}") from exc
    if platforms <= {"cpu"}:
        a = np.asarray(x)  # a view of the host buffer
        return a if rows is None else a.take(rows, axis=0)
    if rows is not None:
        x = x[rows]  # gathered on the device
    import jax  # the user's arrays are JAX arrays: JAX is loaded already

    try:
        return np.asarray(jax.device_get(x))
    except Exception as exc:
        raise _unreadable(field, x, f"devices {sorted(platforms)}", repr(exc)) from exc


def _cupy(x: Any, rows: np.ndarray | None, field: str) -> np.ndarray:
    if rows is not None:
        x = x[rows]  # gathered on the device
    try:
        return x.get()
    except Exception as exc:
        raise _unreadable(field, x, "its device", repr(exc)) from exc


def _dlpack_or_array(x: Any, rows: np.ndarray | None, field: str, fw: str) -> np.ndarray:
    if fw == "dlpack":
        device_type = x.__dlpack_device__()[0]
        if device_type in (_KDL_CPU, _KDL_CUDA_HOST, _KDL_ROCM_HOST):
            a = np.from_dlpack(x)
        elif hasattr(x, "__array__"):
            a = np.asarray(x)
        else:
            raise _unreadable(field, x, f"DLPack device type {device_type}")
    else:
        try:
            a = np.asarray(x)
        except Exception as exc:
            raise _unreadable(field, x, "its device", repr(exc)) from exc
    return a if rows is None else a.take(rows, axis=0)


def to_host(x: Any, rows: np.ndarray | None = None, field: str = "value", num_envs: int | None = None) -> np.ndarray:
    """The rows ``rows`` of ``x`` (all for None) as a numpy array; see ``HostArrays.to_host``.

    Args:
        x: the batched array.
        rows: the row indices to keep; None: every row.
        field: what it is, for error messages.
        num_envs: the batch size it must have (None: not checked).
    """
    return HostArrays(num_envs).to_host(x, rows, field, batched=num_envs is not None)


def host_info(info: dict, rows: np.ndarray | None, num_envs: int | None, arrays: HostArrays | None = None) -> dict:
    """A vector info with its batched entries cut to ``rows`` and every framework's array made numpy.

    An entry with one row per sub-env (``num_envs`` long; its ``_key`` mask too)
    keeps the rows ``rows``; another array (a scalar tensor, a log of means) is
    copied to the host whole; other values stay as they are. With ``rows=None``
    and only numpy inside, the info comes back as it is.

    Args:
        info: the vector info (Gymnasium's dict of arrays, ``_key`` masks).
        rows: the row indices to keep; None: every row.
        num_envs: the batch size (None: no entry counts as batched).
        arrays: the converter whose pinned buffers to use (default: a fresh one).
    """
    if rows is None and not _foreign(info, 0):
        return info
    arrays = arrays or HostArrays(num_envs)
    return _cut(info, rows, num_envs, arrays, "info")


def _foreign(value: Any, depth: int) -> bool:
    if depth > 8:
        return False
    if isinstance(value, dict):
        return any(_foreign(v, depth + 1) for v in value.values())
    fw = framework_of(value)
    return fw not in ("numpy", "python")


def _cut(value: Any, rows: np.ndarray | None, n: int | None, arrays: HostArrays, where: str) -> Any:
    if isinstance(value, dict):
        return {k: _cut(v, rows, n, arrays, f"{where}[{k!r}]") for k, v in value.items()}
    fw = framework_of(value)
    if fw == "python":
        if rows is not None and isinstance(value, list | tuple) and len(value) == n:
            return [value[r] for r in rows]  # one entry per sub-env (SB3's final_obs)
        return value
    shape = getattr(value, "shape", None)
    batched = n is not None and shape is not None and len(shape) > 0 and shape[0] == n
    try:
        return arrays.to_host(value, rows if batched else None, where, batched=False)
    except (RecordError, TypeError, ValueError, RuntimeError):
        return value  # an info never breaks a step: left to pack_info, which stores what it cannot pickle as its repr
