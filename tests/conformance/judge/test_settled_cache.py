"""Settled work kept across runs (conformance/judge/settled_cache.py): a second run loads what the
first computed, and changing any one thing the result depends on computes it again."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from conformance.judge import artifacts
from conformance.judge.artifacts import LOWERING_TYPES, Oracle, SubjectRun
from conformance.judge.baseline import Numerics
from conformance.judge.settled_cache import (
    FINGERPRINT_CHARS,
    KEEP_FINGERPRINTS,
    SettledCache,
    Unkeyable,
    Unstorable,
    built_in,
    decode_entry,
    encode_entry,
    installed_digest,
    source_digest,
    value_digest,
)
from conformance.plan.cases import Case
from kernels.adapters.tpu_flash import TpuFlashAdapter
from kernels.hardware.lowering import Lowering, TracedKernel

CASE = Case("tpu_flash", "float32", batch=1, q_heads=2, kv_heads=1, q_len=16, kv_len=16, causal=True)


def _counting(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` by a wrapper that appends each call's first argument to a list."""
    calls, original = [], getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(args[0] if args else None)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


# --- keys ---------------------------------------------------------------------------------


def test_a_key_changes_with_any_one_value_it_holds():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    base = value_digest(array, CASE, Numerics())
    changed_element = array.copy()
    changed_element[2, 3] = np.nextafter(changed_element[2, 3], np.float32(np.inf))
    variants = [
        value_digest(changed_element, CASE, Numerics()),
        value_digest(array.view(np.int32), CASE, Numerics()),  # the same bytes in another dtype
        value_digest(array.reshape(4, 3), CASE, Numerics()),  # the same bytes in another shape
        value_digest(array, dataclasses.replace(CASE, causal=False), Numerics()),
        value_digest(array, dataclasses.replace(CASE, config=(("block_q", 8),)), Numerics()),
        value_digest(array, CASE, dataclasses.replace(Numerics(), **_one_numerics_change())),
    ]
    assert value_digest(array.copy(), dataclasses.replace(CASE), Numerics()) == base
    assert len({base, *variants}) == len(variants) + 1


def _one_numerics_change() -> dict:
    field = dataclasses.fields(Numerics)[0]
    value = getattr(Numerics(), field.name)
    return {field.name: (not value) if isinstance(value, bool) else "changed"}


def test_an_object_the_key_cannot_describe_is_refused_and_its_result_never_stored(tmp_path):
    with pytest.raises(Unkeyable, match="object"):
        value_digest(object())
    cache = SettledCache(tmp_path, "fp")
    computed = []
    for _ in range(2):
        assert cache.get_or_compute("kind", (object(),), lambda: computed.append(1) or 7) == 7
    assert len(computed) == 2 and not any(tmp_path.rglob("*.entry"))


