"""Settled work kept across runs: float64 references, baselines and hardware lowerings.

Each of these is a pure function of what it is given: a case's arrays and options for the
reference and the baseline, a case and a direction for a lowering. They are stored on disk under
a key that holds everything the result depends on, so a rerun, another subject on the same data,
or the other xdist worker loads them instead of computing them again:

* the arguments themselves, by value (every array's dtype, shape and bytes; every dataclass's
  type and fields), never by a name such as a case id;
* the suite's own sources (every ``.py`` file of the packages below), so an edit to the reference,
  the baseline or an adapter is a new key;
* every installed distribution and its version, the Python, and the environment variables JAX
  and XLA read, so another JAX, jaxlib, tokamax or NumPy is a new key.

The last two make the fingerprint, which also names the entries' folder: the folders of older
fingerprints beyond the newest few are removed.

A stale entry can therefore never change a verdict: nothing the result depends on is left out
of its key. A file that cannot be read back (half-written, corrupt, from another Python) is
computed again and replaced; an argument the key cannot describe is computed and not stored.

An entry is JSON and raw array bytes, never a pickle (nothing is ever unpickled: docs/reliability.md):
a value is rebuilt only from the dataclasses its caller names, numbers, strings, tuples, dicts and
arrays of a known dtype.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import ml_dtypes  # noqa: F401 - registers bfloat16 and the fp8 dtypes by name with NumPy
import numpy as np

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
# The packages whose code a settled result can depend on (the tools in reports/ and benchmarks/ cannot).
SOURCE_PACKAGES = ("versions", "reference", "kernels", "run_records", "conformance")
ENVIRONMENT_PREFIXES = ("XLA_", "JAX_", "TPU_", "LIBTPU_")
FOLDER_NAME = "settled"  # under the run's --jax-cache-dir
FINGERPRINT_CHARS = 16  # a fingerprint's folder name
KEEP_FINGERPRINTS = 3  # the suite revisions and environments whose entries stay on disk


class Unkeyable(TypeError):
    """An argument whose value the key cannot describe (its result is computed, not stored)."""


class Unstorable(TypeError):
    """A value an entry cannot hold: a dataclass its caller did not name, or another object."""


MAGIC = b"settled-entry-1\n"


def _feed(digest: Any, value: Any) -> None:
    """Write ``value`` into ``digest`` unambiguously: a type tag, then its content."""
    if value is None or isinstance(value, bool | int | float | complex | str | bytes):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, np.ndarray | np.generic):
        array = np.ascontiguousarray(value)
        digest.update(f"ndarray:{array.dtype.str}:{array.dtype.name}:{array.shape};".encode())
        digest.update(array.tobytes())
    elif isinstance(value, enum.Enum):
        digest.update(f"enum:{type(value).__qualname__}.{value.name};".encode())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        digest.update(f"dataclass:{type(value).__module__}.{type(value).__qualname__}(".encode())
        for field in dataclasses.fields(value):
            digest.update(f"{field.name}=".encode())
            _feed(digest, getattr(value, field.name))
        digest.update(b");")
    elif isinstance(value, tuple | list):
        digest.update(f"{type(value).__name__}[{len(value)}](".encode())
        for item in value:
            _feed(digest, item)
        digest.update(b");")
    elif isinstance(value, dict):
        digest.update(f"dict[{len(value)}](".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
        digest.update(b");")
    else:
        raise Unkeyable(f"the settled cache cannot key on a {type(value).__qualname__}")


def value_digest(*parts: Any) -> str:
    """The hex digest of ``parts`` by value (``Unkeyable`` for a type it cannot describe)."""
    digest = hashlib.sha256()
    for part in parts:
        _feed(digest, part)
    return digest.hexdigest()


def source_digest(root: Path, packages: Iterable[str]) -> str:
    """Every ``.py`` file under ``root/package`` for each package, by path and content."""
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def installed_digest(environ: dict[str, str] | None = None) -> str:
    """The installed distributions with their versions, the Python, and the variables JAX reads."""
    environ = dict(os.environ if environ is None else environ)
    distributions = sorted(
        f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions() if d.metadata["Name"]
    )
    variables = sorted(f"{k}={v}" for k, v in environ.items() if k.startswith(ENVIRONMENT_PREFIXES))
    return value_digest(sys.version, tuple(distributions), tuple(variables))


def built_in(kind: type) -> bool:
    """Whether ``kind`` is defined in this checkout's packages, whose sources the key holds."""
    module = sys.modules.get(kind.__module__)
    source = getattr(module, "__file__", None)
    if not source:
        return False
    path = Path(source).resolve()
    return any(path.is_relative_to(ROOT / package) for package in SOURCE_PACKAGES)


@functools.cache
def suite_fingerprint() -> str:
    """This checkout's sources and this environment, once per process."""
    return value_digest(source_digest(ROOT, SOURCE_PACKAGES), installed_digest())


