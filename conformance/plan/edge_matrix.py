"""The curated edge matrix: explicit cases that break attention kernels in practice.

Each entry is a template (no subject, no dtype) with the level that first runs it:
0 in every profile (ci), 1 from ``dev``, 2 only in ``thorough``. The catalogue
expands each template over every subject and every dtype the subject declares,
then files it as runnable, unsupported, or must-raise per the subject's
Capabilities and ShapeConstraints.

A subject that declares tunables (``Capabilities.tunables``) also gets edge *configs*
(``config_cases``), derived from its declaration alone: the smallest legal blocks,
block_q < block_k and the reverse, a minor block smaller than its major, backward blocks
unlike the forward ones, blocks as long as the whole sequence, each flag flipped and each
other choice taken.
They ride on a few small shapes only (interpret-mode kernels are slow).
"""

from __future__ import annotations

import dataclasses

from conformance.plan.cases import Case
from kernels.contract import features
from kernels.contract.dtypes import FP8_DTYPES
from kernels.contract.kv_storage_names import storage_parts
from kernels.contract.tunables import Config, Tunable, Tunables

CURATED_LENGTHS = (1, 7, 113, 127, 128, 129, 1000, 1023)


def _t(**fields) -> Case:
    return Case(subject="", dtype="", **fields)


