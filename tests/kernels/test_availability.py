"""Unavailability is reported with a reason, never raised: no GPU, a missing API, a missing package."""

from __future__ import annotations

import pytest

from kernels.adapters.cudnn import CudnnAdapter
from kernels.adapters.xla import XlaAdapter
from kernels.registry import resolve
from kernels.runtime.jax_runtime import default_backend


@pytest.mark.skipif(default_backend() == "gpu", reason="a GPU is attached, so cuDNN may well be available")
def test_cudnn_is_unavailable_without_a_gpu():
    availability = CudnnAdapter().availability()
    assert not availability.available
    assert "needs an NVIDIA GPU" in availability.reason
    assert repr(default_backend()) in availability.reason


def test_missing_api_makes_xla_unavailable(monkeypatch):
    import jax

    def old_signature(query, key, value, bias=None, mask=None, *, scale=None, is_causal=False):
        raise AssertionError("never called")

    monkeypatch.setattr(jax.nn, "dot_product_attention", old_signature)
    availability = XlaAdapter().availability()
    assert not availability.available
    assert "implementation" in availability.reason


def test_missing_module_makes_tpu_flash_unavailable(monkeypatch):
    import kernels.adapters.tpu_flash as module

    def missing(execution):
        raise ImportError("No module named 'jax.experimental.pallas.ops.tpu.flash_attention'")

    monkeypatch.setattr(module, "_load_api", missing)
    availability = module.TpuFlashAdapter().availability()
    assert not availability.available
    assert "ImportError" in availability.reason and "flash_attention" in availability.reason
    assert not module.TpuFlashAdapter().capabilities().lse


@pytest.mark.parametrize("name", ["tpu_flash", "xla", "cudnn"])
def test_availability_names_versions(name):
    availability = resolve(name).availability()
    assert dict(availability.versions).get("jax")
