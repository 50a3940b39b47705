"""One report folder read as a whole: its results, its summary and what they say
about the environment. Everything downstream (report, matrix, gate) starts here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from reports.records.results_file import CaseResult, ResultsFile, read_results, read_summary

_FOLDER_VERSION = re.compile(r"^jax-(?P<version>.+)$")


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
    def label(self) -> str:
        """How a report names this run: its JAX version and folder."""
        return f"jax {self.jax_version} ({self.folder.name})"


def load_run(folder: Path) -> Run:
    """Read a report folder. Raises ResultsFileError (file and line named) on bad input."""
    folder = Path(folder)
    results_file = read_results(folder)
    folder = results_file.path.parent  # a results.jsonl path was given: its folder is the run
    return Run(folder=folder, results_file=results_file, summary=read_summary(folder))