def _levelled() -> list[tuple[int, Case]]:
    """(level, template) pairs. Sizes stay small where the edge is not about size,
    because interpret-mode kernels cost up to seconds per call."""
    out: list[tuple[int, Case]] = []
    add = lambda level, **f: out.append((level, _t(**f)))  # noqa: E731

    # Plain attention, each input kind.
    add(0)
    add(0, input_kind="large")
    add(0, input_kind="integers")
    add(0, scale=0.3)

    # Lengths: block tails, single rows, primes, one short of / past a block.
    for n in CURATED_LENGTHS:
        add(0 if n in (1, 7, 113, 128, 129) else 1, q_len=n, kv_len=n, causal=True)
    for n in (1, 113, 129, 1023):
        add(0 if n == 113 else 1, q_len=n, kv_len=n)
    add(2, q_len=1000, kv_len=1000, causal=True, alignment="bottom_right", head_dim=128, v_head_dim=128)

    # Sq != Sk, both directions, both alignments (bottom-right with Sq > Sk masks whole rows).
    for sq, sk in ((128, 256), (256, 128)):
        for align in ("top_left", "bottom_right"):
            add(0, q_len=sq, kv_len=sk, causal=True, alignment=align, batch=2, q_heads=2, kv_heads=2)
    for sq, sk in ((113, 129), (129, 113), (1, 128), (7, 1000)):
        for align in ("top_left", "bottom_right"):
            core = sk <= 129 and (align == "bottom_right" or sq != 129)
            add(0 if core else 1, q_len=sq, kv_len=sk, causal=True, alignment=align)
    add(1, q_len=128, kv_len=1024, causal=True, alignment="bottom_right")
    add(1, q_len=384, kv_len=128)

    # Head dims and Dv != D.
    for d in (64, 96, 128, 256):
        add(0 if d in (96, 128) else 1, head_dim=d, v_head_dim=d, causal=True)
    add(2, head_dim=256, v_head_dim=256, q_len=512, kv_len=512)
    add(0, head_dim=64, v_head_dim=128)
    add(1, head_dim=128, v_head_dim=64, causal=True)

    # Batch > 1 with different data per batch; GQA 2/4/8 and MQA.
    add(0, batch=3, q_heads=2, kv_heads=2, causal=True)
    add(0, q_heads=4, kv_heads=2, causal=True)
    add(1, q_heads=8, kv_heads=2)
    add(1, q_heads=16, kv_heads=2, causal=True, batch=2)
    add(0, q_heads=8, kv_heads=1, batch=2)
    add(1, q_heads=4, kv_heads=1, q_len=256, kv_len=128, causal=True, alignment="bottom_right")

    # Fully masked rows: by segments, by padding (a whole batch row with length 0).
    add(0, segments=3, batch=2, q_len=256, kv_len=256)
    add(0, segments=3, orphan_segment=True, batch=2, q_len=256, kv_len=256, causal=True)
    add(0, batch=3, q_lengths=(256, 100, 0), kv_lengths=(256, 130, 17), q_len=256, kv_len=256)
    add(0, batch=2, kv_lengths=(128, 0), causal=True, q_len=128, kv_len=256)
    add(
        0,
        batch=3,
        q_lengths=(256, 100, 0),
        kv_lengths=(256, 130, 17),
        q_len=256,
        kv_len=256,
        input_kind="nan_padding",
    )
    add(
        0,
        batch=2,
        kv_lengths=(200, 1),
        q_len=128,
        kv_len=256,
        causal=True,
        alignment="bottom_right",
        input_kind="nan_padding",
    )
    add(0, segments=3, orphan_segment=True, batch=2, q_len=256, kv_len=256, input_kind="nan_padding")
    add(1, batch=2, segments=4, kv_lengths=(256, 64), q_len=256, kv_len=256, q_heads=4, kv_heads=2)

    # Windows: 0 (the diagonal only), 1, one-sided, wider than the sequence; with causal.
    for window in ((0, 0), (1, 1), (0, 1), (1, 0)):
        add(0 if window[0] == window[1] else 1, window=window)
    add(0, window=(300, 300), q_len=256, kv_len=256)
    add(0, window=(16, 0), causal=True, q_len=256, kv_len=256)
    add(0, window=(4, 4), q_len=128, kv_len=256, alignment="bottom_right")
    add(1, window=(None, 8), q_len=256, kv_len=128)
    add(
        1,
        window=(64, None),
        causal=True,
        q_len=256,
        kv_len=256,
        alignment="bottom_right",
        q_heads=4,
        kv_heads=1,
    )

    # Softcap near the logits' scale (std 2) and far from it; with large logits.
    add(0, softcap=1.0)
    add(0, softcap=30.0, causal=True)
    add(1, softcap=5.0, input_kind="large")

    # Bias: full, and with each broadcast pattern; bias with a mask.
    add(0, bias="bhqk", batch=2, q_heads=2, kv_heads=2)
    add(0, bias="1h1k", batch=2, q_heads=2, kv_heads=2, causal=True)
    add(0, bias="b11k", batch=2, q_heads=2, kv_heads=2)
    add(1, bias="11qk", batch=2, q_heads=2, kv_heads=2)
    add(1, bias="111k", batch=2, q_heads=4, kv_heads=2, softcap=5.0)
    add(1, bias="b1qk", batch=2, q_heads=2, kv_heads=2, segments=2)

    # -inf and large negatives in the bias (the masks users pass as bias, as jax.nn's docs say),
    # over the subject's kv block (``bias_fill_block``, set per subject). A whole first block of
    # -inf: an online softmax whose running max starts at -inf unguarded gives NaN on every row.
    fill = dict(q_len=128, kv_len=256)
    add(0, bias="bhqk", bias_fill="first_block", **fill)
    # A whole row of -inf: fully masked, the subject's declared convention; B, H > 1 around it.
    add(0, bias="b1qk", bias_fill="row", batch=2, q_heads=2, kv_heads=2, q_len=128, kv_len=128, causal=True)
    # -inf under softcap still masks (docs/semantics.md); cap-after-bias subjects declare otherwise.
    add(0, bias="1h1k", bias_fill="scattered", softcap=5.0, q_heads=2, kv_heads=2, **fill)
    # -1e9 on the last block, a partial one (Sk = 200): an ordinary (finite) bias value.
    add(0, bias="111k", bias_fill="last_block", bias_fill_value="-1e9", q_len=128, kv_len=200)
    add(1, bias="bhqk", bias_fill="first_block", bias_fill_value="min", **fill)
    add(1, bias="11qk", bias_fill="row", bias_fill_value="-1e9", q_len=128, kv_len=128)
    add(
        1,
        bias="bhqk",
        bias_fill="last_block",
        q_heads=4,
        kv_heads=2,
        causal=True,
        alignment="bottom_right",
        **fill,
    )
    add(1, bias="b11k", bias_fill="scattered", bias_fill_value="min", batch=2, q_heads=2, kv_heads=2, **fill)
    add(1, bias="1hqk", bias_fill="first_block", softcap=30.0, q_heads=2, kv_heads=2, **fill)

    # Boolean masks.
    add(0, mask="b1qk", batch=2, q_heads=2, kv_heads=2)
    add(1, mask="1hqk", q_heads=2, kv_heads=2, causal=True)

    # Attention sinks (one logit per query head in the denominator): extreme values (+30
    # dominates, -1e4 vanishes), with causal, with GQA, and with rows that see no key (only
    # the sink remains: out = 0, lse = sink). Small: they add interpret-mode calls.
    add(0, sinks="extreme", q_heads=3, kv_heads=3)
    add(0, sinks="normal", causal=True, q_heads=2, kv_heads=2)
    add(0, sinks="normal", causal=True, q_heads=4, kv_heads=2)
    add(0, sinks="extreme", segments=3, orphan_segment=True, batch=2, q_heads=2, kv_heads=2)

    # Decode (Sq = 1) against per-row kv lengths, as serving kernels run it. With 16-token
    # pages and 4-page compute blocks (paged_attention's defaults here), the rows end inside a
    # page (37), on a page edge (48), on a compute-block edge (128) and after one token.
    add(0, q_len=1, kv_len=128, batch=4, q_heads=4, kv_heads=2, kv_lengths=(37, 48, 128, 1))
    add(0, q_len=1, kv_len=256, batch=2, q_heads=8, kv_heads=1, kv_lengths=(200, 3))  # GQA 8:1
    add(1, q_len=1, kv_len=1024, batch=3, q_heads=2, kv_heads=2, kv_lengths=(1000, 5, 513), softcap=30.0)
    add(
        1, q_len=1, kv_len=256, batch=2, q_heads=4, kv_heads=4, kv_lengths=(70, 256), input_kind="nan_padding"
    )

    # Mixed prefill and decode packs, each row's diagonal at its valid lengths (ragged paged
    # attention): a decode row beside prefill rows, kv lengths ending inside a 16-token page, on
    # its edge and after one token, a row whose kv is its q (no cached prefix); then a sliding
    # window, softcap and GQA 8:1. D 128: the ragged kernel needs a multiple of 128.
    packs = dict(causal=True, alignment="bottom_right_valid", head_dim=128, v_head_dim=128)
    add(
        0,
        batch=3,
        q_heads=4,
        kv_heads=2,
        q_len=40,
        kv_len=80,
        q_lengths=(1, 40, 7),
        kv_lengths=(37, 40, 80),
        **packs,
    )
    add(
        0, batch=2, q_heads=8, kv_heads=1, q_len=16, kv_len=64, q_lengths=(16, 1), kv_lengths=(48, 1), **packs
    )
    add(1, batch=3, q_heads=2, kv_heads=2, q_len=32, kv_len=96, q_lengths=(32, 1, 5), kv_lengths=(96, 50, 5),
        window=(15, None), **packs)  # fmt: skip
    add(1, batch=2, q_heads=4, kv_heads=2, q_len=24, kv_len=64, q_lengths=(24, 1), kv_lengths=(64, 33),
        softcap=5.0, input_kind="nan_padding", **packs)  # fmt: skip

    # Longer sequences: several blocks in each direction.
    add(1, q_len=512, kv_len=512, causal=True, head_dim=128, v_head_dim=128, batch=2, q_heads=2, kv_heads=2)
    add(2, q_len=2048, kv_len=2048, causal=True, head_dim=128, v_head_dim=128)
    add(2, q_len=1024, kv_len=2048, causal=True, alignment="bottom_right", segments=5, batch=2)
    return out


