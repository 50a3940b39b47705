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
import functools
import zlib
from typing import Literal

import numpy as np

from kernels.contract import features as feature_table
from kernels.contract.tunables import Config, config_token, normalize
from reference.spec import AttentionInputs, AttentionShape, AttentionSpec

InputKind = Literal["normal", "large", "integers", "nan_padding"]
INPUT_KINDS: tuple[str, ...] = ("normal", "large", "integers", "nan_padding")

# The shape, dtype, values and tunables of a case; every optional input or option is a
# feature's field (``kernels/contract/features.py``), added to ``Case`` from the table.
CORE_FIELDS: tuple[tuple[str, object, object], ...] = (
    ("subject", str, dataclasses.MISSING),
    ("dtype", str, dataclasses.MISSING),
    ("batch", int, 1),
    ("q_heads", int, 1),
    ("kv_heads", int, 1),
    ("q_len", int, 128),
    ("kv_len", int, 128),
    ("head_dim", int, 64),
    ("v_head_dim", int, 64),
    ("input_kind", str, "normal"),
    ("config", Config, ()),
)


class _CaseBehaviour:
    """A single attention call to check, in canonical semantics (``docs/semantics.md``).

    Core fields: ``subject``, ``dtype``, the sizes (``batch``, ``q_heads``, ``kv_heads``,
    ``q_len``, ``kv_len``, ``head_dim``, ``v_head_dim``), ``input_kind`` (how values are
    drawn, ``conformance.judge.inputs``) and ``config`` (the subject's tunables this case
    sets, ``kernels.contract.tunables``, as sorted (name, value) pairs; () is the implementation's
    default; a mapping given here is stored sorted). Every other field is a feature's, as
    ``kernels/contract/features.py`` declares it (e.g. ``causal``/``alignment``, ``window``,
    ``segments``/``orphan_segment``, ``q_lengths``/``kv_lengths``, ``mask``, ``bias``,
    ``kv_storage``), with its meaning and default there.
    """

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "config", normalize(self.config))
        except (TypeError, ValueError):
            raise ValueError(
                f"config {self.config!r} must be name -> value pairs, e.g. {{'block_q': 64}}"
            ) from None
        if self.input_kind not in INPUT_KINDS:
            raise ValueError(f"unknown input kind {self.input_kind!r}; choose from {INPUT_KINDS}")
        problems = feature_table.problems(self)
        if problems:
            raise ValueError(problems[0])
        if self.input_kind == "nan_padding" and not self.padded:
            raise ValueError("input kind nan_padding needs lengths or segment ids (padding to fill)")
        # Fail at construction, with the spec's own message, rather than deep inside a check.
        self.spec  # noqa: B018

    # -- derived views -------------------------------------------------------------
    @property
    def spec(self) -> AttentionSpec:
        return AttentionSpec(
            **{name: getattr(self, name) for f in feature_table.FEATURES for name in f.spec_fields}
        )

    @property
    def shape(self) -> AttentionShape:
        return AttentionShape(
            self.batch, self.q_heads, self.kv_heads, self.q_len, self.kv_len, self.head_dim, self.v_head_dim
        )

    @property
    def bias_shape(self) -> tuple[int, ...] | None:
        return None if self.bias is None else feature_table.pattern_shape(self, self.bias)

    @property
    def mask_shape(self) -> tuple[int, ...] | None:
        return None if self.mask is None else feature_table.pattern_shape(self, self.mask)

    @property
    def uses_padding(self) -> bool:
        return self.q_lengths is not None or self.kv_lengths is not None

    @property
    def padded(self) -> bool:
        """Some feature leaves padding (lengths, segment ids) for ``nan_padding`` to fill."""
        return any(f.pads(self) for f in feature_table.FEATURES)

    @property
    def features(self) -> tuple[str, ...]:
        """Semantic features this case exercises: columns of the report's grid."""
        out = list(feature_table.grid_names(self))
        if self.q_len != self.kv_len:
            out.append("sq_ne_sk")
        if self.config:
            out.append("config")
        return tuple(out)

    # -- naming ------------------------------------------------------------------------
    # The ids are cached on the instance: a frozen case's fields never change (``replace``
    # makes a new one), and planning and sharding read them millions of times in a run.
    @functools.cached_property
    def semantic_id(self) -> str:
        """The id without the subject."""
        token = config_token(self.config)
        return f"{self.data_id}-{token}" if token else self.data_id

    @functools.cached_property
    def data_id(self) -> str:
        """The id without the subject and the config: the same data for every subject and config."""
        parts = [self.dtype]
        parts += feature_table.tokens(self) or ["full"]
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

    @functools.cached_property
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
        b = self.batch
        zero = np.zeros((), dtype=np.float32)
        arrays = {
            feature_input: value
            for f in feature_table.FEATURES
            for feature_input, value in f.skeleton(self, _standins).items()
        }
        return AttentionInputs(
            q=np.broadcast_to(zero, (b, self.q_heads, self.q_len, self.head_dim)),
            k=np.broadcast_to(zero, (b, self.kv_heads, self.kv_len, self.head_dim)),
            v=np.broadcast_to(zero, (b, self.kv_heads, self.kv_len, self.v_head_dim)),
            **arrays,
        )

    def request(self, b: int) -> _CaseBehaviour:
        """Request ``b`` of this case run alone: the same case at batch 1, with that request's own
        per-request fields (its lengths: ``features.request_fields``). Its arrays are the batch's,
        cut to row ``b`` (``conformance.judge.inputs.request_inputs``), never drawn from its own
        seed (which its id changes): the request is the same input, only its neighbours are gone."""
        if not 0 <= b < self.batch:
            raise ValueError(f"request {b} of a batch of {self.batch}: choose 0 to {self.batch - 1}")
        return dataclasses.replace(self, batch=1, **feature_table.request_fields(self, b))

    def field_values(self) -> dict[str, object]:
        """Every field but ``subject`` and ``dtype``, by name: what a record keeps to rebuild it."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if f.name not in ("subject", "dtype")
        }

    def words(self) -> str:
        """The features of the case in words (``kernels/contract/features.py``), for a review."""
        return ", ".join(feature_table.words(self))

    def summary(self) -> str:
        """The case in words, for failure messages."""
        shape = (
            f"B={self.batch} Hq={self.q_heads} Hkv={self.kv_heads} Sq={self.q_len} "
            f"Sk={self.kv_len} D={self.head_dim} Dv={self.v_head_dim}"
        )
        feats = ", ".join(feature_table.tokens(self)) or "no mask"
        config = ", ".join(f"{k}={v}" for k, v in self.config)
        tuned = f"; config {config}" if config else ""
        return f"{self.subject} {self.dtype} {shape}; {feats}; {self.input_kind} inputs{tuned}"


_KINDS = {"float": np.float32, "int": np.int32, "bool": bool}


def _standins(shape: tuple[int, ...], kind: str) -> np.ndarray:
    """A zero-cost array of ``shape`` (a broadcast scalar) for a skeleton; kind ``-inf``: a float
    one holding -inf (a bias with -inf, for the declarations that look for it)."""
    if kind == "-inf":
        return np.broadcast_to(np.array(-np.inf, np.float32), shape)
    return np.broadcast_to(np.zeros((), _KINDS[kind]), shape)


_standins.values = np.asarray  # type: ignore[attr-defined]  # lengths: the values themselves

Case = dataclasses.make_dataclass(
    "Case",
    [
        (
            name,
            kind,
            dataclasses.field() if default is dataclasses.MISSING else dataclasses.field(default=default),
        )
        for name, kind, default in CORE_FIELDS
    ]
    + [(f.name, f.type, dataclasses.field(default=f.default)) for f in feature_table.case_fields()],
    bases=(_CaseBehaviour,),
    frozen=True,
    namespace={"__module__": __name__, "__doc__": _CaseBehaviour.__doc__},
)
