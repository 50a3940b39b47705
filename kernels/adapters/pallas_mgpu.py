"""JAX's own Mosaic GPU flash attention (FlashAttention-3 style, Hopper and newer):
``jax.experimental.pallas.ops.gpu.attention_mgpu.attention``. The forward pass only.

Read in the module as JAX 0.10.2 ships it:

* Layout ``[B, T, N, H]`` (sequence before heads) for q, k, v and out: transposed both ways.
  GQA: query head ``h`` reads kv head ``h // (Hq / Hkv)``, consecutive as canonical.
* There is no scale: the logits are ``q.k``. q is multiplied by the canonical scale in float32
  and rounded once to its dtype (as for splash).
* Causal is ``TuningConfig.causal``: ``q_index >= k_index``, top-left. Nothing else: no bias,
  mask, lengths, window, softcap, segment ids or sinks (no parameter for them).
* lse comes from ``save_residuals=True``: ``[B, Hq, Sq]`` float32 in base 2 (``m * log2(e) +
  log2(l)``, the kernel keeps its softmax in ``exp2``), so it is multiplied by ln 2.
* v must have k's shape (the module means to check it; its check compares k twice), so
  Dv == D: ``distinct_v_dim`` stays undeclared.
* The config is fixed at ``TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2)``:
  the smallest blocks the config accepts (multiples of 64), so the most lengths run.

What it rejects (``_attention_forward``), declared with the exception it raises:

* dtypes other than float16 and bfloat16 (NotImplementedError): the declared dtypes;
* ``head_dim`` not a multiple of 64 (ValueError);
* ``kv_len`` not a multiple of ``block_kv`` (ValueError);
* ``q_len`` not a multiple of ``2 * block_q`` (NotImplementedError): two compute warpgroups take
  ``block_q`` rows each;
* causal with a CUDA runtime from 12.8.0 to before 12.9.1 (ValueError, a ptxas miscompilation):
  declared only where that runtime is the one loaded.

Its custom VJP needs backward blocks and rejects causal; the backward is not wired up here.
No interpreter runs it: on a machine without CUDA, ``_attention_forward`` asserts jaxlib's CUDA
runtime (``cuda_versions``) before it builds any kernel, and the kernel itself needs a Hopper
GPU (warpgroup matrix multiply, TMA copies, warpgroup register reallocation).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any

import numpy as np

from kernels.contract.base import Availability, Capabilities, ShapeConstraint, SubjectGrads, SubjectOutput
from kernels.runtime.call_description import (
    CallDescription,
    Module,
    Name,
    cache_key,
    constructed,
    jax_call,
    standalone,
)
from kernels.runtime.jax_runtime import (
    CompiledCache,
    default_backend,
    installed_jax_versions,
    unavailable_because,
)
from kernels.runtime.standalone import StandaloneCall
from reference.spec import AttentionInputs, AttentionSpec

MODULE = "jax.experimental.pallas.ops.gpu.attention_mgpu"
BLOCK_Q = 64  # TuningConfig.__post_init__: block_q and block_kv multiples of 64
BLOCK_KV = 64
MAX_CONCURRENT_STEPS = 2  # at least 2 (TuningConfig.__post_init__)
HOPPER = 9.0  # the compute capability whose instructions (wgmma, TMA) the kernel uses
# _attention_forward raises ValueError for causal on a CUDA runtime in [12.8.0, 12.9.1).
CAUSAL_BROKEN_CUDA = (12080, 12091)


def _base_constraints() -> tuple[ShapeConstraint, ...]:
    return (
        ShapeConstraint(
            name="head_dim_multiple_of_64",
            reason="_attention_forward raises ValueError unless head_dim is a multiple of 64",
            holds=lambda shape, spec: shape.head_dim % 64 == 0,
            basis="raises",
            exceptions=("ValueError",),
        ),
        ShapeConstraint(
            name="kv_len_multiple_of_block_kv",
            reason=f"_attention_forward raises ValueError unless kv_len is a multiple of block_kv "
            f"({BLOCK_KV})",
            holds=lambda shape, spec: shape.kv_len % BLOCK_KV == 0,
            basis="raises",
            exceptions=("ValueError",),
        ),
        ShapeConstraint(
            name="q_len_multiple_of_two_q_blocks",
            reason=f"_attention_forward raises NotImplementedError unless q_len is a multiple of "
            f"2 * block_q ({2 * BLOCK_Q}): two compute warpgroups take block_q rows each",
            holds=lambda shape, spec: shape.q_len % (2 * BLOCK_Q) == 0,
            basis="raises",
            exceptions=("NotImplementedError",),
        ),
    )


def cuda_runtime_version() -> int | None:
    """The CUDA runtime jaxlib loaded (e.g. 12080 for 12.8.0); None without one (no CUDA plugin)."""
    try:
        from jax._src.lib import cuda_versions
    except ImportError:
        return None
    return None if cuda_versions is None else int(cuda_versions.cuda_runtime_get_version())


def constraints(cuda_runtime: int | None) -> tuple[ShapeConstraint, ...]:
    """What the kernel rejects, given the loaded CUDA runtime (None: none loaded)."""
    low, high = CAUSAL_BROKEN_CUDA
    if cuda_runtime is None or not low <= cuda_runtime < high:
        return _base_constraints()
    causal = ShapeConstraint(
        name="no_causal_on_cuda_12_8",
        reason=f"_attention_forward raises ValueError for causal masking with CUDA runtime "
        f"{cuda_runtime} (12.8.0 to before 12.9.1: a ptxas miscompilation)",
        holds=lambda shape, spec: not spec.causal,
        basis="raises",
        exceptions=("ValueError",),
    )
    return (*_base_constraints(), causal)


@dataclasses.dataclass(frozen=True)
class _Api:
    attention: Any  # attention(q, k, v, config, save_residuals)
    config_class: type  # TuningConfig
    cuda_versions: Any  # jaxlib's CUDA runtime bindings, None without the CUDA plugin


def _load_api() -> _Api:
    module = importlib.import_module(MODULE)
    return _Api(module.attention, module.TuningConfig, getattr(module, "cuda_versions", None))


def compute_capability() -> float:
    """The default device's compute capability (9.0 for Hopper); 0.0 when it reports none."""
    import jax

    return float(getattr(jax.devices()[0], "compute_capability", 0.0) or 0.0)


