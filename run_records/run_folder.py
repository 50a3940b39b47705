"""One report folder read as a whole: its results, its summary and what they say
about the environment. Everything downstream (report, matrix, gate) starts here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from run_records.results_file import WARNINGS, CaseResult, ResultsFile, read_results, read_summary
from versions import table

# reports/jax-X (jax alone) or reports/jax-X-tokamax-Y (jax_versions.folder_name: each library of the
# version table, its token then its version): the versions a folder's name gives when its records do
# not (a run killed before its header was complete).
_FOLDER_VERSION = re.compile(
    rf"^{table.PRIMARY.folder_token}-(?P<{table.PRIMARY.name}>.+?)"
    + "".join(rf"(?:-{c.folder_token}-(?P<{c.name}>[^-]+))?" for c in table.COMPANIONS)
    + "$"
)


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
        return match.group(table.PRIMARY.name) if match else "unknown"

    def companion_version(self, name: str) -> str | None:
        """The version of one companion library of the table (tokamax) that ran, None when it was not
        installed: the environment's explicit key (None included), else its library list, else the
        folder name (``jax-X-tokamax-Y``). A folder written before it was recorded reads as None
        unless its name says otherwise."""
        env = self.environment
        if name in env:
            return None if env[name] is None else str(env[name])
        libraries = env.get("libraries")
        if isinstance(libraries, dict) and libraries.get(name):
            return str(libraries[name])
        match = _FOLDER_VERSION.match(self.folder.name)
        return match.group(name) if match else None

    @property
    def tokamax_version(self) -> str | None:
        return self.companion_version("tokamax")

    @property
    def library_versions(self) -> dict[str, str | None]:
        """Every library of the version table: ``{"jax": "0.12.0.1", "tokamax": "0.0.17"}``."""
        return {table.PRIMARY.name: self.jax_version} | {
            c.name: self.companion_version(c.name) for c in table.COMPANIONS
        }

    @property
    def versions(self) -> str:
        """The libraries that ran, as a column is labelled: ``0.10.2 + tokamax 0.0.12``, or ``0.10.2``
        without a companion."""
        companions = [f"{n} {v}" for n, v in self.library_versions.items() if n != table.PRIMARY.name and v]
        return " + ".join([self.jax_version, *companions])

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