# Chunked causal (Llama-4 local attention; chunks tile the key axis from key 0, a query in its
# diagonal's chunk). Chunk 1 (only the diagonal: an off-by-one at the chunk edge empties every row);
# 48 across 256 keys (no divisor: a short last chunk, and a chunk straddling the 128-key blocks a
# kernel skips or keeps whole); Sq != Sk both ways and both alignments (a query's chunk follows its
# diagonal, not its row index); a chunk as long as the sequence and longer (plain causal: a kernel
# that restarts chunks at a block or at the length is caught); with a window (ANDed), and with GQA
# and segment ids.
CHUNK_EDGES: tuple[tuple[int, Case], ...] = (
    (0, _t(causal=True, chunk=1)),
    (0, _t(causal=True, chunk=48, q_len=256, kv_len=256)),
    (0, _t(causal=True, chunk=64, q_len=128, kv_len=256)),
    (0, _t(causal=True, chunk=64, q_len=128, kv_len=256, alignment="bottom_right")),
    (1, _t(causal=True, chunk=64, q_len=256, kv_len=128)),
    (1, _t(causal=True, chunk=64, q_len=256, kv_len=128, alignment="bottom_right")),
    (1, _t(causal=True, chunk=256, q_len=256, kv_len=256)),
    (1, _t(causal=True, chunk=300, q_len=256, kv_len=256)),
    (1, _t(causal=True, chunk=48, window=(20, None), q_len=256, kv_len=256)),
    (1, _t(causal=True, chunk=64, q_heads=4, kv_heads=2, batch=2, segments=2)),
)


