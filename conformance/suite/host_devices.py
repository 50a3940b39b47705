"""How many devices JAX's CPU backend simulates in a suite run: 4, so the ``sharded`` check has a
mesh of batch 2 x sequence 2, unless the user's XLA_FLAGS already names a count (theirs wins, 1 included).

XLA reads the flag when JAX creates its CPU backend, so it is set in the environment before
anything runs a JAX computation, in the controller (xdist workers and isolated retries inherit it).
A process whose backend already started keeps its device count; ``sharded`` then says why not.
Measured (docs/performance.md, "Simulated devices"): every forward and backward item of xla and
tpu_flash at ci (576) gets the same verdict and the same error metrics (max and mean error, to the
last digit) with 1 device and with 4, at no measurable cost. XLA_FLAGS is part of JAX's persistent
cache key: the first run after a change of it compiles afresh.
"""

from __future__ import annotations

from collections.abc import MutableMapping

FLAG = "--xla_force_host_platform_device_count"
DEVICES = 4  # a batch and a sequence split in two each, in one program (checks/sharded.py: mesh_for)


def with_host_devices(flags: str, count: int = DEVICES) -> str:
    """``flags`` (XLA_FLAGS' value) with the device count added, unless it names one already."""
    if any(word.split("=", 1)[0] == FLAG for word in flags.split()):
        return flags
    return f"{flags} {FLAG}={count}".strip()


def set_host_devices(environ: MutableMapping[str, str], count: int = DEVICES) -> None:
    """Sets XLA_FLAGS in ``environ`` (os.environ for this process and its children)."""
    environ["XLA_FLAGS"] = with_host_devices(environ.get("XLA_FLAGS", ""), count)
