"""The float64 attention oracle. Semantics: ``reference.spec`` and ``docs/semantics.md``."""

from reference.attention import ReferenceGrads, ReferenceOutput, attention_backward, attention_forward
from reference.spec import AttentionInputs, AttentionShape, AttentionSpec, validate

__all__ = [
    "AttentionInputs",
    "AttentionShape",
    "AttentionSpec",
    "ReferenceGrads",
    "ReferenceOutput",
    "attention_backward",
    "attention_forward",
    "validate",
]
