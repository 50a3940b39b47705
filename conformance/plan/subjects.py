"""The subjects of a run: ``--impl NAME|all|a,b|package.module:function`` -> adapters.

Resolution itself is ``kernels.registry``'s job; this module asks each adapter once
for its availability and capabilities, so the rest of the suite never calls them
again (and a subject whose ``capabilities()`` raises is reported, not fatal), and keeps
the warnings those calls raise (``subject_warnings``).
"""

from __future__ import annotations

import dataclasses

from conformance.plan import subject_warnings
from kernels.contract.base import Adapter, Availability, Capabilities
from kernels.contract.subject_spec import SubjectSyntaxError, split_subjects
from kernels.contract.tunables import Config, configured
from kernels.registry import UnknownSubjectError, expand_family, resolve, subject_names
from kernels.subjects import SUBJECTS, CatalogueError, checked_tier

PRIMARY_SUBJECT = "tpu_flash"


@dataclasses.dataclass(frozen=True, eq=False)
class Subject:
    """One adapter with its declarations. ``capabilities`` is None when unavailable (unless
    ``Availability.lowerable``: then the lowering checks need them)."""

    name: str
    impl: str  # what --impl named it by: resolve(impl) gives this adapter again (repro scripts)
    adapter: Adapter
    availability: Availability
    capabilities: Capabilities | None
    # Raised while it was asked for these (importing its module, typically): ``subject_warnings.line``s.
    warnings: tuple[str, ...] = ()
    _configured: dict = dataclasses.field(default_factory=dict, repr=False)

    def adapter_for(self, config: Config) -> Adapter:
        """The adapter set to a case's config (one instance per config, so each keeps its
        compiled functions); the adapter itself for the default config."""
        if config not in self._configured:
            self._configured[config] = configured(self.adapter, config)
        return self._configured[config]

    @property
    def available(self) -> bool:
        return self.availability.available and self.capabilities is not None

    @property
    def lowerable(self) -> bool:
        """Unavailable, but the checks that only lower its call for its target still run."""
        return not self.available and self.availability.lowerable and self.capabilities is not None

    @property
    def reason(self) -> str:
        return self.availability.reason or "unavailable"


def _resolved_subject(impl: str) -> Subject:
    """``impl``'s adapter with its declarations; resolving imports a plug-in's module, whose
    warnings count as the subject's (a built-in adapter imports its library in ``availability()``)."""
    warned: list[str] = []
    with subject_warnings.capturing(warned):
        adapter = resolve(impl)
    return _declared_subject(impl, adapter, warned)


def _declared_subject(impl: str, adapter: Adapter, warned: list[str]) -> Subject:
    try:
        with subject_warnings.capturing(warned):
            availability = adapter.availability()
    except Exception as error:  # noqa: BLE001 - a broken adapter is a finding, not a crash
        availability = Availability(False, f"availability() raised {type(error).__name__}: {error}")
    capabilities = None
    if availability.available or availability.lowerable:
        try:
            with subject_warnings.capturing(warned):
                capabilities = adapter.capabilities()
        except Exception as error:  # noqa: BLE001
            availability = dataclasses.replace(
                availability, available=False, reason=f"capabilities() raised {type(error).__name__}: {error}"
            )
    return Subject(str(adapter.name), impl, adapter, availability, capabilities, tuple(warned))


def impl_names(impl: str, tier: str = "ci") -> tuple[str, ...]:
    """``"all"`` -> the variants of every built-in subject that ``--impl all`` runs at cost tier
    ``tier`` (a profile's name; ``kernels.subjects``: a family's members, then the entry-point
    subjects, then the variants with options); ``"a,b"`` -> ("a", "b");
    ``"tpu_flash[interpreter=tpu],xla"`` keeps its brackets; ``"tokamax"`` -> one subject per
    implementation, every one whatever the tier (``kernels.registry.expand_family``)."""
    try:
        names = split_subjects(impl)
    except SubjectSyntaxError as error:
        raise UnknownSubjectError(f"--impl {error}") from None
    if not names:
        raise UnknownSubjectError(
            f"--impl is empty; use one of {subject_names()}, 'all', or 'package.module:function'"
        )
    if "all" in names:
        everything = _in_all(tier)
        names = [*everything, *(n for n in names if n != "all" and n not in everything)]
    # A family name (kernels.registry.expand_family: "tokamax") is each of its implementations.
    return tuple(dict.fromkeys(expanded for n in names for expanded in expand_family(n)))


def _in_all(tier: str) -> list[str]:
    """``--impl all`` at ``tier``: each registered subject as ``--impl NAME`` runs it (a built-in's
    members of that tier or cheaper; an entry-point subject always), then the built-ins' variants
    with options of that tier or cheaper."""
    try:
        checked_tier(tier)
    except CatalogueError as error:
        raise UnknownSubjectError(str(error)) from None
    builtin = {s.name: s for s in SUBJECTS}
    registered = [
        member
        for name in subject_names()
        for member in (
            [v.name for v in builtin[name].members if v.runs_at(tier)] if name in builtin else [name]
        )
    ]
    with_options = [v.name for s in SUBJECTS for v in s.with_options if v.runs_at(tier)]
    return [*registered, *with_options]


def resolve_subjects(impl: str, tier: str = "ci") -> tuple[Subject, ...]:
    """Adapters for ``impl`` (raises kernels.registry.UnknownSubjectError with the fix); ``tier``:
    the profile whose ``--impl all`` this is."""
    names = impl_names(impl, tier)
    subjects = tuple(_resolved_subject(name) for name in names)
    names = [s.name for s in subjects]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UnknownSubjectError(
            f"two subjects are both called {duplicates} in --impl {impl!r}; name each once"
        )
    return subjects