@dataclasses.dataclass(frozen=True)
class SettledCache:
    """A folder of settled results; ``folder=None`` keeps nothing (every result is computed).

    fingerprint: what every key also holds (``suite_fingerprint()``; tests pass their own).
    """

    folder: Path | None
    fingerprint: str = ""

    @classmethod
    def under(cls, jax_cache_dir: str | Path | None, fingerprint: str | None = None) -> SettledCache:
        """The run's cache: ``settled/<fingerprint>/`` inside ``--jax-cache-dir``, or none without one.
        The folders of all but the ``KEEP_FINGERPRINTS`` newest fingerprints are removed: an edit to
        the suite or an upgrade makes their entries unreachable, and an ``--impl all`` run at ci
        leaves about 220 MB."""
        if not jax_cache_dir:
            return cls(None)
        fingerprint = fingerprint or suite_fingerprint()
        root = Path(jax_cache_dir).expanduser().resolve() / FOLDER_NAME
        folder = root / fingerprint[:FINGERPRINT_CHARS]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            os.utime(folder)  # the newest in use, whether made now or by an earlier run
            prune(root, keep=folder)
        except OSError:  # a read-only or full disk: entries are then computed, not kept
            pass
        return cls(folder, fingerprint)

    def path(self, kind: str, *parts: Any) -> Path | None:
        """Where the result of ``kind`` on ``parts`` is kept; None when nothing is kept."""
        if self.folder is None:
            return None
        try:
            key = value_digest(kind, self.fingerprint, *parts)
        except Unkeyable:
            return None
        return self.folder / kind / f"{key}.entry"

    def get_or_compute(
        self, kind: str, parts: tuple[Any, ...], compute: Callable[[], T], types: tuple[type, ...] = ()
    ) -> T:
        """The stored result of ``kind`` on ``parts``, or ``compute()``, stored for the next run.
        ``types``: the dataclasses the result is made of (the only ones an entry is read back as)."""
        path = self.path(kind, *parts)
        if path is None:
            return compute()
        try:
            return decode_entry(path.read_bytes(), types)
        except Exception:  # noqa: BLE001 - absent, half-written or unreadable: computed and replaced
            pass
        value = compute()
        try:
            data = encode_entry(value, types)
        except Unstorable:
            return value
        _write_atomically(path, data)
        return value


def encode_entry(value: Any, types: tuple[type, ...]) -> bytes:
    """``value`` as an entry: ``MAGIC``, the length of a JSON header, the header, the arrays' bytes."""
    arrays: list[np.ndarray] = []
    tree = _encode(value, {t.__qualname__ for t in types}, arrays)
    layout, offset = [], 0
    for array in arrays:
        layout.append({"dtype": array.dtype.name, "shape": list(array.shape), "offset": offset})
        offset += array.nbytes
    header = json.dumps({"value": tree, "arrays": layout}).encode()
    return b"".join([MAGIC, len(header).to_bytes(8, "little"), header, *(a.tobytes() for a in arrays)])


def decode_entry(data: bytes, types: tuple[type, ...]) -> Any:
    """The value ``encode_entry`` wrote; ValueError for anything else."""
    if not data.startswith(MAGIC):
        raise ValueError("not a settled entry")
    start = len(MAGIC) + 8
    size = int.from_bytes(data[len(MAGIC) : start], "little")
    header = json.loads(data[start : start + size])
    body = memoryview(data)[start + size :]
    arrays = []
    for spec in header["arrays"]:
        dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        array = np.frombuffer(body, dtype=dtype, count=count, offset=spec["offset"])
        arrays.append(array.reshape(shape).copy())  # writable, and not a view of the file's bytes
    return _decode(header["value"], {t.__qualname__: t for t in types}, arrays)


def _encode(value: Any, names: set[str], arrays: list[np.ndarray]) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return {"float": repr(value)}  # exact, inf and nan included
    if isinstance(value, np.ndarray):
        arrays.append(np.ascontiguousarray(value))
        return {"array": len(arrays) - 1}
    if isinstance(value, np.generic):  # a NumPy scalar keeps its type: its dtype and exact bytes
        return {"scalar": [value.dtype.name, value.tobytes().hex()]}
    if isinstance(value, tuple | list):
        return {type(value).__name__: [_encode(v, names, arrays) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[_encode(k, names, arrays), _encode(v, names, arrays)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and type(value).__qualname__ in names:
        fields = {f.name: _encode(getattr(value, f.name), names, arrays) for f in dataclasses.fields(value)}
        return {"dataclass": type(value).__qualname__, "fields": fields}
    raise Unstorable(f"a settled entry cannot hold a {type(value).__qualname__}")


def _decode(tree: Any, types: dict[str, type], arrays: list[np.ndarray]) -> Any:
    if tree is None or isinstance(tree, bool | int | str):
        return tree
    if "dataclass" in tree:
        fields = {name: _decode(v, types, arrays) for name, v in tree["fields"].items()}
        return types[tree["dataclass"]](**fields)  # KeyError for a type the caller did not name
    ((tag, content),) = tree.items()
    if tag == "float":
        return float(content)
    if tag == "array":
        return arrays[content]
    if tag in ("tuple", "list"):
        items = [_decode(v, types, arrays) for v in content]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        return {_decode(k, types, arrays): _decode(v, types, arrays) for k, v in content}
    if tag == "scalar":
        name, data = content
        return np.frombuffer(bytes.fromhex(data), dtype=np.dtype(name))[0]
    raise ValueError(f"unknown tag {tag!r} in a settled entry")


def prune(root: Path, keep: Path) -> None:
    """Remove the fingerprint folders under ``root`` beyond the ``KEEP_FINGERPRINTS`` newest,
    ``keep`` always among those kept. Another run still using one only computes its entries again."""
    others = sorted(
        (p for p in root.iterdir() if p.is_dir() and p != keep), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for stale in others[KEEP_FINGERPRINTS - 1 :]:
        shutil.rmtree(stale, ignore_errors=True)


NOTHING_KEPT = SettledCache(None)  # the default: a run without a cache folder computes everything


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` beside ``path`` and rename it into place: a reader (the other worker, a
    later run) sees the whole file or none. A full disk or a read-only folder loses only the entry."""
    part: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".part", delete=False) as handle:
            part = Path(handle.name)
            handle.write(data)
        os.replace(part, path)
    except OSError:
        if part is not None:
            part.unlink(missing_ok=True)
