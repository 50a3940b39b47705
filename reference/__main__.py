"""Demo: the float64 reference on a small causal GQA case.  ``python -m reference``"""

from __future__ import annotations

import numpy as np

from reference import AttentionInputs, AttentionSpec, attention_backward, attention_forward


def main() -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 5, 8))
    k = rng.standard_normal((1, 2, 7, 8))
    v = rng.standard_normal((1, 2, 7, 8))
    inputs = AttentionInputs(q=q, k=k, v=v, kv_lengths=np.array([6]))
    for alignment in ("top_left", "bottom_right"):
        spec = AttentionSpec(causal=True, alignment=alignment, softcap=20.0)
        fwd = attention_forward(inputs, spec)
        grads = attention_backward(inputs, rng.standard_normal(fwd.out.shape), spec, fwd)
        print(
            f"{alignment:>12}: lse[0,0] = {np.round(fwd.lse[0, 0], 4)}; "
            f"fully masked rows = {int(fwd.fully_masked.sum())}; |dq| = {np.abs(grads.dq).sum():.4f}"
        )


if __name__ == "__main__":
    main()
