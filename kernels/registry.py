"""Subject names -> adapters: built-ins, dotted paths, and entry-point plug-ins.

``resolve(name)`` accepts

* a built-in subject name (``subject_names()``, declared in ``kernels/subjects.py``), or one of
  its variants (``tpu_flash[interpreter=tpu]``, ``tokamax[impl=triton]``);
* a dotted path ``package.module:attribute`` to a function with the canonical
  signature (``kernels.adapters.function_adapter``), or to an adapter class or instance;
* the name of an adapter registered by an installed distribution in the entry-point
  group ``attention_conformance.adapters``. In ``pyproject.toml``::

      [project.entry-points."attention_conformance.adapters"]
      my_flash = "my_package.adapter:MyFlashAdapter"

  The entry point may name an adapter instance or a zero-argument callable (a
  class, a factory) that returns one. Built-in names win over entry points.

Anything else raises ``UnknownSubjectError`` with one line naming the problem and
the fix. Adapter modules are imported lazily, so a missing JAX or PyTorch surfaces
as ``availability()``, never as an import error here.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
from collections.abc import Callable, Iterable
from typing import Any

from kernels.adapters.function_adapter import FunctionAdapter, PluginSignatureError
from kernels.contract.base import Adapter
from kernels.contract.optional_members import optional_member
from kernels.contract.subject_spec import SubjectSpec, SubjectSyntaxError, parse_subject, split_subjects
from kernels.subjects import SUBJECTS

ENTRY_POINT_GROUP = "attention_conformance.adapters"

# name -> "module:Class", read from the catalogue (kernels/subjects.py). Lazy strings: importing the
# registry imports no JAX.
BUILTIN: dict[str, str] = {subject.name: subject.adapter for subject in SUBJECTS}
_FAMILIES: dict[str, tuple[str, ...]] = {
    subject.name: tuple(v.name for v in subject.members) for subject in SUBJECTS if subject.family
}


class UnknownSubjectError(ValueError):
    """A subject name, dotted path or entry point that does not resolve to a usable adapter."""


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def subject_names() -> tuple[str, ...]:
    """Built-in subjects, then entry-point subjects (sorted), without duplicates."""
    plugins = sorted(n for n in _entry_points() if n not in BUILTIN)
    return (*BUILTIN, *plugins)


def expand_family(name: str) -> tuple[str, ...]:
    """A bare built-in family name (a library with several implementations behind one API,
    ``BuiltinSubject.family``) -> one subject per member, e.g. ``"tokamax"`` ->
    ``("tokamax[impl=xla]", ...)``; any other name -> ``(name,)``."""
    return _FAMILIES.get(name, (name,))


def resolve(name: str, **options: Any) -> Adapter:
    """The adapter for ``name`` (see module docstring). A built-in takes options, in the name
    (``"tpu_flash[interpreter=tpu]"``, ``kernels.contract.subject_spec``) or as keywords
    (``resolve("tpu_flash", interpreter="tpu")``); the adapter is named by the canonical text."""
    try:
        spec = parse_subject(name)
    except SubjectSyntaxError as error:
        raise UnknownSubjectError(str(error)) from None
    if options:
        spec = parse_subject(
            SubjectSpec(spec.base, tuple(sorted({**dict(spec.options), **options}.items()))).text
        )
    name = spec.base
    if name in BUILTIN:
        return _check_adapter(_builtin_with_options(name, spec), spec.text)
    if spec.options:
        raise UnknownSubjectError(
            f"{spec.text!r}: options only apply to built-in subjects {tuple(BUILTIN)}; "
            f"drop the [{','.join(f'{k}={v}' for k, v in spec.options)}]"
        )
    if ":" in name:
        return _resolve_path(name)
    plugins = _entry_points()
    if name in plugins:
        return _resolve_entry_point(plugins[name])
    raise UnknownSubjectError(
        f"unknown subject {name!r}; use one of {subject_names()}, 'all', "
        f"or a dotted path 'package.module:function'"
    )


def _builtin_with_options(name: str, spec: SubjectSpec) -> Adapter:
    """A built-in adapter built with ``spec``'s options, each checked against the adapter's
    ``OPTIONS`` (option -> its legal values), named by the canonical text without defaults."""
    factory = _import_attribute(BUILTIN[name], name)
    declared: dict[str, tuple[str, ...]] = dict(optional_member(factory, "OPTIONS"))
    for key, value in spec.options:
        if key not in declared:
            takes = ", ".join(f"{k}={'|'.join(v)}" for k, v in declared.items()) or "no options"
            raise UnknownSubjectError(f"{spec.text!r}: {name} has no option {key!r}; it takes {takes}")
        if value not in declared[key]:
            raise UnknownSubjectError(
                f"{spec.text!r}: {key}={value} is not one of {'|'.join(declared[key])}; "
                f"e.g. {name}[{key}={declared[key][-1]}]"
            )
    defaults = (
        {f.name: f.default for f in dataclasses.fields(factory) if f.name in declared}
        if dataclasses.is_dataclass(factory)
        else {}
    )
    canonical = spec.without_defaults(defaults)
    kwargs: dict[str, Any] = dict(spec.options)
    if canonical.options:
        kwargs["name"] = canonical.text
    return factory(**kwargs)


def resolve_many(names: str | Iterable[str]) -> tuple[Adapter, ...]:
    """Several subjects: ``"all"``, a comma-separated string, or an iterable of names."""
    if isinstance(names, str):
        try:
            names = split_subjects(names)
        except SubjectSyntaxError as error:
            raise UnknownSubjectError(str(error)) from None
    names = list(names)
    if any(n.strip() == "all" for n in names):
        names = list(subject_names())
    names = [expanded for n in names for expanded in expand_family(n.strip())]
    if not names:
        raise UnknownSubjectError(f"no subject given; use one of {subject_names()} or 'all'")
    return tuple(resolve(n) for n in names)


def _import_attribute(path: str, what: str) -> Any:
    """``"package.module:attr.sub"`` -> the object; UnknownSubjectError with the fix otherwise."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise UnknownSubjectError(f"{what!r}: a dotted path must look like 'package.module:function'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise UnknownSubjectError(
            f"{what!r}: cannot import module {module_name!r} ({error}); "
            f"check the spelling and that it is on sys.path"
        ) from error
    except Exception as error:  # the module itself fails while importing: still one line, not a traceback
        raise UnknownSubjectError(
            f"{what!r}: importing module {module_name!r} raised {type(error).__name__}: {error}; "
            f"fix that module (or what it imports) and retry"
        ) from error
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnknownSubjectError(
                f"{what!r}: module {module_name!r} has no attribute {attribute!r}; check the name after ':'"
            ) from None
    return obj


