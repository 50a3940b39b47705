"""The built-in subjects, each declared once: its adapter, its variants, what each costs, where it runs.

Every consumer reads this table instead of a list of its own: the registry (``BUILTIN``, a
family's members), the profiles (``--impl all`` at a profile runs the variants of its tier or
cheaper), ``scripts/device-bench`` (the GPU subjects are the variants whose platforms say so), the
tests, and the docs (a test checks that the README and ``docs/adapters.md`` name every variant and
nothing else). Standard library only, so importing it imports no JAX: the adapter is a lazy
``"module:Class"`` string.

Variants, one rule for every subject (``kernels/contract/subject_spec.py`` for the syntax):

* a plain subject's first variant is its bare name, the adapter's defaults (``tpu_flash``); its
  other variants set one of the adapter's ``OPTIONS`` to a non-default value
  (``tpu_flash[interpreter=tpu]``, ``paged_attention[kv=int8]``);
* a family (one API with several implementations, ``family`` set, the adapter's ``FAMILY_OPTION``)
  has one variant per implementation, ``name[impl=...]``, and no bare variant: ``--impl tokamax``
  is every member. A new API with several implementations is a family. ``xla`` and ``cudnn``
  (``jax.nn.dot_product_attention``'s two implementations over one runner,
  ``kernels/adapters/jax_nn_attention.py``) predate the rule and keep their names: the case ids,
  records and ledger entries of every earlier run are keyed by them.

``tests/kernels/test_subjects.py`` imports each adapter and checks that its ``OPTIONS`` and
``FAMILY_OPTION`` give exactly these variants, in this order, and that what each reports about
itself on this machine agrees with its platforms, so this table cannot drift from the code.
"""

from __future__ import annotations

import dataclasses

from kernels.contract.subject_spec import parse_subject

# Cost tiers, cheapest first, named after the profiles (conformance/plan/profiles.py) whose
# ``--impl all`` first runs a variant of that tier. ``--impl NAME`` runs a variant at any tier.
TIERS: tuple[str, ...] = ("ci", "dev", "thorough")

# Where a variant runs: ``interpreted`` off its chip, in an interpreter (the Pallas generic
# interpreter or TPU interpret mode), as on the CPU of ci; ``cpu``, ``cuda`` (an NVIDIA GPU) and
# ``tpu`` natively; ``lowering``: where it cannot run, its call still lowers for its chip
# (``Availability.lowerable``: the lowering checks run).
PLATFORMS: tuple[str, ...] = ("interpreted", "cpu", "cuda", "tpu", "lowering")
ANY_BACKEND = ("cpu", "cuda", "tpu")  # XLA: natively on whichever backend JAX has
PALLAS_TPU = ("interpreted", "tpu")
PALLAS_TRITON = ("interpreted", "cuda")
GPU_ONLY = ("cuda",)


class CatalogueError(ValueError):
    """A subject declaration that breaks the rule above; the message names the fix."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Variant:
    """One configuration of a subject, named as ``--impl`` and the case ids name it.
    tier: the cheapest profile whose ``--impl all`` runs it (``TIERS``).
    platforms: where it runs (``PLATFORMS``).
    ci_cases: where its whole catalogue costs more than ci's budget, the cases (in ``--case``
    syntax, ``conformance/plan/user_cases.py``) that the ci profile runs in its place, chosen for
    reach; dev and thorough run the whole catalogue. Empty: ci runs the catalogue too."""

    name: str
    tier: str
    platforms: tuple[str, ...]
    ci_cases: tuple[str, ...] = ()

    def runs_at(self, tier: str) -> bool:
        """Whether ``--impl all`` at profile ``tier`` runs this variant."""
        return TIERS.index(self.tier) <= TIERS.index(checked_tier(tier))


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuiltinSubject:
    """A built-in subject: ``name``, its adapter class as a lazy ``"module:Class"``, and its
    variants in order. ``family``: the option ``--impl NAME`` expands over (the adapter's
    ``FAMILY_OPTION``), or None for a plain subject."""

    name: str
    adapter: str
    variants: tuple[Variant, ...]
    family: str | None = None

    @property
    def members(self) -> tuple[Variant, ...]:
        """What ``--impl NAME`` runs: a family's every member, else the bare name alone."""
        return self.variants if self.family else self.variants[:1]

    @property
    def with_options(self) -> tuple[Variant, ...]:
        """A plain subject's variants with a non-default option (none for a family)."""
        return () if self.family else self.variants[1:]


