"""The persistent compilation cache helper (``conformance.judge.jax_compat``): which JAX config it sets,
that every name exists in the installed JAX, and that a name a version lacks is skipped."""

from __future__ import annotations

from pathlib import Path

from conformance.judge import jax_compat


class FakeConfig:
    """Records updates; rejects names outside ``known`` the way jax.config does."""

    def __init__(self, known: set[str]):
        self.known, self.values = known, {}

    def update(self, name: str, value: object) -> None:
        if name not in self.known:
            raise AttributeError(f"Unrecognized config option: {name}")
        self.values[name] = value


def test_the_cache_is_on_in_the_folder_and_keeps_every_compilation(tmp_path):
    folder = tmp_path / "venv" / "jax-cache"
    names = {name for name, _ in jax_compat.compilation_cache_settings(folder)}
    config = FakeConfig(names)
    settings = jax_compat.enable_compilation_cache(folder, config)
    assert folder.is_dir() and settings.folder == folder.resolve() and settings.missing == ()
    assert config.values["jax_compilation_cache_dir"] == str(folder.resolve())
    assert config.values["jax_enable_compilation_cache"] is True
    # JAX's defaults skip compilations under 1 s; the suite's small kernels must be kept too.
    assert config.values["jax_persistent_cache_min_compile_time_secs"] == 0
    assert config.values["jax_persistent_cache_min_entry_size_bytes"] == -1


def test_a_name_this_jax_lacks_is_skipped_and_reported(tmp_path):
    config = FakeConfig({"jax_compilation_cache_dir", "jax_enable_compilation_cache"})
    settings = jax_compat.enable_compilation_cache(tmp_path, config)
    assert set(settings.missing) == {
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    }
    assert {name for name, _ in settings.applied} == set(config.values)


def test_every_name_exists_in_the_installed_jax():
    import jax

    for name, _ in jax_compat.compilation_cache_settings(Path("unused")):
        getattr(jax.config, name)  # raises AttributeError for an unknown name; reads only
