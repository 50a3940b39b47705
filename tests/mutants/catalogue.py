"""The mutant catalogue: every deliberately wrong implementation, and the check meant to reject it.

``MUTANTS`` is what ``tests/test_mutation.py`` runs the suite against; ``CONTROLS`` are
correct subjects that must pass every check they run. Adding a mutant is one line here
plus its function; the meta-test picks it up.
"""

from __future__ import annotations

import dataclasses

PACKAGE = "tests.mutants"


@dataclasses.dataclass(frozen=True)
class Mutant:
    """name: short id. path: ``--impl`` dotted path. checks: the suite checks meant to reject
    it (each must record a ``fail``). concern: what it covers. bug: the bug, in one line."""

    name: str
    path: str
    checks: tuple[str, ...]
    concern: str
    bug: str


def _m(name: str, target: str, checks: tuple[str, ...] | str, concern: str, bug: str) -> Mutant:
    checks = (checks,) if isinstance(checks, str) else checks
    return Mutant(name, f"{PACKAGE}.{target}", checks, concern, bug)


MUTANTS: tuple[Mutant, ...] = (
    _m(
        "scale_inverse_d",
        "scaling:scale_inverse_d",
        "forward",
        "scaling",
        "logits scaled by 1/D, the given scale ignored",
    ),
    _m(
        "bias_before_scale",
        "scaling:bias_before_scale",
        "forward",
        "scaling",
        "(q.k + bias) * scale: the bias is scaled too",
    ),
    _m(
        "softcap_unscaled_tanh",
        "scaling:softcap_unscaled_tanh",
        "forward",
        "softcap",
        "c * tanh(s) instead of c * tanh(s / c)",
    ),
    _m(
        "chunk_edge_off_by_one",
        "masking:chunk_edge_off_by_one",
        "forward",
        "mask edges",
        "chunked causal: a chunk's first key left out (j > chunk start, not >=)",
    ),
    _m(
        "causal_off_by_one",
        "masking:causal_off_by_one",
        "forward",
        "mask edges",
        "causal j < i: each query loses its diagonal key",
    ),
    _m(
        "causal_bottom_right",
        "masking:causal_bottom_right",
        "forward",
        "causal alignment",
        "declares top-left, places the diagonal bottom-right",
    ),
    _m(
        "window_exclusive_left",
        "masking:window_exclusive_left",
        "forward",
        "window edges",
        "window's left edge exclusive (diag - left < j)",
    ),
    _m(
        "segment_shifted_kv",
        "masking:segment_shifted_kv",
        "forward",
        "segment ids",
        "kv segment ids read one key late",
    ),
    _m(
        "gqa_modulo",
        "masking:gqa_modulo",
        "forward",
        "GQA mapping",
        "query head h reads kv head h % Hkv, not h // G",
    ),
    _m(
        "batch_zero_kv",
        "masking:batch_zero_kv",
        "forward",
        "batch mixing",
        "every batch row attends to batch row 0's k and v",
    ),
    _m(
        "drops_tail_block",
        "blocked:drops_tail_block",
        "forward",
        "block tails",
        "Sk // 128 key blocks: a partial tail block is dropped",
    ),
    _m(
        "online_softmax_no_rescale",
        "blocked:online_softmax_no_rescale",
        "forward",
        "online softmax",
        "running sum and output never rescaled when the max grows",
    ),
    _m(
        "bf16_accumulator",
        "blocked:bf16_accumulator",
        "forward",
        "precision",
        "running sum and output accumulated key by key in bfloat16",
    ),
    _m(
        "nan_on_masked_first_block",
        "blocked:nan_on_masked_first_block",
        "forward",
        "-inf in bias",
        "running max starts at -inf unguarded: NaN on a row whose first key block is all -inf",
    ),
    _m("returns_zeros", "degenerate:returns_zeros", "forward", "degenerate", "returns zeros"),
    _m(
        "returns_mean_v",
        "degenerate:returns_mean_v",
        "forward",
        "degenerate",
        "returns mean(V) for every query",
    ),
    _m("passes_q_through", "degenerate:passes_q_through", "forward", "degenerate", "returns q"),
    _m(
        "wrong_dk",
        "backward:WrongDkAdapter",
        "backward",
        "backward only",
        "custom_vjp backward whose dk misses the scale; forward right",
    ),
    _m(
        "nondeterministic",
        "runtime:nondeterministic",
        "determinism",
        "determinism",
        "~1% of elements move one ulp between runs",
    ),
    _m(
        "batch_wide_softmax_max",
        "batch:batch_wide_max",
        "batch_invariance",
        "batch invariance",
        "softmax max over every request of the batch: right within rounding, bits move with the neighbours",
    ),
    _m(
        "vmap_first_slice",
        "vmap:FirstSliceUnderVmap",
        "vmap",
        "vmap",
        "right unbatched; its batching rule answers every vmapped slice with the first one's answer",
    ),
    _m(
        "lengths_transposed_leading_batch",
        "leading_batch:lengths_transposed",
        "forward",
        "leading batch dims",
        "lengths shaped [2, 3] flattened column-major, q's rows row-major: right with one batch axis only",
    ),
    _m(
        "sharded_local_keys",
        "sharded:LocalKeysWhenSharded",
        "sharded",
        "sharded runs",
        "right on one device; its partitioning rule keeps the keys split: each shard sees its own keys",
    ),
    _m(
        "sharded_own_local_keys",
        "sharded:OwnShardingLocalKeys",
        "sharded",
        "sharded runs (the library's own sharding entry)",
        "right under jit placement; its own shard_map splits the sequence and each shard sees its own keys",
    ),
    _m(
        "leaks_buffers",
        "runtime:leaks_buffers",
        "leak",
        "leak",
        "keeps every call's device inputs and outputs in a list",
    ),
    _m(
        "recompiles", "runtime:recompiles", "recompile", "recompilation", "jits a fresh closure on every call"
    ),
    _m(
        "leaks_host_undeclared",
        "undeclared:leaks_host",
        "leak",
        "leak (no JAX runtime declared)",
        "NumPy function keeping every output and a 256 KiB buffer per call; jax_runtime unset",
    ),
    _m(
        "recompiles_undeclared",
        "undeclared:recompiles_undeclared",
        "recompile",
        "recompilation (no JAX runtime declared)",
        "jits a fresh closure on every call; jax_runtime unset",
    ),
    _m("mutates_inputs", "contract:mutates_inputs", "no_mutation", "input mutation", "pre-scales q in place"),
    _m(
        "wrong_dtype",
        "contract:wrong_dtype",
        "shape_dtype",
        "output dtype",
        "returns float32 for bfloat16 inputs",
    ),
    _m(
        "wrong_layout",
        "contract:wrong_layout",
        ("shape_dtype", "forward"),
        "output shape",
        "returns [B, Sq, Hq, Dv] instead of [B, Hq, Sq, Dv]",
    ),
    _m(
        "lse_missing_max",
        "contract:lse_missing_max",
        "lse",
        "lse",
        "lse = log(sum(exp(s - max))), max not added back",
    ),
    _m(
        "fully_masked_not_zero",
        "contract:fully_masked_not_zero",
        "fully_masked",
        "fully masked rows",
        "declares zeros, returns mean(V) on fully masked rows",
    ),
    _m(
        "skips_validation",
        "contract:skips_validation",
        "raises",
        "declared raises",
        "declares Sk % 128 != 0 raises, never checks it",
    ),
    _m(
        "sinks_in_numerator",
        "sinks:sinks_in_numerator",
        "forward",
        "attention sinks",
        "the sink attends to mean(v): it joins the numerator, not only the denominator",
    ),
    _m(
        "sinks_ignored",
        "sinks:sinks_ignored",
        ("forward", "lse"),
        "attention sinks",
        "accepts sinks and drops them: plain softmax over the keys",
    ),
    _m(
        "nan_padding_leak",
        "padding:nan_padding_leak",
        ("finite", "forward"),
        "NaN padding",
        "additive -inf padding mask: NaN padded keys poison valid rows",
    ),
    _m(
        "page_table_off_by_one",
        "paged:PageOffByOne",
        "forward",
        "paged KV cache",
        "logical page j read from page table entry j + 1",
    ),
    _m(
        "last_partial_page_dropped",
        "paged:DropsLastPartialPage",
        "forward",
        "paged KV cache",
        "the keys of a row's last, partly filled page are never read",
    ),
    _m(
        "one_token_row_empty",
        "paged:OneTokenRowEmpty",
        "forward",
        "ragged batches",
        "a row of one key taken for an empty one (length <= 1 skipped): a fresh decode step sees nothing",
    ),
    _m(
        "dequant_scale_ignored",
        "paged:IgnoresDequantScale",
        "forward",
        "int8 KV cache",
        "int8 pages used as they are: the per-token dequantisation scale never applied",
    ),
    _m(
        "diagonal_at_tensor_lengths",
        "ragged:DiagonalAtTensorLengths",
        "forward",
        "valid-length alignment",
        "each packed sequence's diagonal at the tensors' Sk - Sq instead of its kv_len - q_len",
    ),
    _m(
        "write_back_dropped",
        "batched_rpa:WriteBackDropped",
        "kv_cache",
        "KV-cache write-back",
        "the new tokens attended but never written: the cache returned as given",
    ),
    _m(
        "write_back_one_slot_late",
        "batched_rpa:WriteBackOneSlotLate",
        ("kv_cache", "forward"),
        "KV-cache write-back",
        "each new token's K/V written one slot past its cache position kv_len - q_len + i",
    ),
    _m(
        "rescale_square_tiles_only",
        "tuned:RescaleSquareOnly",
        "forward",
        "non-default config",
        "online softmax rescaled only when block_q == block_k (right at the default blocks)",
    ),
    _m(
        "backward_drops_tail_at_other_block",
        "tuned:BackwardDropsTail",
        "backward",
        "non-default config",
        "backward walks the forward's block count of backward blocks: a smaller one drops a tail",
    ),
    _m(
        "racy_output_copy",
        "races:RacyCopy",
        "races",
        "data races",
        "two simulated cores both write the whole output (the same values: the numbers pass)",
    ),
    _m(
        "hundred_row_blocks",
        "lowering:HundredRowBlocks",
        "lowers",
        "target hardware",
        "blocks of 100 rows: the interpreter runs them, Mosaic (rows tiled by 8) does not lower them",
    ),
    _m(
        "p_fp8_undeclared",
        "fp8:p_fp8_undeclared",
        "forward",
        "fp8 arithmetic",
        "rounds P to fp8 before the PV matmul while declaring it stays float32",
    ),
    _m(
        "logits_fp8",
        "fp8:logits_fp8",
        ("forward", "lse"),
        "fp8 arithmetic",
        "rounds the float32 logits to fp8 before the softmax",
    ),
    _m(
        "q_prescaled_undeclared",
        "fp8:q_prescaled_undeclared",
        "lse",
        "fp8 arithmetic",
        "rounds q * scale to fp8 before the logits (an API without a scale) while declaring it does not",
    ),
    _m(
        "forgets_v_scale",
        "quantized:forgets_v_scale",
        "forward",
        "quantized K/V scales",
        "int8 K/V with per-channel scales: V's dequantization scale never applied",
    ),
    _m(
        "forgets_q_scale",
        "quantized:forgets_q_scale",
        "forward",
        "quantized inputs (scales per case)",
        "q and K/V in the storage each case names: q's dequantization scale never applied",
    ),
    _m(
        "no_cost_estimate",
        "lowering:NoCostEstimate",
        "observable",
        "profiler visibility",
        "pallas_call without cost_estimate: XLA and profilers see the kernel as free",
    ),
    _m(
        "pipelined_too_deep",
        "lowering:PipelinedTooDeep",
        "smem",
        "GPU shared memory",
        "a Triton kernel pipelines 8 stages of 32 KiB tiles: over Hopper's 227 KiB, yet it lowers",
    ),
    _m(
        "ignores_config",
        "lowering:IgnoresConfig",
        "config_applied",
        "non-default config",
        "declares a tunable row block, always runs its default 128 rows: the case's config is dropped",
    ),
    _m(
        "tokamax_softcap_forward_only",
        "tokamax_wrappers:SoftcapForwardOnly",
        "backward",
        "softcap",
        "a tokamax wrapper passes logits_soft_cap to the forward call only: gradients of uncapped attention",
    ),
    _m(
        "tokamax_splash_sinks_dropped",
        "tokamax_splash_wrappers:SinksDropped",
        "forward",
        "sinks",
        "a wrapper of tokamax's splash attention calls it without its sinks: plain softmax on sink cases",
    ),
    _m(
        "sink_gradient_sign_e5m2",
        "precision:SinkGradientSignE5m2",
        "backward",
        "a tolerance a trivially wrong answer meets",
        "d(sinks) with its sign flipped in float8_e5m2, which passed a floor of 2 ulps of e5m2",
    ),
    _m(
        "dropout_forward_only",
        "dropout:ForwardOnlyDropout",
        "dropout",
        "dropout",
        "a dropout mask applied in the forward but not the backward (gradients of attention without it)",
    ),
    _m(
        "dropout_mask_ignored",
        "dropout:MaskIgnored",
        "dropout",
        "dropout",
        "a dropout mask accepted and ignored: the answer without dropout must not earn a pass",
    ),
    _m(
        "dropout_rate_off",
        "dropout:RateOff",
        "dropout",
        "dropout",
        "a drawn dropout mask at 0.8 x the requested rate, scaled by the requested one",
    ),
    _m(
        "falls_back_on_any_error",
        "api_contract:FallsBackOnAnyError",
        "api_contract",
        "API contracts",
        "an implementation list that falls back past any error, not NotImplementedError only: a broken "
        "entry is skipped silently",
    ),
    _m(
        "residuals_lse_not_denominator",
        "api_contract:ResidualsWithLogsumexp",
        "api_contract",
        "API contracts (residuals)",
        "partial results over key halves return residuals (max, logsumexp) where (max, denominator) is "
        "documented: the library's combine of them is wrong",
    ),
    _m(
        "storage_dtype_sum",
        "precision:StorageDtypeSum",
        ("forward", "lse"),
        "a reduction in the storage dtype",
        "the softmax denominator summed with an accumulator in the inputs' dtype (bf16, fp8)",
    ),
)


