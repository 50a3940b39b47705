"""One conformance case: shapes, dtype, semantics, masks and input kind, for one subject.

A ``Case`` is a frozen, hashable description; ``conformance.judge.inputs`` turns it into
arrays. Its id reads like a sentence and is unique:

    tpu_flash-bfloat16-causal_tl-B2-Hq4-Hkv4-Sq128-Sk256-D128
    xla-float32-seg3x-lenq100.128-B2-Hq2-Hkv1-Sq128-Sk128-D64-nan_padding
    tpu_flash-float32-causal_tl-B1-Hq1-Hkv1-Sq256-Sk256-D64-cfg-bk256-bq8

The random seed is derived from the id *without* the subject and the config, so every
subject and every config sees bit-identical inputs for the same case, and a case
rebuilt from its fields (e.g. in a repro script) gets the same data.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Literal

import numpy as np

from kernels.kv_storage import KV_STORAGES
from kernels.tunables import Config, config_token, normalize
from reference.spec import AttentionInputs, AttentionShape, AttentionSpec

InputKind = Literal["normal", "large", "integers", "nan_padding"]
INPUT_KINDS: tuple[str, ...] = ("normal", "large", "integers", "nan_padding")
# How sink logits are drawn (conformance.plan.draws.draw_sinks): ``normal`` near a row's
# lse, so the sink takes a real share of the denominator; ``extreme`` gives the heads in
# turn +30 (the sink dominates), -1e4 (it vanishes) and a normal draw.
SINK_KINDS: tuple[str, ...] = ("normal", "extreme")
BIAS_AXES = "bhqk"  # a broadcast pattern names the full axes; "1" marks a broadcast (size-1) axis


@dataclasses.dataclass(frozen=True)
class Case:
    """A single attention call to check, in canonical semantics (``docs/semantics.md``).

    segments:       number of contiguous segment-id runs per batch row (0 = no segment ids).
    orphan_segment: the q side's first run gets an id no key has, so those rows are fully masked.
    q_lengths, kv_lengths: per-batch valid lengths (``len == batch``), or None.
    bias, mask:     broadcast pattern over ``bhqk`` such as ``"1h1k"`` (``1`` = size-1 axis), or None.
    input_kind:     how values are drawn (``conformance.judge.inputs``).
    config:         the subject's tunables this case sets (``kernels.tunables``), as sorted
                    (name, value) pairs; () is the implementation's default. A mapping given
                    here is stored sorted.
    sinks:          None, or how the per-head sink logits are drawn (``SINK_KINDS``).
    kv_storage:     None, or how the subject stores K/V (``kernels.kv_storage``, e.g. ``"int8"``):
                    set from its ``Capabilities.kv_storage``; K/V are rounded to it.
    """

    subject: str
    dtype: str
    batch: int = 1
    q_heads: int = 1
    kv_heads: int = 1
    q_len: int = 128
    kv_len: int = 128
    head_dim: int = 64
    v_head_dim: int = 64
    causal: bool = False
    alignment: str = "top_left"
    window: tuple[int | None, int | None] | None = None
    softcap: float | None = None
    scale: float | None = None
    segments: int = 0
    orphan_segment: bool = False
    q_lengths: tuple[int, ...] | None = None
    kv_lengths: tuple[int, ...] | None = None
    bias: str | None = None
    mask: str | None = None
    input_kind: str = "normal"
    config: Config = ()
    sinks: str | None = None
    kv_storage: str | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "config", normalize(self.config))
        except (TypeError, ValueError):
            raise ValueError(
                f"config {self.config!r} must be name -> value pairs, e.g. {{'block_q': 64}}"
            ) from None
        if self.input_kind not in INPUT_KINDS:
            raise ValueError(f"unknown input kind {self.input_kind!r}; choose from {INPUT_KINDS}")
        if self.sinks is not None and self.sinks not in SINK_KINDS:
            raise ValueError(f"unknown sink kind {self.sinks!r}; choose from {SINK_KINDS} (or None)")
        if self.kv_storage is not None and self.kv_storage not in KV_STORAGES:
            raise ValueError(f"unknown kv_storage {self.kv_storage!r}; choose from {KV_STORAGES} (or None)")
        for name in ("bias", "mask"):
            pattern = getattr(self, name)
            if pattern is not None and not _is_pattern(pattern):
                raise ValueError(f"{name} pattern {pattern!r} must be 4 of 'bhqk' or '1', e.g. '1h1k'")
        for name, size in (("q_lengths", self.batch), ("kv_lengths", self.batch)):
            lengths = getattr(self, name)
            if lengths is not None and len(lengths) != size:
                raise ValueError(f"{name} needs one length per batch element ({size}), got {lengths}")
        if self.input_kind == "nan_padding" and not (self.uses_padding or self.segments):
            raise ValueError("input kind nan_padding needs lengths or segment ids (padding to fill)")
        # Fail at construction, with the spec's own message, rather than deep inside a check.
        self.spec  # noqa: B018

    # -- derived views -------------------------------------------------------------
    @property
    def spec(self) -> AttentionSpec:
        return AttentionSpec(
            scale=self.scale,
            softcap=self.softcap,
            causal=self.causal,
            alignment=self.alignment,
            window=self.window,  # type: ignore[arg-type]
        )

    @property
    def shape(self) -> AttentionShape:
        return AttentionShape(
            self.batch, self.q_heads, self.kv_heads, self.q_len, self.kv_len, self.head_dim, self.v_head_dim
        )

    @property
    def bias_shape(self) -> tuple[int, ...] | None:
        return None if self.bias is None else self._pattern_shape(self.bias)

    @property
    def mask_shape(self) -> tuple[int, ...] | None:
        return None if self.mask is None else self._pattern_shape(self.mask)

    def _pattern_shape(self, pattern: str) -> tuple[int, ...]:
        full = (self.batch, self.q_heads, self.q_len, self.kv_len)
        return tuple(1 if c == "1" else n for c, n in zip(pattern, full, strict=True))

    @property
    def uses_padding(self) -> bool:
        return self.q_lengths is not None or self.kv_lengths is not None

    @property
    def features(self) -> tuple[str, ...]:
        """Semantic features this case exercises: columns of the report's grid."""
        out = []
        if self.causal:
            out.append(f"causal_{self.alignment}")
        if self.window is not None:
            out.append("window")
        if self.segments:
            out.append("segment_ids")
        if self.uses_padding:
            out.append("lengths")
        if self.mask is not None:
            out.append("bool_mask")
        if self.bias is not None:
            out.append("bias")
        if self.softcap is not None:
            out.append("softcap")
        if self.sinks is not None:
            out.append("sinks")
        if self.kv_storage is not None:
            out.append(f"kv_{self.kv_storage}")
        if self.kv_heads == 1 and self.q_heads > 1:
            out.append("mqa")
        elif self.kv_heads != self.q_heads:
            out.append("gqa")
        if self.v_head_dim != self.head_dim:
            out.append("dv_ne_d")
        if self.q_len != self.kv_len:
            out.append("sq_ne_sk")
        if self.config:
            out.append("config")
        return tuple(out)

    # -- naming ------------------------------------------------------------------------
    @property
    def semantic_id(self) -> str:
        """The id without the subject."""
        token = config_token(self.config)
        return f"{self.data_id}-{token}" if token else self.data_id

    @property
    def data_id(self) -> str:
        """The id without the subject and the config: the same data for every subject and config."""
        parts = [self.dtype]
        parts += _feature_tokens(self) or ["full"]
        parts += [
            f"B{self.batch}",
            f"Hq{self.q_heads}",
            f"Hkv{self.kv_heads}",
            f"Sq{self.q_len}",
            f"Sk{self.kv_len}",
            f"D{self.head_dim}",
        ]
        if self.v_head_dim != self.head_dim:
            parts.append(f"Dv{self.v_head_dim}")
        if self.input_kind != "normal":
            parts.append(self.input_kind)
        return "-".join(parts)

    @property
    def case_id(self) -> str:
        return f"{self.subject}-{self.semantic_id}"

    @property
    def compile_key(self) -> str:
        """The case id without the kind of values: cases with equal keys have the same subject,
        dtype, shapes and static options, so a subject's jitted call compiled for one serves
        the others (the run orders them side by side for that)."""
        return dataclasses.replace(self, input_kind="normal").case_id

    @property
    def seed(self) -> int:
        """A stable 32-bit seed (``zlib.crc32``; Python's ``hash`` is salted per process)."""
        return zlib.crc32(self.data_id.encode())

    def skeleton(self) -> AttentionInputs:
        """Zero-cost stand-in inputs with the right shapes and which-fields-are-set, for
        ``Capabilities.admits`` (which looks at shapes only)."""
        zero = np.zeros((), dtype=np.float32)
        b = self.batch

        def ints(n: int) -> np.ndarray:
            return np.broadcast_to(np.zeros((), np.int32), (b, n))

        return AttentionInputs(
            q=np.broadcast_to(zero, (b, self.q_heads, self.q_len, self.head_dim)),
            k=np.broadcast_to(zero, (b, self.kv_heads, self.kv_len, self.head_dim)),
            v=np.broadcast_to(zero, (b, self.kv_heads, self.kv_len, self.v_head_dim)),
            bias=None if self.bias is None else np.broadcast_to(zero, self.bias_shape),
            q_segment_ids=ints(self.q_len) if self.segments else None,
            kv_segment_ids=ints(self.kv_len) if self.segments else None,
            q_lengths=None if self.q_lengths is None else np.asarray(self.q_lengths),
            kv_lengths=None if self.kv_lengths is None else np.asarray(self.kv_lengths),
            mask=None if self.mask is None else np.broadcast_to(np.ones((), bool), self.mask_shape),
            sinks=None if self.sinks is None else np.broadcast_to(zero, (self.q_heads,)),
        )

    def summary(self) -> str:
        """The case in words, for failure messages."""
        shape = (
            f"B={self.batch} Hq={self.q_heads} Hkv={self.kv_heads} Sq={self.q_len} "
            f"Sk={self.kv_len} D={self.head_dim} Dv={self.v_head_dim}"
        )
        feats = ", ".join(_feature_tokens(self)) or "no mask"
        config = ", ".join(f"{k}={v}" for k, v in self.config)
        tuned = f"; config {config}" if config else ""
        return f"{self.subject} {self.dtype} {shape}; {feats}; {self.input_kind} inputs{tuned}"