def _variant(name: str, tier: str, platforms: tuple[str, ...], ci_cases: tuple[str, ...] = ()) -> Variant:
    return Variant(name=name, tier=tier, platforms=platforms, ci_cases=ci_cases)


# tokamax_batched_rpa[impl=reference]'s ci cases: each one call that writes the cache (the kv_cache
# check judges it bitwise) and attends over pages of 16 tokens in random order. Forward only: the
# op has no backward.
BATCHED_RPA_CI_CASES: tuple[str, ...] = (
    # The mixed pack: a decode row over 37 keys (its last page part-full), a 40-token prefill, a
    # 7-token chunked prefill over 80 keys (ending on a page edge); GQA, 2 query heads per kv head.
    "B=3,Hq=4,Hkv=2,Sq=40,Sk=80,D=128,causal=bottom_right_valid,q_lengths=1/40/7,kv_lengths=37/40/80",
    # Ragged: an empty sequence, a decode token in a page's last slot, 17 new tokens over 33 keys
    # (two page edges); D = 64 is padded to the cache's 128 lanes, which the write must leave zero.
    "B=3,Hq=2,Hkv=1,Sq=17,Sk=33,D=64,causal=bottom_right_valid,q_lengths=0/1/17,kv_lengths=0/16/33,"
    "dtype=bfloat16",
    # A 16-key sliding window and a softcap on a prefill over 48 keys and a decode row, 8 query
    # heads on one kv head.
    "B=2,Hq=8,Hkv=1,Sq=16,Sk=48,D=128,causal=bottom_right_valid,window=15:0,softcap=5,"
    "q_lengths=16/1,kv_lengths=48/20",
    # No causal mask (use_causal_mask=False): every query token a new token that sees every key.
    "B=1,Hq=2,Hkv=2,Sq=5,Sk=21,D=128,dtype=bfloat16",
)

# tokamax's ring attention at ci: each case costs 10 to 20 s of interpreted ring calls, and only
# lengths that are multiples of 256 fit its shards, so ci runs these in place of its catalogue.
RING_CI_CASES: tuple[str, ...] = (
    # Causal GQA, three packed segments whose boundaries fall inside and across the two shards.
    "B=2,Hq=4,Hkv=2,Sq=256,Sk=256,D=64,causal=top_left,segments=3",
    # MQA (is_mqa=True, 2-D k and v), Sq != Sk bottom-right with a window, a boolean mask, Dv != D,
    # bfloat16.
    "B=1,Hq=4,Hkv=1,Sq=256,Sk=512,D=32,Dv=64,causal=bottom_right,window=40:0,mask=11qk,dtype=bfloat16",
    # Chunked causal with a softcap (the config's attn_logits_soft_cap) and large logits.
    "B=1,Hq=2,Hkv=2,Sq=256,Sk=256,D=64,causal=top_left,chunk=48,softcap=20,input=large",
    # Sinks, which the ring forward rejects (NotImplementedError), and shards shorter than a block.
    "B=1,Hq=2,Hkv=2,Sq=256,Sk=256,D=64,sinks=normal",
    "B=1,Hq=2,Hkv=2,Sq=128,Sk=128,D=64,causal=top_left",
)