def _resolve_path(path: str) -> Adapter:
    obj = _import_attribute(path, path)
    # Classes first: a class has every attribute of the Adapter protocol, so
    # isinstance(cls, Adapter) is True for the class object itself.
    if isinstance(obj, type):
        return _check_adapter(_instantiate(obj, path), path)
    if isinstance(obj, Adapter):
        return obj
    if not callable(obj):
        raise UnknownSubjectError(f"{path!r}: is a {type(obj).__name__}, not a function or adapter")
    try:
        return FunctionAdapter.wrap(obj, path)
    except PluginSignatureError as error:
        raise UnknownSubjectError(str(error)) from error


def _resolve_entry_point(ep: importlib.metadata.EntryPoint) -> Adapter:
    where = f"entry point {ep.name!r} ({ep.value}) in group {ENTRY_POINT_GROUP!r}"
    try:
        obj = ep.load()
    except Exception as error:
        raise UnknownSubjectError(
            f"{where} failed to load: {type(error).__name__}: {error}; "
            f"fix or uninstall the distribution providing it"
        ) from error
    if isinstance(obj, type) or not isinstance(obj, Adapter):
        if not callable(obj):
            raise UnknownSubjectError(
                f"{where} is a {type(obj).__name__}; point it at an adapter class or instance"
            )
        obj = _instantiate(obj, where)
    return _check_adapter(obj, where)


def _instantiate(factory: Callable[[], Any], where: str) -> Any:
    try:
        return factory()
    except Exception as error:
        raise UnknownSubjectError(
            f"{where}: calling it with no arguments failed ({type(error).__name__}: {error}); "
            f"it must be an adapter class or factory taking no arguments"
        ) from error


def _check_adapter(obj: Any, where: str) -> Adapter:
    if isinstance(obj, type) or not isinstance(obj, Adapter):
        missing = [
            m
            for m in ("name", "description", "availability", "capabilities", "forward", "gradients")
            if not hasattr(obj, m)
        ]
        raise UnknownSubjectError(
            f"{where}: {type(obj).__name__} is not an adapter (missing {missing}); "
            f"implement kernels.contract.base.Adapter"
        )
    return obj