# Leading batch dims (``AttentionSpec.batch_dims``), for a subject whose call takes them
# (``Capabilities.leading_batch_dims``). Six requests as 2 x 3, causal with GQA; the same with
# per-request q and kv lengths, which the call gets shaped 2 x 3: an index that assumes one batch axis
# (``lengths[:, None]``) or flattens them in another order than q's rows is what they reach (one-key
# and full rows, no two rows alike, so a transposed order moves lengths); then 3 x 2 with a bias and
# a mask that carry the batch axis.
LEADING_BATCH_EDGES: tuple[tuple[int, Case], ...] = (
    (
        0,
        _t(batch=6, batch_dims=(2, 3), q_heads=4, kv_heads=2, q_len=64, kv_len=64, head_dim=32, v_head_dim=32,
           causal=True),
    ),
    (
        0,
        _t(batch=6, batch_dims=(2, 3), q_heads=2, kv_heads=2, q_len=64, kv_len=96, head_dim=32, v_head_dim=32,
           q_lengths=(64, 40, 1, 63, 17, 33), kv_lengths=(96, 17, 50, 1, 95, 40)),
    ),
    (
        1,
        _t(batch=6, batch_dims=(3, 2), q_heads=2, kv_heads=2, q_len=64, kv_len=64, head_dim=32, v_head_dim=32,
           bias="b1qk", mask="b11k"),
    ),
)  # fmt: skip


def leading_batch_cases(level: int) -> tuple[Case, ...]:
    """The leading-batch-dims templates up to ``level`` (``LEADING_BATCH_EDGES``)."""
    return tuple(t for lvl, t in LEADING_BATCH_EDGES if lvl <= level)


def chunk_cases(level: int) -> tuple[Case, ...]:
    """The chunked causal templates up to ``level`` (``CHUNK_EDGES``)."""
    return tuple(t for lvl, t in CHUNK_EDGES if lvl <= level)


def edge_cases(level: int) -> tuple[Case, ...]:
    """Templates of every level <= ``level``, in a fixed order, without duplicates."""
    seen: dict[Case, None] = {}
    for lvl, template in _levelled():
        if lvl <= level:
            seen.setdefault(template, None)
    return tuple(seen)


# The fp8 dtypes at level 0 (ci): what 8-bit values change, not every mask and length edge,
# which do not depend on the dtype (from dev on, fp8 gets the whole matrix). Each input kind
# (logits past float32's exp range, sparse integers, NaN past lengths and in orphan segments),
# a non-default scale, causal in both alignments with Sq != Sk, GQA, a softcap, a sink, and a
# bias (which some fp8 kernels reject: a declaration the raises check must see).
FP8_CORE: tuple[Case, ...] = (
    _t(),
    _t(input_kind="large"),
    _t(input_kind="integers"),
    _t(scale=0.3),
    _t(q_len=128, kv_len=256, causal=True, alignment="bottom_right", batch=2, q_heads=2, kv_heads=2),
    _t(q_heads=4, kv_heads=2, causal=True),
    _t(softcap=30.0, causal=True),
    _t(sinks="normal", causal=True, q_heads=4, kv_heads=2),
    _t(bias="bhqk", batch=2, q_heads=2, kv_heads=2),
    _t(
        batch=3,
        q_lengths=(256, 100, 0),
        kv_lengths=(256, 130, 17),
        q_len=256,
        kv_len=256,
        input_kind="nan_padding",
    ),
    _t(segments=3, orphan_segment=True, batch=2, q_len=256, kv_len=256, input_kind="nan_padding"),
    _t(q_len=1, kv_len=128, batch=4, q_heads=4, kv_heads=2, kv_lengths=(37, 48, 128, 1)),
)