SUBJECTS: tuple[BuiltinSubject, ...] = (
    BuiltinSubject(
        name="tpu_flash",
        adapter="kernels.adapters.tpu_flash:TpuFlashAdapter",
        variants=(
            _variant("tpu_flash", "ci", PALLAS_TPU),
            # TPU interpret mode runs a kernel several times slower than the generic interpreter.
            _variant("tpu_flash[interpreter=tpu]", "thorough", PALLAS_TPU),
        ),
    ),
    BuiltinSubject(
        name="splash",
        adapter="kernels.adapters.splash:SplashAdapter",
        variants=(
            _variant("splash", "ci", PALLAS_TPU),
            _variant("splash[interpreter=tpu]", "thorough", PALLAS_TPU),
        ),
    ),
    BuiltinSubject(
        name="pallas_gpu",
        adapter="kernels.adapters.pallas_gpu:PallasGpuAdapter",
        variants=(_variant("pallas_gpu", "ci", PALLAS_TRITON),),
    ),
    BuiltinSubject(
        name="xla",
        adapter="kernels.adapters.xla:XlaAdapter",
        variants=(_variant("xla", "ci", ANY_BACKEND),),
    ),
    BuiltinSubject(
        name="cudnn",
        adapter="kernels.adapters.cudnn:CudnnAdapter",
        variants=(_variant("cudnn", "ci", GPU_ONLY),),
    ),
    BuiltinSubject(
        name="torch_sdpa",
        adapter="kernels.adapters.torch_sdpa:TorchSdpaAdapter",
        variants=(_variant("torch_sdpa", "ci", ("cpu",)),),
    ),
    BuiltinSubject(
        name="paged_attention",
        adapter="kernels.adapters.paged_attention:PagedAttentionAdapter",
        variants=(
            _variant("paged_attention", "ci", PALLAS_TPU),
            _variant("paged_attention[kv=int8]", "thorough", PALLAS_TPU),
        ),
    ),
    BuiltinSubject(
        name="ragged_paged_attention",
        adapter="kernels.adapters.ragged_paged_attention:RaggedPagedAttentionAdapter",
        # No released interpreter runs it yet (docs/adapters.md); off a TPU it lowers.
        variants=(_variant("ragged_paged_attention", "ci", ("tpu", "lowering")),),
    ),
    BuiltinSubject(
        name="tokamax",
        adapter="kernels.adapters.tokamax:TokamaxAdapter",
        family="impl",
        # Each interpreted implementation costs 2 to 5 minutes of ci on 2 cores, so ci keeps the
        # XLA one (tokamax's API layer, natively) and the GPU-only ones (unavailable on a CPU: free);
        # the interpreted kernels and the chunked XLA one join ``all`` in dev.
        variants=(
            _variant("tokamax[impl=xla]", "ci", ANY_BACKEND),
            _variant("tokamax[impl=xla_chunked]", "dev", ANY_BACKEND),
            _variant("tokamax[impl=mosaic_tpu]", "dev", PALLAS_TPU),
            _variant("tokamax[impl=triton]", "dev", PALLAS_TRITON),
            _variant("tokamax[impl=mosaic_gpu]", "ci", GPU_ONLY),
            _variant("tokamax[impl=cudnn]", "ci", GPU_ONLY),
        ),
    ),
    BuiltinSubject(
        name="pallas_mgpu",
        adapter="kernels.adapters.pallas_mgpu:PallasMgpuAdapter",
        variants=(_variant("pallas_mgpu", "ci", GPU_ONLY),),
    ),
    BuiltinSubject(
        name="tokamax_splash",
        adapter="kernels.adapters.tokamax_splash:TokamaxSplashAdapter",
        family="impl",
        # The XLA implementation (base) natively in ci; the Mosaic TPU kernel (TPU interpret mode) in dev.
        variants=(
            _variant("tokamax_splash[impl=base]", "ci", ANY_BACKEND),
            _variant("tokamax_splash[impl=mosaic_tpu]", "dev", PALLAS_TPU),
        ),
    ),
    BuiltinSubject(
        name="tokamax_ring",
        adapter="kernels.adapters.tokamax_ring:TokamaxRingAdapter",
        # Ring attention over 2 simulated devices in TPU interpret mode: only Sq, Sk multiples of
        # 256 fit its shards. Its whole catalogue (18 runnable cases a variant) costs about 70 s a
        # variant on 2 cores, so ci runs RING_CI_CASES for both configurations; dev the catalogue.
        variants=(
            _variant("tokamax_ring", "ci", PALLAS_TPU, RING_CI_CASES),
            _variant("tokamax_ring[config=natural_exp]", "ci", PALLAS_TPU, RING_CI_CASES),
        ),
    ),
    BuiltinSubject(
        name="tokamax_batched_rpa",
        adapter="kernels.adapters.tokamax_batched_rpa:TokamaxBatchedRpaAdapter",
        family="impl",
        # Its implementation list as api.py documents it: reference (pure JAX) natively, its whole
        # catalogue (25 runnable cases) about 70 s cold on one worker, so ci runs its own four
        # (BATCHED_RPA_CI_CASES) and dev the catalogue; the Mosaic TPU kernel, which no released
        # interpreter runs yet: off a TPU its probe costs about 35 s and lowering its three kernels
        # (decode, prefill, mixed) 30 to 90 s a case, 16 minutes at ci, so thorough; and
        # implementation=None, which picks mosaic_tpu where it imports (a TPU here): its probe
        # raises at once off a TPU, so ci.
        variants=(
            _variant("tokamax_batched_rpa[impl=reference]", "ci", ANY_BACKEND, BATCHED_RPA_CI_CASES),
            _variant("tokamax_batched_rpa[impl=mosaic_tpu]", "thorough", ("tpu", "lowering")),
            _variant("tokamax_batched_rpa[impl=default]", "ci", ("tpu",)),
        ),
    ),
)