def _is_pattern(pattern: str) -> bool:
    return len(pattern) == 4 and all(c in (axis, "1") for c, axis in zip(pattern, BIAS_AXES, strict=True))


def _edge(value: int | None) -> str:
    return "inf" if value is None else str(value)


def _feature_tokens(case: Case) -> list[str]:
    tokens = []
    align = {"top_left": "tl", "bottom_right": "br", "bottom_right_valid": "brv"}[case.alignment]
    if case.causal:
        tokens.append(f"causal_{align}")
    if case.window is not None:
        left, right = case.window
        tokens.append(f"win{_edge(left)}.{_edge(right)}" + ("" if case.causal else f"_{align}"))
    if case.segments:
        tokens.append(f"seg{case.segments}" + ("x" if case.orphan_segment else ""))
    if case.q_lengths is not None:
        tokens.append("lenq" + ".".join(map(str, case.q_lengths)))
    if case.kv_lengths is not None:
        tokens.append("lenkv" + ".".join(map(str, case.kv_lengths)))
    if case.mask is not None:
        tokens.append(f"mask_{case.mask}")
    if case.bias is not None:
        tokens.append(f"bias_{case.bias}")
    if case.softcap is not None:
        tokens.append(f"cap{case.softcap:g}")
    if case.scale is not None:
        tokens.append(f"scale{case.scale:g}")
    if case.sinks is not None:
        tokens.append("sink" if case.sinks == "normal" else f"sink_{case.sinks}")
    if case.kv_storage is not None:
        tokens.append(f"kv{case.kv_storage}")
    return tokens