# --- the translation: a pure function of JAX arrays --------------------------------------


def mgpu_forward(attention, config, q, k, v, *, scale):
    """Canonical ``[B, H, S, D]`` -> (out ``[B, Hq, Sq, D]``, lse ``[B, Hq, Sq]`` float32, natural
    log) through ``attention(q, k, v, config, save_residuals=True)`` in ``[B, T, N, H]``."""
    import jax.numpy as jnp

    to_btnh = (0, 2, 1, 3)  # its own inverse
    scaled = (q.astype(jnp.float32) * jnp.float32(scale)).astype(q.dtype)  # no scale argument
    out, (lse2,) = attention(
        jnp.transpose(scaled, to_btnh), jnp.transpose(k, to_btnh), jnp.transpose(v, to_btnh), config, True
    )
    return jnp.transpose(out, to_btnh), lse2.astype(jnp.float32) * jnp.float32(math.log(2.0))


# --- the adapter --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class PallasMgpuAdapter:
    """JAX's Mosaic GPU flash attention, forward only. Canonical ``[B, H, S, D]``."""

    name: str = "pallas_mgpu"
    description: str = "jax.experimental.pallas.ops.gpu.attention_mgpu.attention (Mosaic GPU, Hopper+)"
    _cache: CompiledCache = dataclasses.field(default_factory=CompiledCache, repr=False)

    def availability(self) -> Availability:
        try:
            api = _load_api()
            backend = default_backend()
        except Exception as error:  # any import/API failure means "unavailable", never a crash
            return unavailable_because(error, f"importing {MODULE}")
        versions = installed_jax_versions()
        needs = (
            f"JAX's Mosaic GPU flash attention needs an NVIDIA GPU of compute capability {HOPPER} or "
            "newer (Hopper: warpgroup matmuls and TMA copies)"
        )
        if backend != "gpu":
            return Availability(
                False,
                f"{needs}; JAX runs on {backend} here, and no interpreter runs it (without CUDA, "
                "_attention_forward asserts jaxlib's CUDA runtime before it builds a kernel)",
                versions,
            )
        if api.cuda_versions is None:
            return Availability(False, f"{needs}; this jaxlib has no CUDA runtime bindings", versions)
        capability = compute_capability()
        if capability < HOPPER:
            return Availability(False, f"{needs}; this GPU has compute capability {capability}", versions)
        return Availability(True, "", versions, "native", "natively on the GPU (Mosaic GPU)")

    def capabilities(self) -> Capabilities:
        return Capabilities(
            jax_runtime=True,
            dtypes=("bfloat16", "float16"),  # anything else: NotImplementedError
            causal_alignments=("top_left",),
            gqa=True,
            lse=True,
            fully_masked_rows="unspecified",
            constraints=constraints(cuda_runtime_version()),
        )

    def _config(self, api: _Api, causal: bool) -> Any:
        return api.config_class(
            block_q=BLOCK_Q, block_kv=BLOCK_KV, max_concurrent_steps=MAX_CONCURRENT_STEPS, causal=causal
        )

    def _description(self, inputs: AttentionInputs, spec: AttentionSpec) -> CallDescription:
        """``mgpu_forward`` on the module's ``attention`` and its TuningConfig (written in a script as
        the constructor call that makes it), on q, k and v; natively, as nothing interprets it."""
        api = _load_api()
        config = self._config(api, spec.causal)
        bound = (
            Module("kernel", MODULE, api.attention, attribute="attention"),
            constructed("config", config, "TuningConfig"),
        )
        scale = (("scale", spec.resolved_scale(inputs.shape.head_dim)),)
        arrays = tuple(Name(n) for n in ("q", "k", "v"))
        return CallDescription(
            mgpu_forward, arrays, bound, scale, note=f"{self.description}; config {config}"
        )

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        """``out: [B, Hq, Sq, D]`` in the input dtype; ``lse: [B, Hq, Sq]`` float32."""
        described = self._description(inputs, spec)
        ran = f"attention_mgpu (Mosaic GPU, natively); config {self._config(_load_api(), spec.causal)}"
        (out, lse), ran = self._cache.run(
            cache_key(described, inputs), jax_call(described, inputs), lambda _: ran
        )
        return SubjectOutput(out=out, lse=lse, ran=ran)

    def standalone(self, inputs: AttentionInputs, spec: AttentionSpec) -> StandaloneCall:
        """The forward call as standalone script text, rendered from its description."""
        return standalone(self._description(inputs, spec))

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError("pallas_mgpu declares no backward (capabilities().backward is False)")
