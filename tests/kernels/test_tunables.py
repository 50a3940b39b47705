"""Kernel tunables: the declarations (per JAX version), configs in case ids, constraints that
see the config, and the edge configs the curated matrix derives from a declaration."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.plan import edge_matrix, pairwise
from conformance.plan.cases import Case
from conformance.plan.catalogue import cases_for, classify
from conformance.plan.profiles import get
from conformance.plan.subjects import resolve_subjects
from kernels.contract.tunables import Configurable, Tunable, Tunables, config_token, configured
from kernels.runtime.jax_runtime import jax_version
from reference.spec import AttentionShape, AttentionSpec

PALLAS = ("tpu_flash", "splash", "pallas_gpu")
TPU_FLASH_BLOCKS = (
    "block_q",
    "block_k_major",
    "block_k",
    "block_b",
    "block_q_major_dkv",
    "block_q_dkv",
    "block_k_major_dkv",
    "block_k_dkv",
    "block_k_major_dq",
    "block_k_dq",
    "block_q_dq",
)


@pytest.fixture(scope="module")
def subjects():
    return {s.name: s for s in resolve_subjects(",".join(PALLAS))}


def test_tpu_flash_declares_the_eleven_blocksizes_fields(subjects):
    import inspect

    from jax.experimental.pallas.ops.tpu import flash_attention

    tunables = subjects["tpu_flash"].capabilities.tunables
    assert set(tunables.names) == set(TPU_FLASH_BLOCKS)
    assert set(tunables.names) == set(inspect.signature(flash_attention.BlockSizes).parameters)
    assert tunables.get("block_k").divides == "block_k_major"
    assert tunables.problems({"block_k": 64}) == ("block_k=64 is not legal (a multiple of 128)",)
    assert tunables.problems({"block_k_major": 384, "block_k": 256}) == (
        "block_k=256 must divide block_k_major=384",
    )


def test_splash_declares_its_blocks_and_the_fused_backward(subjects):
    tunables = subjects["splash"].capabilities.tunables
    assert "use_fused_bwd_kernel" in tunables.names
    assert tunables.get("use_fused_bwd_kernel").default is False
    assert tunables.problems({"block_kv_compute": 64})


def test_pallas_gpu_declares_what_this_jax_takes(subjects):
    names = subjects["pallas_gpu"].capabilities.tunables.names
    if jax_version() < (0, 5, 1):
        assert names == ("block_q", "block_k")  # mha(block_q=, block_k=) size the backward too
    else:
        from jax.experimental.pallas.ops.gpu import attention

        default = attention.BlockSizes.get_default()
        tunables = subjects["pallas_gpu"].capabilities.tunables
        assert names == ("block_q", "block_k", "block_q_dkv", "block_kv_dkv", "block_q_dq", "block_kv_dq")
        assert all(tunables.get(n).default == getattr(default, n) for n in names)
    assert subjects["pallas_gpu"].capabilities.tunables.problems({"block_q": 48})  # not a power of two


def test_a_config_shows_in_the_id_and_summary_but_keeps_the_data():
    plain = Case(subject="tpu_flash", dtype="float32", q_len=256, kv_len=256)
    tuned = dataclasses.replace(plain, config={"block_q": 64, "block_k_major": 256})
    assert tuned.config == (("block_k_major", 256), ("block_q", 64))  # sorted, hashable
    assert tuned.case_id == plain.case_id + "-cfg-bkmaj256-bq64"
    assert "config block_k_major=256, block_q=64" in tuned.summary()
    assert "config" in tuned.features and "config" not in plain.features
    assert tuned.seed == plain.seed and tuned.data_id == plain.data_id
    assert eval(repr(tuned), {"Case": Case}) == tuned  # repro scripts rebuild it from its repr
    assert config_token((("use_fused_bwd_kernel", True),)) == "cfg-fusedbwd"
    with pytest.raises(ValueError, match="name -> value pairs"):
        Case(subject="x", dtype="float32", config=(1, 2))


def test_shape_constraints_see_the_config(subjects):
    caps = subjects["tpu_flash"].capabilities
    shape = AttentionShape(1, 1, 1, 256, 128, 64, 64)
    assert not caps.admits(shape, AttentionSpec(), "float32", "forward")
    outside = caps.admits(shape, AttentionSpec(), "float32", "forward", config=(("block_k_major", 256),))
    assert [e.constraint.name for e in outside] == ["kv_len_multiple_of_block_k"]
    assert outside[0].raises
    small_q = AttentionShape(1, 1, 1, 64, 128, 64, 64)
    assert caps.admits(small_q, AttentionSpec(), "float32", "forward")  # default block_q 128 > 64
    assert not caps.admits(small_q, AttentionSpec(), "float32", "forward", config=(("block_q", 64),))
    illegal = caps.admits(shape, AttentionSpec(), "float32", "forward", config=(("block_z", 1),))
    assert [e.constraint for e in illegal] == [None] and "block_z" in illegal[0].text


def test_a_config_the_shape_rejects_is_planned_to_raise_and_the_kernel_does(subjects):
    subject = subjects["tpu_flash"]
    case = Case(subject="tpu_flash", dtype="float32", q_len=128, kv_len=128, config={"block_k_major": 256})
    planned = classify("raises", case, subject.capabilities)
    assert planned is not None and planned.status == "raises"
    adapter = subject.adapter_for(case.config)
    from conformance.judge.inputs import build_inputs

    with pytest.raises(ValueError, match="block_k_major"):  # the config really reaches the kernel
        adapter.forward(build_inputs(case), case.spec)


def test_splash_segment_ids_need_a_lane_wide_dkv_q_block(subjects):
    """Found by a dev draw at 0.7.2: with segment ids the dkv kernel puts q along the lanes, so a
    block_q_dkv under 128 raises there; the declaration says so and the kernel agrees."""
    import numpy as np

    from conformance.judge.inputs import build_inputs

    subject = subjects["splash"]
    case = Case(subject="splash", dtype="float32", segments=2, config={"block_q_dkv": 64})
    planned = classify("raises", case, subject.capabilities)
    assert planned is not None and planned.status == "raises" and "block_q_dkv" in planned.reason
    assert classify("forward", case, subject.capabilities).status == "run"  # the forward takes it
    inputs = build_inputs(case)
    dout = np.ones(inputs.q.shape[:3] + (case.v_head_dim,), inputs.q.dtype)
    with pytest.raises(NotImplementedError, match="multiple of 128"):
        subject.adapter_for(case.config).gradients(inputs, case.spec, dout)


def test_configured_adapters_are_cached_per_config(subjects):
    subject = subjects["splash"]
    config = (("use_fused_bwd_kernel", True),)
    assert subject.adapter_for(()) is subject.adapter
    assert subject.adapter_for(config) is subject.adapter_for(config)
    assert subject.adapter_for(config).config == config
    with pytest.raises(TypeError, match="configured"):
        configured(object.__new__(type("Bare", (), {"name": "bare"})), config)


TUNED = "tpu_flash,splash,paged_attention,pallas_gpu,ragged_paged_attention,tokamax[impl=xla_chunked]"


def test_every_adapter_with_tunables_is_configured_by_the_one_shared_method():
    """``Configurable.configured``: the config normalized against the declared tunables (a default
    value drops out), the other fields kept, and a compile cache of its own."""
    for subject in resolve_subjects(TUNED):
        name = subject.name
        assert subject.capabilities.tunables.names, name
        adapter = subject.adapter
        assert type(adapter).configured is Configurable.configured, name
        first = adapter.capabilities().tunables.params[0]
        copy = adapter.configured({first.name: first.default})
        assert copy.config == () and copy is not adapter and copy.name == adapter.name, name
        assert copy._cache is not adapter._cache and len(copy._cache) == 0, name


def test_edge_configs_cover_the_block_edges_and_are_legal(subjects):
    for name in PALLAS:
        tunables = subjects[name].capabilities.tunables
        configs = dict(edge_matrix.edge_configs(tunables, 256, 256, 1))
        edges = {"smallest", "block_q<block_k", "block_q>block_k"}
        if any(p.backward and p.axis != "flag" for p in tunables.params):  # pallas_gpu from 0.5.1
            edges.add("backward_ne_forward")
        assert edges <= set(configs), name
        for config in configs.values():
            assert config and not tunables.problems(config)
    flash = dict(edge_matrix.edge_configs(subjects["tpu_flash"].capabilities.tunables, 256, 256, 1))
    assert flash["block_k<block_k_major"] == (("block_k_major", 256),)
    assert dict(flash["whole_sequence"]) == {"block_q": 256, "block_k_major": 256, "block_k": 256}
    splash = dict(edge_matrix.edge_configs(subjects["splash"].capabilities.tunables, 256, 256, 1))
    assert splash["use_fused_bwd_kernel=True"] == (("use_fused_bwd_kernel", True),)


def test_ci_attaches_edge_configs_to_one_small_shape_only(subjects):
    for name in PALLAS:
        subject = subjects[name]
        tuned = [c for c in cases_for(subject, get("ci"), 0) if c.config]
        assert tuned, name
        # besides the edge configs, pairwise coverage (conformance/plan/pairwise.py) may pair a
        # config with other optional inputs, in the first dtype
        features = pairwise.declared_features(subject.capabilities)
        paired = [c for c in tuned if sum(f.present(c) for f in features) > 1]
        assert all(c.dtype == "float32" for c in paired), name
        edge = [c for c in tuned if c not in paired]
        assert {(c.q_len, c.kv_len, c.dtype) for c in edge} == {(256, 256, "float32")}
    assert not [c for c in cases_for(resolve_subjects("xla")[0], get("ci"), 0) if c.config]


def test_tunable_space():
    block = Tunable("b", 128, "kv", multiple_of=128)
    assert block.smallest == 128 and block.candidates(384) == (128, 256, 384)
    pow2 = Tunable("b", 64, "q", minimum=16, power_of_two=True)
    assert pow2.candidates(100) == (16, 32, 64) and not pow2.legal_alone(48)
    flags = Tunables((Tunable("fused", False, "flag"),))
    assert flags.normalized({"fused": False}) == () and flags.problems({"fused": 1})
    with pytest.raises(ValueError, match="axis"):
        Tunable("b", 1, "heads")  # type: ignore[arg-type]


def test_dev_draws_legal_configs_and_ci_does_not(subjects):
    from conformance.plan import strategies

    for name in ("tpu_flash", "pallas_gpu"):
        caps = subjects[name].capabilities
        dev = strategies.draw_cases(strategies.cases(name, caps, get("dev")), 30, 1)
        tuned = [c for c in dev if c.config]
        assert len(tuned) >= 5, name
        assert all(not caps.tunables.problems(c.config) and strategies.runnable(c, caps) for c in tuned)
        ci = strategies.draw_cases(strategies.cases(name, caps, get("ci")), 3, 0)
        assert not [c for c in ci if c.config]


def test_shrinking_may_drop_the_config(subjects):
    from hypothesis import find

    from conformance.plan import strategies

    caps = subjects["tpu_flash"].capabilities
    case = Case(subject="tpu_flash", dtype="float32", q_len=256, kv_len=256, config={"block_q": 64})
    assert find(strategies.within(case, caps), lambda c: c.config == ()).config == ()
    assert find(strategies.within(case, caps), lambda c: c.config != ()).config == case.config


def test_a_config_case_record_keeps_its_config_and_reports_it(subjects):
    """The record of a config case: the config survives JSON, the case description names it,
    and the feature grid gives it its own row, "non-default config"."""
    from conformance.judge.runner import Runner
    from reports.run_report.describe import describe_case
    from reports.run_report.grid import feature_grid, label
    from run_records.results_file import case_result_from_json, case_result_to_json

    (subject,) = resolve_subjects("tests.mutants.tuned:TunedAdapter")
    case = Case(subject=subject.name, dtype="float32", q_len=128, kv_len=128, config={"block_q": 64})
    planned = classify("forward", case, subject.capabilities)
    result = Runner((subject,), get("ci"), shrink=False).evaluate(planned)
    assert result.verdict == "pass", result.reason
    again = case_result_from_json(case_result_to_json(result))
    assert again.case.config == (("block_q", 64),) and "config" in again.features
    assert describe_case(again.case).endswith("config block_q=64")
    plain_case = dataclasses.replace(again.case, fields={**dict(again.case.fields), "config": ()})
    plain = dataclasses.replace(again, case=plain_case, features=("forward",))
    grid = feature_grid([again, plain])
    assert "config" in grid.features and label("config") == "non-default config"
    assert grid.cell(subject.name, "config").status == "pass"
    assert dict(grid.cell(subject.name, "all").counts)["pass"] == 2  # the plain result is not in the row
    assert dict(grid.cell(subject.name, "config").counts)["pass"] == 1


@pytest.mark.parametrize(
    ("mutant", "direction", "config"),
    [
        ("RescaleSquareOnly", "forward", {"block_q": 32}),  # block_q != block_k
        ("RescaleSquareOnly", "forward", {"block_k": 64}),  # the other way
        ("BackwardDropsTail", "backward", {"block_k_bwd": 32}),  # backward block != forward block
    ],
)
def test_tuned_mutants_are_right_at_the_default_blocks_and_wrong_at_an_edge_config(mutant, direction, config):
    """What tests/test_mutation.py relies on: each tuned mutant differs from the correct
    TunedAdapter only at a non-default config, and the correct one is right at every edge config."""
    import numpy as np

    from conformance.judge.inputs import build_dout, build_inputs
    from reference import attention_backward, attention_forward
    from tests.mutants import tuned

    case = Case(subject="x", dtype="float32", q_len=256, kv_len=256, head_dim=32, v_head_dim=32, causal=True)
    inputs = build_inputs(case)
    ref = attention_forward(inputs, case.spec)
    dout = build_dout(case, ref.fully_masked)
    want = attention_backward(inputs, dout, case.spec, ref) if direction == "backward" else ref

    def error(adapter) -> float:
        if direction == "forward":
            return float(np.max(np.abs(adapter.forward(inputs, case.spec).out - want.out)))
        got = adapter.gradients(inputs, case.spec, dout)
        return max(float(np.max(np.abs(getattr(got, n) - getattr(want, n)))) for n in ("dq", "dk", "dv"))

    wrong = getattr(tuned, mutant)()
    assert error(wrong) < 1e-4  # right at the defaults: a suite that never leaves them misses it
    assert error(wrong.configured(config)) > 1e-2
    correct = tuned.TunedAdapter()
    for _, edge in edge_matrix.edge_configs(tuned.TUNABLES, case.q_len, case.kv_len, case.batch):
        assert error(correct.configured(edge)) < 1e-4, edge


def test_a_choice_tunable_and_a_block_counted_in_pages():
    mode = Tunable("megacore_mode", "none", "choice", choices=("none", "kv_head", "batch"))
    pages = Tunable("pages_per_compute_block", 4, "kv", power_of_two=True, unit=16)
    tunables = Tunables((pages, mode))
    assert mode.legal_alone("batch") and not mode.legal_alone("cores") and not mode.legal_alone(1)
    assert tunables.problems({"megacore_mode": "both"}) == (
        "megacore_mode='both' is not legal (one of none, kv_head, batch)",
    )
    assert pages.span(256) == 16 and pages.span(77) == 5 and pages.span(0) == 1
    configs = dict(edge_matrix.edge_configs(tunables, 1, 256, 4))
    blocks = {dict(c).get("pages_per_compute_block") for c in configs.values()}
    assert blocks == {None, 1, 16}  # the largest covers 256 tokens: 16 pages, not 256
    assert configs["megacore_mode=batch"] == (("megacore_mode", "batch"),)
    assert configs["megacore_mode=kv_head"] == (("megacore_mode", "kv_head"),)
    assert config_token((("megacore_mode", "kv_head"),)) == "cfg-megacorekv_head"
    with pytest.raises(ValueError, match="choice"):
        Tunable("mode", "a", "choice")  # no choices
    with pytest.raises(ValueError, match="choice"):
        Tunable("mode", "c", "choice", choices=("a", "b"))  # default not among them