def in_dtype(template: Case, dtype: str, level: int) -> bool:
    """Whether the matrix at ``level`` runs ``template`` in ``dtype`` (fp8 at level 0: ``FP8_CORE``)."""
    return level > 0 or dtype not in FP8_DTYPES or template in FP8_CORE


def instantiate(template: Case, subject: str, dtype: str) -> Case:
    return dataclasses.replace(template, subject=subject, dtype=dtype)


# Shapes that carry the edge configs: (level, template, every dtype?). D = 128 fits splash
# before JAX 0.5 (D % 128 == 0 there). Lengths of 256 hold
# two default blocks and are a power of two, so every declared block family fits them.
CONFIG_SHAPES: tuple[tuple[int, Case, bool], ...] = (
    (0, _t(q_len=256, kv_len=256, causal=True, head_dim=128, v_head_dim=128), False),
    (1, _t(q_len=256, kv_len=256, batch=2, q_heads=2, kv_heads=2), True),
    (2, _t(q_len=512, kv_len=256, causal=True, head_dim=128, v_head_dim=128), True),
)
# The edge configs of a decode kernel (its constraints pin Sq to 1, so it runs none of the
# shapes above): rows ending on a compute-block edge, after no token (a row the kernel must
# skip, then resume at the next), inside a page, and after one token. B and Hkv are even, so
# work split over two cores by batch or by KV head (paged_attention's megacore_mode) runs. Head
# dim 128, the decode kernels' own (paged_attention lowers for a TPU at multiples of 128 only).
DECODE_CONFIG_SHAPES: tuple[tuple[int, Case, bool], ...] = (
    (
        0,
        _t(
            q_len=1,
            kv_len=256,
            batch=4,
            q_heads=4,
            kv_heads=2,
            head_dim=128,
            v_head_dim=128,
            kv_lengths=(256, 0, 77, 1),
        ),
        True,
    ),
)
# The edge configs of a kernel that places the diagonal at each row's valid lengths only
# (ragged paged attention): one mixed prefill/decode pack.
VALID_ALIGNED_CONFIG_SHAPES: tuple[tuple[int, Case, bool], ...] = (
    (
        0,
        _t(
            q_len=24,
            kv_len=64,
            batch=2,
            q_heads=4,
            kv_heads=2,
            head_dim=128,
            v_head_dim=128,
            causal=True,
            alignment="bottom_right_valid",
            q_lengths=(24, 1),
            kv_lengths=(40, 64),
        ),  # fmt: skip
        False,
    ),
)


def edge_configs(tunables: Tunables, q_len: int, kv_len: int, batch: int) -> tuple[tuple[str, Config], ...]:
    """(label, config) pairs for a shape: the block edges where kernel bugs live, legal under
    the declaration and fitting the lengths; without duplicates or the default config."""
    blocks = [p for p in tunables.params if p.axis not in ("flag", "choice")]
    limits = {"q": q_len, "kv": kv_len, "batch": batch}

    def large(p: Tunable) -> int:
        return max(p.candidates(p.span(limits[p.axis])), default=p.smallest)

    fwd = [p for p in blocks if not p.backward and p.axis in ("q", "kv")]
    bwd = [p for p in blocks if p.backward]
    by_name = {p.name: p for p in blocks}
    raw: list[tuple[str, dict]] = [
        ("smallest", {p.name: p.smallest for p in blocks}),
        ("block_q<block_k", {p.name: p.smallest if p.axis == "q" else large(p) for p in fwd}),
        ("block_q>block_k", {p.name: large(p) if p.axis == "q" else p.smallest for p in fwd}),
        ("whole_sequence", {p.name: p.span(limits[p.axis]) for p in fwd}),
        ("backward_ne_forward", {p.name: p.smallest for p in bwd}),
        ("backward_ne_forward_large", {p.name: large(p) for p in bwd}),
    ]
    for p in blocks:
        if p.divides is not None:
            raw.append((f"{p.name}<{p.divides}", {p.divides: large(by_name[p.divides]), p.name: p.smallest}))
    raw += [
        (f"{p.name}={not p.default}", {p.name: not p.default}) for p in tunables.params if p.axis == "flag"
    ]
    raw += [(f"{p.name}={c}", {p.name: c}) for p in tunables.params for c in p.choices if c != p.default]
    out: dict[Config, str] = {}
    for label, config in raw:
        normal = tunables.normalized(config)
        if normal and not tunables.problems(normal) and normal not in out:
            out[normal] = label
    return tuple((label, config) for config, label in out.items())


