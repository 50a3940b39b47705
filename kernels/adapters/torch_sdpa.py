"""PyTorch ``torch.nn.functional.scaled_dot_product_attention`` on CPU: an optional subject.

It shows the suite is not tied to JAX. PyTorch is an optional extra
(``torch==2.13.0``, a CPU build); without it ``availability()`` says so.

Translation from canonical semantics (``docs/semantics.md``):

* Layout is already ``[B, H, S, D]``; ``scale=`` is passed resolved; GQA through
  ``enable_gqa=True`` (query head ``h`` reads kv head ``h // G``), PyTorch >= 2.5.
* One ``attn_mask`` carries bias and boolean mask: a float mask is *added* to the
  scaled logits (canonical order), a bool mask keeps True entries. With both, the
  bias gets ``-inf`` where the mask is False.
* ``is_causal`` is top-left, and PyTorch refuses it together with ``attn_mask``;
  then the top-left causal mask is folded into ``attn_mask`` instead.
* bfloat16 NumPy arrays (ml_dtypes) go through float32, which holds them exactly.
* Rows that see no key return zeros (PyTorch >= 2.5 ``_safe_softmax``).
* ``ran`` names the ATen kernel that executed (the fused CPU flash kernel, or the
  math path, which decomposes into ``bmm``/``_safe_softmax``), recorded once per
  case shape with a dispatch mode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

import numpy as np

from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from kernels.runtime.jax_runtime import array_key, installed_version, version_tuple
from reference.spec import AttentionInputs, AttentionSpec

PINNED = "2.13.0"
GQA_SINCE = (2, 5)  # enable_gqa= and zero output for fully masked rows


def _torch_version() -> tuple[int, ...]:
    version = installed_version("torch")
    return () if version is None else version_tuple(version)


@dataclasses.dataclass(frozen=True, eq=False)
class TorchSdpaAdapter:
    """PyTorch SDPA on CPU. Canonical ``[B, H, S, D]`` NumPy in, NumPy out."""

    name: str = "torch_sdpa"
    description: str = "PyTorch torch.nn.functional.scaled_dot_product_attention (CPU)"
    _ran: dict[Hashable, str] = dataclasses.field(default_factory=dict, repr=False)

    def availability(self) -> Availability:
        try:
            import torch
            import torch.nn.functional as functional

            functional.scaled_dot_product_attention  # noqa: B018 - the API this adapter needs
        except Exception as error:  # ImportError, or a broken install: unavailable, never a crash
            return Availability(
                False,
                f"PyTorch is not usable here ({type(error).__name__}: {error}); "
                f"it is an optional extra: install torch=={PINNED} (CPU build)",
            )
        versions = (("torch", torch.__version__),)
        if _torch_version() < GQA_SINCE:
            return Availability(
                False,
                f"torch {torch.__version__} predates 2.5 (enable_gqa=, safe softmax); "
                f"install torch=={PINNED}",
                versions,
            )
        return Availability(True, "", versions, "native", "PyTorch CPU")

    def capabilities(self) -> Capabilities:
        return Capabilities(
            dtypes=("float32", "bfloat16", "float16", "float64"),
            causal_alignments=("top_left",),
            bool_mask=True,
            gqa=True,
            bias=True,
            bias_broadcast=True,
            distinct_v_dim=True,
            backward=True,
            bias_grad=True,
            fully_masked_rows="zeros",
        )

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, Dv]`` in the input dtype; no lse (SDPA does not return it)."""
        import torch

        with torch.no_grad():
            arrays = (inputs.q, inputs.k, inputs.v, inputs.bias, inputs.mask)
            q, k, v, bias, mask = (_to_torch(a) for a in arrays)
            key = ("forward", array_key(inputs.q, inputs.k, inputs.v, inputs.bias, inputs.mask), spec)
            out, ran = self._call(key, q, k, v, bias, mask, spec)
        return SubjectOutput(out=_to_numpy(out, inputs.q.dtype), ran=ran)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        """Gradients of ``sum(out * dout)`` by autograd; ``dbias`` has the bias's own shape."""
        leaves = [_to_torch(a) for a in (inputs.q, inputs.k, inputs.v, inputs.bias)]
        for leaf in leaves:
            if leaf is not None:
                leaf.requires_grad_(True)
        q, k, v, bias = leaves
        key = ("backward", array_key(inputs.q, inputs.k, inputs.v, inputs.bias, inputs.mask), spec)
        out, _ = self._call(key, q, k, v, bias, _to_torch(inputs.mask), spec)
        out.backward(_to_torch(np.asarray(dout, dtype=inputs.q.dtype)))
        dtype = inputs.q.dtype
        dbias = None if bias is None else _to_numpy(bias.grad, inputs.bias.dtype)
        dq, dk, dv = (_to_numpy(t.grad, dtype) for t in (q, k, v))
        return SubjectGrads(dq, dk, dv, dbias)

    def _call(self, key: Hashable, q: Any, k: Any, v: Any, bias: Any, mask: Any, spec: AttentionSpec):
        import torch.nn.functional as functional

        scale = spec.resolved_scale(q.shape[-1])
        attn_mask = _attn_mask(bias, mask, spec.causal, q.shape[2], k.shape[2])
        kwargs = {
            "attn_mask": attn_mask,
            "is_causal": spec.causal and attn_mask is None,
            "scale": scale,
            "enable_gqa": q.shape[1] != k.shape[1],
        }
        if key in self._ran:
            return functional.scaled_dot_product_attention(q, k, v, **kwargs), self._ran[key]
        out, ops = _recording_aten(lambda: functional.scaled_dot_product_attention(q, k, v, **kwargs))
        self._ran[key] = _ran_text(ops)
        return out, self._ran[key]


def _attn_mask(bias: Any, mask: Any, causal: bool, sq: int, sk: int) -> Any:
    """One attn_mask (None, bool, or float added after scaling) for bias, bool mask and causal."""
    import torch

    if causal and (bias is not None or mask is not None):
        causal_mask = torch.ones(sq, sk, dtype=torch.bool).tril()  # top-left, as is_causal
        mask = causal_mask if mask is None else mask & causal_mask
    if bias is None:
        return mask
    if mask is None:
        return bias
    return bias.masked_fill(~mask, float("-inf"))


def _recording_aten(call):
    """Run ``call()`` and return (result, names of the ATen ops it dispatched)."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return call(), None

    class Recorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Recorder() as recorder:
        result = call()
    return result, recorder.ops


def _ran_text(ops: list[str] | None) -> str:
    if ops is None:
        return "torch SDPA (backend not recorded: no dispatch mode in this torch)"
    fused = sorted({op.split(".")[1] for op in ops if "scaled_dot_product" in op})
    if fused:
        return "torch SDPA: " + ", ".join(fused)
    if any("softmax" in op for op in ops):
        return "torch SDPA: math path (bmm + softmax)"
    return "torch SDPA: " + ", ".join(sorted(set(ops)))


def _to_torch(x: np.ndarray | None) -> Any:
    """NumPy -> torch tensor; bfloat16 (ml_dtypes) via float32, which represents it exactly."""
    if x is None:
        return None
    import torch

    if x.dtype.name == "bfloat16":
        return torch.from_numpy(np.asarray(x, dtype=np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))


def _to_numpy(t: Any, dtype: np.dtype) -> np.ndarray:
    """torch tensor -> NumPy array of ``dtype`` (bfloat16 again via float32, exactly)."""
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.to(torch.float32).numpy().astype(dtype)
    return t.numpy().astype(dtype, copy=False)