@dataclasses.dataclass(frozen=True)
class Control:
    """A correct subject: every check it runs must pass, and ``checks`` must run (and pass).
    ``known``: checks where a built-in subject used as a control has a ledger entry at the tests'
    JAX (``kernels/known_issues.toml``): there ``known`` is accepted too, never ``fail``.
    ``smoke``: where a control costs seconds a case, the fragments of ``tests/test_mutation.py``'s
    ``SMOKE`` its per-case checks keep (the concern it is the control of); empty: all of them."""

    path: str
    checks: tuple[str, ...]
    known: tuple[str, ...] = ()
    smoke: tuple[str, ...] = ()


RUNS_EVERYWHERE = ("shape_dtype", "forward", "finite", "no_mutation", "determinism", "recompile", "leak")
CONTROLS: tuple[Control, ...] = (
    Control(f"{PACKAGE}.correct:attention", (*RUNS_EVERYWHERE, "lse", "fully_masked", "batch_invariance")),
    Control(f"{PACKAGE}.correct:CorrectAdapter", (*RUNS_EVERYWHERE, "lse", "backward", "batch_invariance")),
    # The same call exposed to jax.vmap and to sharded inputs (Adapter.jax_call): batched and
    # partitioned as it computes.
    Control(
        f"{PACKAGE}.vmap:VmapAdapter",
        (*RUNS_EVERYWHERE, "lse", "backward", "batch_invariance", "vmap", "sharded"),
    ),
    # Its own sharding entry (JaxCall.own_sharding) maps the call over batch and heads, the
    # sequence whole: right on any mesh. Per-case checks on the causal GQA fragment only (the
    # sampled vmap and sharded items run on every control).
    Control(
        f"{PACKAGE}.sharded:OwnShardingWholeSequence",
        (*RUNS_EVERYWHERE, "lse", "backward", "vmap", "sharded"),
        smoke=("causal_tl-B1-Hq4-Hkv2-Sq128-Sk128-D64",),
    ),
    # Leading batch dims ([2, 3, H, S, D], lengths [2, 3]) flattened row-major, as the suite's B.
    Control(f"{PACKAGE}.leading_batch:attention", (*RUNS_EVERYWHERE, "lse")),
    Control(f"{PACKAGE}.precision:CarefulAdapter", (*RUNS_EVERYWHERE, "lse", "backward")),
    # Dropout after the softmax, times 1 / (1 - rate), the same mask in both directions: the mask
    # passed by the caller, or drawn inside from a key (read back by the check's probes).
    Control(f"{PACKAGE}.dropout:MaskDropout", (*RUNS_EVERYWHERE, "lse", "backward", "dropout")),
    Control(f"{PACKAGE}.dropout:KeyDropout", (*RUNS_EVERYWHERE, "lse", "backward", "dropout")),
    # An implementation list that falls back on NotImplementedError only, with a working default,
    # precision and logits dtype honoured (tokamax's documented promises).
    Control(
        f"{PACKAGE}.api_contract:ImplementationList", (*RUNS_EVERYWHERE, "lse", "backward", "api_contract")
    ),
    # The blocked online softmax with a bias, its running max guarded: right on -inf bias blocks.
    # fully_masked runs on it where a smoke case has a fully masked row; no smoke case it admits has.
    Control(f"{PACKAGE}.blocked:online_softmax_bias", RUNS_EVERYWHERE),
    # Its bfloat16 requests are not batch-invariant from jax 0.11.2 on (ledger:
    # xla-cpu-bfloat16-batch-dependent-dot): batch_invariance there is ``known``.
    Control("xla", (*RUNS_EVERYWHERE, "backward"), known=("batch_invariance",)),
    # Correct at every edge config its tunables get (the mutants' own blocks).
    Control(f"{PACKAGE}.tuned:TunedAdapter", (*RUNS_EVERYWHERE, "backward", "raises")),
    # Paged decode over paged_attention's layout: right at every row length and edge config.
    Control(f"{PACKAGE}.paged:PagedDecode", RUNS_EVERYWHERE),
    # The same over int8 pages (kv_storage="int8"): the reference sees the dequantised values.
    Control(f"{PACKAGE}.paged:Int8PagedDecode", RUNS_EVERYWHERE),
    # Ragged paged attention over its adapter's packing: right on every mixed pack and config.
    Control(f"{PACKAGE}.ragged:RaggedPaged", RUNS_EVERYWHERE),
    # Attention plus the KV-cache write-back over tokamax_batched_rpa's packing: the cache bitwise.
    Control(f"{PACKAGE}.batched_rpa:BatchedRaggedPaged", (*RUNS_EVERYWHERE, "kv_cache")),
    # tokamax's splash attention (base, the XLA one) through the suite's adapter, float32: the
    # sinks mutant's twin with every argument threaded through. Its per-case checks on the sink smoke
    # cases alone (forward and backward compile anew per case: about 3 s each); its sampled checks
    # (determinism, batch_invariance, dropout with a drawn key, ...) on the cases the suite picks.
    Control(
        f"{PACKAGE}.tokamax_splash_wrappers:SplashWrapped",
        (*RUNS_EVERYWHERE, "lse", "backward", "batch_invariance", "dropout"),
        smoke=("sink",),
    ),
    # Correct, with Capabilities.jax_runtime unset: NumPy (leak judges its host memory; recompile is
    # unsupported, nothing compiles) and JAX (observed compiling: recompile and leak run in full).
    Control(f"{PACKAGE}.undeclared:numpy_attention", tuple(c for c in RUNS_EVERYWHERE if c != "recompile")),
    Control(f"{PACKAGE}.undeclared:jax_attention", RUNS_EVERYWHERE),
    # Right attention copied out through a Pallas TPU kernel, one half per core: no race.
    Control(f"{PACKAGE}.races:RaceFreeCopy", (*RUNS_EVERYWHERE, "races")),
    # fp8 inputs, float32 accumulation and softmax, bf16 out; P kept float32, or rounded to fp8
    # as declared (internal_quantization "p_fp8"): the baseline follows each declaration.
    Control(f"{PACKAGE}.fp8:attention", (*RUNS_EVERYWHERE, "lse")),
    Control(f"{PACKAGE}.fp8:attention_p_fp8", (*RUNS_EVERYWHERE, "lse")),
    # fp8 q pre-scaled in its own dtype, declared (q_prescaled, as splash's API imposes).
    Control(f"{PACKAGE}.fp8:attention_q_prescaled", (*RUNS_EVERYWHERE, "lse")),
    # Quantized K/V dequantized inside, with a scale per (head, channel) in int8 and per head in
    # e4m3fn (kv_storage): the reference sees the dequantized values exactly.
    Control(f"{PACKAGE}.quantized:int8_per_channel", (*RUNS_EVERYWHERE[:5], "recompile")),
    Control(f"{PACKAGE}.quantized:fp8_per_head", (*RUNS_EVERYWHERE[:5], "recompile")),
    # q and K/V quantized case by case (q_storages, kv_storages: every storage), each dequantized
    # with its own scale.
    Control(f"{PACKAGE}.quantized:per_call", (*RUNS_EVERYWHERE[:5], "recompile")),
    # Right attention copied out through a Pallas TPU kernel that lowers, with a cost estimate.
    Control(f"{PACKAGE}.lowering:LoweringCopy", (*RUNS_EVERYWHERE, "lowers", "vmem", "observable")),
    # The output through a Pallas Triton kernel (x @ I), 2 pipeline stages: lowers, fits shared memory.
    Control(f"{PACKAGE}.lowering:TritonCopy", (*RUNS_EVERYWHERE, "lowers", "smem")),
    # The same copy with its row block set by each edge config, as the traced kernel shows.
    Control(f"{PACKAGE}.lowering:ConfiguredCopy", (*RUNS_EVERYWHERE[:5], "lowers", "config_applied")),
)


def by_name(name: str) -> Mutant:
    """The mutant called ``name`` (KeyError naming the choices otherwise)."""
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise KeyError(f"no mutant {name!r}; mutants are {[m.name for m in MUTANTS]}")