# Config shape families, in order of preference: a subject gets the first whose first shape
# it can run (``conformance.plan.curated_sets`` picks it from the declaration).
CONFIG_SHAPE_FAMILIES: tuple[tuple[tuple[int, Case, bool], ...], ...] = (
    CONFIG_SHAPES,
    VALID_ALIGNED_CONFIG_SHAPES,
    DECODE_CONFIG_SHAPES,
)


def config_cases(
    tunables: Tunables, level: int, shapes: tuple[tuple[int, Case, bool], ...] = CONFIG_SHAPES
) -> tuple[Case, ...]:
    """A template with a config for each edge config on each of ``shapes`` up to ``level`` (shapes
    of a family of ``CONFIG_SHAPE_FAMILIES``); empty for a subject without tunables."""
    if not tunables:
        return ()
    out = []
    for lvl, shape, _ in shapes:
        if lvl <= level:
            for _, config in edge_configs(tunables, shape.q_len, shape.kv_len, shape.batch):
                out.append(dataclasses.replace(shape, config=config))
    return tuple(out)


# -- ragged serving batches: per-row length patterns at every batch position ---------------------
#
# Serving kernels (paged, ragged paged, anything taking per-row lengths) find each row's first page
# or token from a cumulative sum over the rows before it, so the bugs live where an empty, a
# one-token or a page-edge row sits *before* others. Each triple below is rotated over a batch of
# three, so each of its patterns sits in the first, the middle and the last row once. The lengths
# come from the subject's own declaration (``Tunables.length_boundaries``: its page and its default
# kv block, in tokens; ``kernels.contract.features.ragged_row_lengths``), never from its name. The patterns:
#   empty      0 keys: a finished request; its pages are none, the next row's offset must not move
#   one        1 key: a fresh decode step; a kernel that treats it as empty skips a live row
#   page+1     one key into a second page: a partial last page after a full one
#   block-1, block, block+1: one short of, on and one past a kv block (the kernel's default block,
#              or its page when it declares no larger block): the last block's tail, a block
#              skipped or read one too far
#   long       the whole sequence
# Subjects that take query lengths too get the same lengths for the queries of a row (clipped to
# Sq): an empty request has no query, a decode row one.
RAGGED_ROTATIONS: tuple[tuple[int, tuple[str, str, str]], ...] = (
    (0, ("empty", "one", "page+1")),
    (1, ("block-1", "block", "block+1")),
)
# Whole batches: every row empty (nothing to attend anywhere: no row may come out of another's
# pages); one long row among many short ones (a long row's blocks after short rows' offsets).
RAGGED_BATCHES: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (0, "all_empty", ("empty", "empty", "empty")),
    (1, "one_long", ("one", "page+1", "one", "long", "block-1", "one")),
)
# The shapes a pattern rides on, in order of preference (the first whose plain form the subject
# runs, as for configs): prefill rows (Sq = Sk); packs with each row's diagonal at its valid
# lengths (ragged paged attention: causal only, D 128); decode (Sq = 1). ``length`` is filled in.
RAGGED_SHAPES: tuple[Case, ...] = (
    _t(q_heads=2, kv_heads=1, head_dim=64, v_head_dim=64),
    _t(q_heads=2, kv_heads=1, head_dim=128, v_head_dim=128, causal=True, alignment="bottom_right_valid"),
    _t(q_len=1, q_heads=2, kv_heads=1, head_dim=128, v_head_dim=128),
)


