"""envrec.record.host_arrays: batched arrays of any framework as numpy arrays of the recorded rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # the test extra installs it (and jax[cpu]): their absence fails, never skips

from envrec.errors import RecordError
from envrec.record.host_arrays import HostArrays, framework_of, host_info, to_host

ROWS = np.array([0, 2, 5])


class DLPackOnly:
    """An array that offers only DLPack, on the CPU (device type 1)."""

    __module__ = "somelib.arrays"

    def __init__(self, a):
        self.a, self.shape = a, a.shape

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)


class ArrayOnly:
    __module__ = "otherlib"

    def __init__(self, a):
        self.a, self.shape = a, a.shape

    def __array__(self, dtype=None, copy=None):
        return self.a


class GpuDLPack(DLPackOnly):
    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, with no __array__: the host cannot read it


def test_frameworks_told_by_type():
    a = np.arange(6)
    assert framework_of(a) == "numpy" and framework_of(torch.arange(3)) == "torch"
    assert framework_of(DLPackOnly(a)) == "dlpack" and framework_of(ArrayOnly(a)) == "array"
    assert framework_of([1, 2]) == "python"


@pytest.mark.parametrize("make", [
    lambda a: a, torch.from_numpy, DLPackOnly, ArrayOnly, list,
], ids=["numpy", "torch", "dlpack", "array", "list"])
def test_rows_of_any_framework(make):
    a = np.arange(18, dtype=np.float32).reshape(6, 3)
    got = HostArrays(6).to_host(make(a) if make is not list else a.tolist(), ROWS, "observations")
    assert isinstance(got, np.ndarray) and got.tolist() == a[ROWS].tolist()
    whole = HostArrays(6).to_host(make(a) if make is not list else a.tolist(), None, "observations")
    assert whole.tolist() == a.tolist()


def test_host_memory_read_without_a_copy():
    t = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    assert np.shares_memory(to_host(t), t.numpy())


def test_jax_cpu_rows():
    import jax.numpy as jnp
    x = jnp.arange(12).reshape(6, 2)
    assert framework_of(x) == "jax"
    assert HostArrays(6).to_host(x, ROWS, "obs").tolist() == np.arange(12).reshape(6, 2)[ROWS].tolist()


def test_bfloat16_and_grad_tensors():
    t = torch.ones((4, 2), dtype=torch.bfloat16, requires_grad=True)
    got = HostArrays(4).to_host(t, np.array([1]), "obs")
    assert got.dtype == np.float32 and got.tolist() == [[1.0, 1.0]]


@pytest.mark.parametrize("value, message", [
    (torch.zeros((4, 2), device="meta"), "obs: a torch.Tensor on the meta device"),
    (GpuDLPack(np.zeros((4, 2))), "obs: a .*GpuDLPack on DLPack device type 2"),
    (np.zeros((5, 2)), r"obs: expected a batch of 4 \(one row per sub-env\), got a batch of 5"),
    (np.float32(1.0), "obs: expected a batch of 4 .* got no batch dimension"),
])
def test_unreadable_named(value, message):
    with pytest.raises(RecordError, match=message):
        HostArrays(4).to_host(value, None, "obs")


def test_info_cut_to_rows():
    info = {
        "success": torch.tensor([True, False, True, False, True, False]), "_success": np.ones(6, bool),
        "log": {"mean": torch.tensor(0.5)}, "final_obs": [np.full(2, i) for i in range(6)], "name": "x",
    }
    out = host_info(info, ROWS, 6)
    assert out["success"].tolist() == [True, True, False] and out["_success"].tolist() == [True] * 3
    assert out["log"]["mean"] == np.float32(0.5) and [f[0] for f in out["final_obs"]] == [0, 2, 5]
    assert out["name"] == "x"
    plain = {"a": np.zeros(6)}
    assert host_info(plain, None, 6) is plain  # numpy and all rows: as it is
