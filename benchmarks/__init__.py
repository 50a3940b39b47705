"""Subject benchmarks: each available subject's speed, compile time and peak memory.

Run by ``nox -s "bench(jax='X')"`` (CPU, -> ``reports/jax-X/benchmarks.json``) and by
``scripts/device-bench`` (a GPU or TPU, -> ``reports/device-<kind>-jax-X/``), never by
the default test run. ``run_records/benchmarks_file.py`` says how the upgrade gate reads them.

* ``shapes``: the shape lists and which one a subject gets (interpret vs native);
* ``cases``: subject x mode x shape, with the skip reason from the adapter's declarations;
* ``memory``: peak device memory, or peak host RSS as a stated proxy;
* ``timing``: one case measured through pytest-benchmark, with the gate's extra_info;
* ``sessions``: which JAX versions ``nox -s bench`` runs.
"""
