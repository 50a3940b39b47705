"""One report folder read as a whole: its results, its summary and what they say
about the environment. Everything downstream (report, matrix, gate) starts here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from reports.records.results_file import WARNINGS, CaseResult, ResultsFile, read_results, read_summary

# reports/jax-X (jax alone) or reports/jax-X-tokamax-Y (jax_versions.report_folder): the versions a
# folder's name gives when its records do not (a run killed before its header was complete).
_FOLDER_VERSION = re.compile(r"^jax-(?P<version>.+?)(?:-tokamax-(?P<tokamax>[^-]+))?$")


@dataclasses.dataclass(frozen=True)
class Run:
    folder: Path
    results_file: ResultsFile
    summary: dict[str, Any] | None  # None after a killed run: summary.json is written at the end

    @property
    def results(self) -> tuple[CaseResult, ...]:
        return self.results_file.results

    @property
    def complete(self) -> bool:
        return self.results_file.complete

    @property
    def environment(self) -> dict[str, Any]:
        """The environment block from summary.json, else from the run header, else empty."""
        for source in (self.summary or {}, self.results_file.header):
            env = source.get("environment")
            if isinstance(env, dict) and env:
                return env
        return {}

    @property
    def jax_version(self) -> str:
        """The JAX version that ran: from the environment, else from a ``jax-X`` folder name."""
        libraries = self.environment.get("libraries")
        if isinstance(libraries, dict) and libraries.get("jax"):
            return str(libraries["jax"])
        if self.results_file.header.get("jax_version"):
            return str(self.results_file.header["jax_version"])
        match = _FOLDER_VERSION.match(self.folder.name)
        return match.group("version") if match else "unknown"

    @property
    def tokamax_version(self) -> str | None:
        """The tokamax version that ran, None when it was not installed: the environment's explicit
        ``tokamax`` (None included), else its library list, else a ``jax-X-tokamax-Y`` folder name.
        A folder written before tokamax was recorded reads as None unless its name says otherwise."""
        env = self.environment
        if "tokamax" in env:
            return None if env["tokamax"] is None else str(env["tokamax"])
        libraries = env.get("libraries")
        if isinstance(libraries, dict) and libraries.get("tokamax"):
            return str(libraries["tokamax"])
        match = _FOLDER_VERSION.match(self.folder.name)
        return match.group("tokamax") if match else None

    @property
    def versions(self) -> str:
        """The library pair that ran, as a column is labelled: ``0.10.2 + tokamax 0.0.12``, or
        ``0.10.2`` without tokamax."""
        tokamax = self.tokamax_version
        return self.jax_version if tokamax is None else f"{self.jax_version} + tokamax {tokamax}"

    def subject_warnings(self) -> dict[str, tuple[str, ...]]:
        """Each subject's distinct warnings (``WARNINGS``), first seen first: from summary.json
        (raised while it was resolved) and from its records (raised in its calls, by any process)."""
        seen: dict[str, dict[str, None]] = {}
        for s in (self.summary or {}).get("subjects") or []:
            if isinstance(s, dict) and s.get("name"):
                seen.setdefault(str(s["name"]), {}).update(dict.fromkeys(map(str, s.get(WARNINGS) or ())))
        for result in self.results:
            warned = result.availability.get(WARNINGS) or ()
            seen.setdefault(result.case.subject, {}).update(dict.fromkeys(map(str, warned)))
        return {subject: tuple(lines) for subject, lines in seen.items() if lines}

    @property
    def label(self) -> str:
        """How a report names this run: its JAX (and tokamax) version and folder."""
        return f"jax {self.versions} ({self.folder.name})"


def load_run(folder: Path) -> Run:
    """Read a report folder. Raises ResultsFileError (file and line named) on bad input."""
    folder = Path(folder)
    results_file = read_results(folder)
    folder = results_file.path.parent  # a results.jsonl path was given: its folder is the run
    return Run(folder=folder, results_file=results_file, summary=read_summary(folder))