@dataclasses.dataclass(frozen=True)
class RaggedPattern:
    """One planned ragged batch: its name, where each pattern sits (``"one@first"``), the row
    lengths by pattern name, and the level that first runs it."""

    level: int
    name: str
    rows: tuple[str, ...]

    @property
    def placements(self) -> tuple[str, ...]:
        """``pattern@position`` for the first, middle and last row (the note lists cases by them)."""
        last = len(self.rows) - 1
        where = {0: "first", last // 2: "middle", last: "last"}
        return tuple(f"{self.rows[i]}@{where[i]}" for i in sorted(where))


def ragged_patterns(level: int) -> tuple[RaggedPattern, ...]:
    """Every rotation of each triple and each whole batch, up to ``level``."""
    out = []
    for lvl, triple in RAGGED_ROTATIONS:
        for shift in range(3):
            rows = triple[shift:] + triple[:shift]
            out.append(RaggedPattern(lvl, "rotation_" + "-".join(triple) + f"_{shift}", rows))
    out += [RaggedPattern(lvl, name, rows) for lvl, name, rows in RAGGED_BATCHES]
    return tuple(p for p in out if p.level <= level)


def ragged_length(boundaries: tuple[int, ...]) -> int:
    """The sequence length the patterns ride on: two of the largest boundary, so a row one past a
    block still leaves a block for the long rows."""
    return 2 * (boundaries[-1] if boundaries else features.DEFAULT_BOUNDARY)


def ragged_case(shape: Case, pattern: RaggedPattern, boundaries: tuple[int, ...], q_lengths: bool) -> Case:
    """``shape`` (one of ``RAGGED_SHAPES``) carrying ``pattern``: kv lengths per row, and the same
    (clipped to Sq) as query lengths where the subject takes them and Sq > 1."""
    length = ragged_length(boundaries)
    lengths = features.ragged_row_lengths(boundaries, length)
    kv = tuple(lengths[name] for name in pattern.rows)
    q_len = shape.q_len if shape.q_len == 1 else length
    fields: dict = dict(batch=len(kv), q_len=q_len, kv_len=length, kv_lengths=kv)
    if q_lengths and q_len > 1:
        fields["q_lengths"] = tuple(min(n, q_len) for n in kv)
    return dataclasses.replace(shape, **fields)


# Quantized inputs (``Capabilities.q_storages``, ``kv_storages``): the shapes that carry them, the
# first one a subject runs: GQA with causal (a scale per head must follow the GQA group: a kernel
# that applies K's per-head scale to the wrong query heads fails here), a decode pack over pages,
# and a mixed prefill/decode pack (a serving kernel's diagonal at each row's valid lengths). D is
# 128 past the first: the TPU kernels lower only that.
STORAGE_SHAPES: tuple[Case, ...] = (
    _t(q_heads=4, kv_heads=2, causal=True),
    _t(
        q_len=1,
        kv_len=128,
        batch=4,
        q_heads=4,
        kv_heads=2,
        head_dim=128,
        v_head_dim=128,
        kv_lengths=(37, 48, 128, 1),
    ),
    VALID_ALIGNED_CONFIG_SHAPES[0][1],
)


def covering_storages(storages: tuple[str, ...]) -> tuple[str, ...]:
    """A few of ``storages`` that hold each element type and each scale group at least once:
    greedily the one that adds the most not yet held (the first declared among equals)."""
    parts = {s: set(storage_parts(s)) for s in storages}
    wanted = set().union(*parts.values()) if parts else set()
    out: list[str] = []
    while wanted:
        best = max(storages, key=lambda s: len(parts[s] & wanted))  # max keeps the first of equals
        out.append(best)
        wanted -= parts[best]
    return tuple(out)


def storage_pairs(q_storages: tuple[str, ...], kv_storages: tuple[str, ...], level: int) -> tuple[tuple, ...]:
    """(q storage, K/V storage) pairs a subject's curated storage cases carry: at level 0 enough that
    every declared element type and scale group appears for each tensor (q's rotated by one, so q
    and K/V differ in a case); from level 1 every declared storage of each tensor."""
    pick = (lambda s: s) if level > 0 else covering_storages
    qs, kvs = pick(q_storages), pick(kv_storages)
    count = max(len(qs), len(kvs))
    return tuple(
        (qs[(i + 1) % len(qs)] if qs else None, kvs[i % len(kvs)] if kvs else None) for i in range(count)
    )