def checked_tier(tier: str) -> str:
    """``tier`` when it is one of ``TIERS``; CatalogueError naming them otherwise."""
    if tier not in TIERS:
        raise CatalogueError(f"unknown cost tier {tier!r}; use one of {TIERS}")
    return tier


def variants() -> tuple[Variant, ...]:
    """Every variant of every built-in subject, in catalogue order."""
    return tuple(v for s in SUBJECTS for v in s.variants)


def ci_cases(name: str) -> tuple[str, ...]:
    """The ci cases a built-in variant declares (``Variant.ci_cases``); () for any other name."""
    return next((v.ci_cases for v in variants() if v.name == name), ())


def on_platform(platform: str, unless: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The variants that run on ``platform`` and on none of ``unless``, by name."""
    if platform not in PLATFORMS or any(p not in PLATFORMS for p in unless):
        raise CatalogueError(f"unknown platform in {(platform, *unless)}; use one of {PLATFORMS}")
    return tuple(v.name for v in variants() if platform in v.platforms and not set(unless) & set(v.platforms))


def _problems(subject: BuiltinSubject) -> list[str]:
    """What breaks the module docstring's rule in one declaration."""
    found = []
    if not subject.variants:
        found.append("declares no variant; give it at least its bare name")
    for variant in subject.variants:
        spec = parse_subject(variant.name)
        if spec.base != subject.name:
            found.append(f"variant {variant.name!r} is not named after it; write {subject.name}[...]")
        if variant.tier not in TIERS:
            found.append(f"variant {variant.name!r}: tier {variant.tier!r} is not one of {TIERS}")
        if variant.ci_cases and variant.tier != TIERS[0]:
            tier = variant.tier
            found.append(f"variant {variant.name!r}: ci_cases in tier {tier!r}; make it ci or drop them")
        if any(not c or not isinstance(c, str) for c in variant.ci_cases):
            found.append(f"variant {variant.name!r}: each ci case is a non-empty --case string")
        unknown = [p for p in variant.platforms if p not in PLATFORMS]
        if unknown or not variant.platforms or len(set(variant.platforms)) != len(variant.platforms):
            found.append(f"variant {variant.name!r}: platforms must be distinct, from {PLATFORMS}")
        if subject.family and (len(spec.options) != 1 or spec.options[0][0] != subject.family):
            found.append(f"family member {variant.name!r} must set {subject.family}= and nothing else")
    if subject.variants and not subject.family and subject.variants[0].name != subject.name:
        found.append(f"a plain subject's first variant is its bare name {subject.name!r}")
    if not subject.family and any(not parse_subject(v.name).options for v in subject.variants[1:]):
        found.append("only the first variant is bare; give the others their option")
    return [f"subject {subject.name!r}: {problem}" for problem in found]


def validate(subjects: tuple[BuiltinSubject, ...]) -> None:
    """CatalogueError listing every declaration that breaks the module docstring's rule."""
    problems = [p for s in subjects for p in _problems(s)]
    declared = {
        "subject": [s.name for s in subjects],
        "variant": [v.name for s in subjects for v in s.variants],
    }
    for kind, names in declared.items():
        twice = sorted(n for n in set(names) if names.count(n) > 1)
        problems += [f"{kind} {n!r} is declared twice; declare it once" for n in twice]
    if problems:
        raise CatalogueError("; ".join(problems))


validate(SUBJECTS)