def test_the_fingerprint_follows_the_sources_and_the_environment(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("X = 1\n")
    before = source_digest(tmp_path, ("pkg",))
    (package / "mod.py").write_text("X = 2\n")
    assert source_digest(tmp_path, ("pkg",)) != before
    assert installed_digest({"XLA_FLAGS": "--a"}) != installed_digest({"XLA_FLAGS": "--b"})
    assert installed_digest({"HOME": "/a"}) == installed_digest({"HOME": "/b"})  # not read by JAX


# --- the store ----------------------------------------------------------------------------


def test_a_second_run_loads_and_any_key_change_computes_again(tmp_path):
    computed: list[str] = []

    def compute(label: str):
        return lambda: computed.append(label) or np.full(3, len(computed))

    first = SettledCache(tmp_path, "fingerprint-1").get_or_compute("k", (1, "a"), compute("first"))
    again = SettledCache(tmp_path, "fingerprint-1").get_or_compute("k", (1, "a"), compute("again"))
    assert computed == ["first"] and np.array_equal(first, again)
    SettledCache(tmp_path, "fingerprint-2").get_or_compute("k", (1, "a"), compute("new fingerprint"))
    SettledCache(tmp_path, "fingerprint-1").get_or_compute("k", (1, "b"), compute("new part"))
    SettledCache(tmp_path, "fingerprint-1").get_or_compute("other", (1, "a"), compute("new kind"))
    assert computed == ["first", "new fingerprint", "new part", "new kind"]


def test_an_entry_is_data_read_back_only_as_the_types_its_caller_names(tmp_path):
    value = Lowering("tpu", None, (), (), 1.5, (TracedKernel("k", (2,), (), ((8, 128), 4), None),))
    data = encode_entry(value, LOWERING_TYPES)
    assert b"pickle" not in data and decode_entry(data, LOWERING_TYPES) == value
    with pytest.raises(KeyError):  # a dataclass its caller did not name is never built
        decode_entry(data, (Lowering,))
    scalars = {"a": np.float32(0.1), "b": np.int64(3), "nan": float("nan"), "bf16": np.ones(2, "bfloat16")}
    back = decode_entry(encode_entry(scalars, ()), ())
    assert type(back["a"]) is np.float32 and back["a"] == np.float32(0.1) and type(back["b"]) is np.int64
    assert np.isnan(back["nan"]) and back["bf16"].dtype.name == "bfloat16"
    with pytest.raises(Unstorable):
        encode_entry(object(), ())
    cache = SettledCache(tmp_path, "fp")
    assert cache.get_or_compute("k", (1,), lambda: {1, 2}) == {1, 2}  # a set: computed, not stored
    assert not any(tmp_path.rglob("*.entry"))


def test_a_half_written_or_corrupt_entry_is_computed_again_and_replaced(tmp_path):
    cache = SettledCache(tmp_path, "fp")
    cache.get_or_compute("k", (1,), lambda: list(range(1000)))
    path = cache.path("k", 1)
    path.write_bytes(path.read_bytes()[:100])  # a run killed while writing, before the rename
    assert cache.get_or_compute("k", (1,), lambda: "recomputed") == "recomputed"
    assert decode_entry(path.read_bytes(), ()) == "recomputed"
    path.write_bytes(b"not an entry")
    assert cache.get_or_compute("k", (1,), lambda: "again") == "again"


def test_without_a_folder_nothing_is_kept(tmp_path):
    assert SettledCache.under(None).folder is None
    cache = SettledCache.under(tmp_path, "f" * 64)
    assert cache.folder == tmp_path.resolve() / "settled" / ("f" * FINGERPRINT_CHARS)
    computed = []
    for _ in range(2):
        SettledCache(None).get_or_compute("k", (1,), lambda: computed.append(1))
    assert len(computed) == 2


def test_only_the_newest_fingerprints_keep_their_folders(tmp_path):
    root = tmp_path / "settled"
    for age, name in enumerate("abcde"):  # a newest, e oldest
        folder = root / (name * FINGERPRINT_CHARS)
        folder.mkdir(parents=True)
        (folder / "entry").write_text(name)
        os.utime(folder, (1000 - age, 1000 - age))
    current = SettledCache.under(tmp_path, "e" * 64)  # an old revision checked out again
    kept = sorted(p.name[0] for p in root.iterdir())
    assert current.folder.name == "e" * FINGERPRINT_CHARS and (current.folder / "entry").exists()
    assert kept == sorted({"e", *"abcd"[: KEEP_FINGERPRINTS - 1]})


# --- what the suite keeps -----------------------------------------------------------------


def test_the_reference_and_baseline_are_loaded_bitwise_and_recomputed_for_other_data(tmp_path, monkeypatch):
    cache = SettledCache(tmp_path, "fp")
    first = Oracle(CASE, cache)
    reference, baseline = first.reference, first.baseline_for(Numerics())
    grads, baseline_grads = first.reference_grads, first.baseline_grads_for(Numerics())

    forward_calls = _counting(monkeypatch, artifacts, "attention_forward")
    backward_calls = _counting(monkeypatch, artifacts, "attention_backward")
    baseline_calls = _counting(monkeypatch, artifacts.plain, "forward")
    second = Oracle(CASE, cache)  # the next run, or another subject on the same data
    assert np.array_equal(second.reference.out, reference.out)
    assert np.array_equal(second.reference.lse, reference.lse)
    assert np.array_equal(second.baseline_for(Numerics()).out, baseline.out)
    assert np.array_equal(second.reference_grads.dq, grads.dq)
    assert np.array_equal(second.baseline_grads_for(Numerics()).dk, baseline_grads.dk)
    assert (forward_calls, backward_calls, baseline_calls) == ([], [], [])

    other_numerics = dataclasses.replace(Numerics(), **_one_numerics_change())
    second.baseline_for(other_numerics)
    assert len(baseline_calls) == 1
    Oracle(dataclasses.replace(CASE, causal=False), cache).reference  # noqa: B018 - computed on access
    assert len(forward_calls) == 1


def _fake_lower(calls: list):
    def fake(call):
        calls.append(call)
        return Lowering(call.platform, None, seconds=123.0)

    return fake


def test_a_built_in_subjects_lowering_is_kept_per_case_and_direction(tmp_path, monkeypatch):
    cache = SettledCache(tmp_path, "fp")
    lowered: list = []
    monkeypatch.setattr(artifacts, "lower", _fake_lower(lowered))
    adapter = TpuFlashAdapter()
    assert built_in(type(adapter))
    first = SubjectRun(CASE, adapter, Oracle(CASE, cache)).lowering("forward")
    again = SubjectRun(CASE, adapter, Oracle(CASE, cache)).lowering("forward")
    assert len(lowered) == 1 and again.lowered and again.platform == first.platform
    assert again.seconds < 123.0  # what this run spent loading it, not the first run's time
    SubjectRun(CASE, adapter, Oracle(CASE, cache)).lowering("backward")
    other = dataclasses.replace(CASE, q_len=32, kv_len=32)
    SubjectRun(other, adapter, Oracle(other, cache)).lowering("forward")
    assert len(lowered) == 3


def test_an_adapter_from_outside_the_checkouts_packages_is_lowered_every_run(tmp_path, monkeypatch):
    class Elsewhere(TpuFlashAdapter):  # a plug-in's or a test's code: the key does not hold it
        pass

    lowered: list = []
    monkeypatch.setattr(artifacts, "lower", _fake_lower(lowered))
    cache = SettledCache(tmp_path, "fp")
    assert not built_in(Elsewhere)
    for _ in range(2):
        SubjectRun(CASE, Elsewhere(), Oracle(CASE, cache)).lowering("forward")
    assert len(lowered) == 2
