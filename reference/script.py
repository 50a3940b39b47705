"""The float64 answer as statements of a standalone repro script (``conformance/judge/standalone.py``).

Each function takes a case (``conformance.plan.cases.Case``, read by attribute) and returns the
``reference/dense.py`` functions to embed and the statements that use them, only for the
features the case has: the reference owns what its short form computes. NumPy only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reference import dense


def constants(case: Any) -> list[str]:
    """The case's semantic constants the answer's statements read (``CAUSAL``, ``WINDOW``, ...)."""
    lines = []
    if case.causal:
        lines.append(f"CAUSAL = True  # {case.alignment} alignment")
    if case.window is not None:
        lines.append(f"WINDOW = {case.window!r}  # (left, right), inclusive; None = unbounded")
    if case.chunk is not None:
        lines.append(f"CHUNK = {case.chunk!r}  # keys per chunk, chunks from key 0 (chunked causal)")
    if case.softcap is not None:
        lines.append(f"SOFTCAP = {case.softcap!r}")
    return lines


def visibility(case: Any) -> tuple[list[Callable[..., Any]], str]:
    """(dense mask functions to embed, the statements that build ``visible`` [B, Hq, Sq, Sk])."""
    offset = 0 if case.alignment == "top_left" else case.kv_len - case.q_len
    if case.alignment == "bottom_right_valid":  # one diagonal per batch row, at its valid lengths
        q_valid = case.q_lengths or (case.q_len,) * case.batch
        kv_valid = case.kv_lengths or (case.kv_len,) * case.batch
        offsets = [kv - q for q, kv in zip(q_valid, kv_valid, strict=True)]
    functions: list[Callable[..., Any]] = []
    lines = ["visible = np.ones((1, 1, SQ, SK), dtype=bool)  # which keys each query may see"]

    def per_row(call: str) -> str:
        if case.alignment != "bottom_right_valid":
            return call.format(offset=offset)
        return f"np.stack([{call.format(offset='o')} for o in {offsets}])[:, None]"

    if case.causal:
        functions.append(dense.causal_visible)
        lines.append(f"visible = visible & {per_row('causal_visible(SQ, SK, {offset})')}  # {case.alignment}")
    if case.chunk is not None:
        functions.append(dense.chunk_visible)
        lines.append(
            f"visible = visible & {per_row('chunk_visible(SQ, SK, {offset}, CHUNK)')}  # {case.alignment}"
        )
    if case.window is not None:
        functions.append(dense.window_visible)
        lines.append(
            f"visible = visible & {per_row('window_visible(SQ, SK, {offset}, *WINDOW)')}  # {case.alignment}"
        )
    if case.segments:
        functions.append(dense.segment_visible)
        lines.append("visible = visible & segment_visible(q_segment_ids, kv_segment_ids)")
    if case.uses_padding:
        functions.append(dense.length_visible)
        lines.append("visible = visible & length_visible(SQ, SK, q_lengths, kv_lengths)")
    if case.mask is not None:
        lines.append("visible = visible & mask")
    if case.bias_fill is not None and case.bias_fill_value == "-inf":
        lines.append("visible = visible & ~np.isneginf(bias)  # a -inf bias masks its key, softcap or not")
    lines.append("visible = np.broadcast_to(visible, (B, HQ, SQ, SK))")
    return functions, "\n".join(lines) + "\n"


def answer(
    case: Any, backward: bool, gradients: tuple[str, ...], dout: str
) -> tuple[list[Callable[..., Any]], str, str]:
    """(dense functions to embed, the forward statements, the gradient statements after dout);
    ``gradients``: the feature gradients the subject returns (``dsinks``: the script computes its
    reference); ``dout``: the statement that draws dout, zero on rows that see no key."""
    functions: list[Callable[..., Any]] = [dense.logits]
    lines = ["s = logits(q, k, SCALE)  # float64 [B, Hq, Sq, Sk]"]
    if case.bias is not None:
        lines.append("s = s + bias.astype(np.float64)  # after the scale (docs/semantics.md)")
    tanh = "None"
    if case.softcap is not None:
        functions.append(dense.softcapped)
        lines.append("s, tanh = softcapped(s, SOFTCAP)")
        tanh = "tanh"
    functions.append(dense.softmax_attention)
    if case.sinks is not None:
        functions.append(dense.sink_key)
        lines.append(
            "s_sink, visible_sink, v_sink = sink_key(s, visible, v, sinks)  # the sink: a key of value 0"
        )
        lines.append("ref_out, ref_lse, p = softmax_attention(s_sink, visible_sink, v_sink)")
        lines.append("p, p_sink = p[..., :-1], p[..., -1]  # the keys' weights, the sink's share")
    else:
        lines.append("ref_out, ref_lse, p = softmax_attention(s, visible, v)")
    lines.append("valid = np.isfinite(ref_lse)  # [B, Hq, Sq] rows that see some key; only they are judged")
    grads = []
    if backward:
        functions += [dense.group_sum, dense.attention_grads]
        grads.append(dout)
        grads.append(
            f"ref_dq, ref_dk, ref_dv, dz = attention_grads(q, k, v, p, ref_out, dout, SCALE, {tanh})"
        )
        if case.bias is not None:
            functions.append(dense.sum_to)
            grads.append("ref_dbias = sum_to(dz, bias.shape)  # summed over the bias's broadcast axes")
        if case.sinks is not None and "dsinks" in gradients:
            functions.append(dense.sink_grad)
            grads.append("ref_dsinks = sink_grad(p_sink, ref_out, dout)  # summed over batch and query rows")
    return functions, "\n".join(lines) + "\n", "\n".join(grads) + ("\n" if grads else "")
