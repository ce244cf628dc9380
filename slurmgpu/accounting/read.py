"""Stage 1, read: row sources behind one small interface, chosen from a registry.

A row source turns one kind of accounting input (saved dumps, live `sacct` text, `sacct
--json`, pyslurm) into the normalized per-run frame (`load.LoadResult`) through the same
normalizer (`load.py`). Sources register under the name the `backend` option uses; `files`
is the source for saved dumps. Adding a backend is one class with `@register`, no edits
elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import ClassVar, Protocol

from slurmgpu.accounting import load as load_mod
from slurmgpu.accounting.options import AnalysisOptions
from slurmgpu.accounting.when import sacct_calls, sub_windows  # noqa: F401 (sub_windows: API)
from slurmgpu.errors import UsageError


@dataclass(frozen=True)
class ReadRequest:
    """What a source reads: the options, the live window and what Slurm told about itself."""

    options: AnalysisOptions
    normalize: load_mod.Options
    since: datetime | None
    until: datetime | None
    slurm_version: tuple[int, int, int] | None = None


@dataclass
class ReadResult:
    """Rows read by one source, and how it describes itself in the document."""

    loaded: load_mod.LoadResult
    kind: str  # "file" | "sacct" | "pyslurm"
    note: str


class RowSource(Protocol):
    """One kind of accounting input."""

    name: ClassVar[str]

    def read(self, request: ReadRequest) -> ReadResult:
        """Read and normalize every row of the request."""
        ...


SOURCES: dict[str, type[RowSource]] = {}


def register(cls: type[RowSource]) -> type[RowSource]:
    """Class decorator: make a row source available under `cls.name`."""
    SOURCES[cls.name] = cls
    return cls


def source_for(options: AnalysisOptions) -> RowSource:
    """The source for saved dumps when files are given, else the named live backend."""
    name = "files" if options.files else "store" if options.store else options.backend
    try:
        return SOURCES[name]()
    except KeyError:
        live = ", ".join(sorted(n for n in SOURCES if n not in ("files", "store")))
        raise UsageError(f"unknown accounting backend {name!r}: use one of {live}") from None


@register
class FileSource:
    """Saved `sacct -P`/`-p` dumps (`|` or `\x1f` delimited) or `sacct --json` documents,
    plain or gzipped."""

    name = "files"

    def read(self, request: ReadRequest) -> ReadResult:
        from slurmgpu.sources.sacct import json_dump_records

        loaded = load_mod.load_files(
            request.options.files, options=request.normalize, json_reader=json_dump_records
        )
        return ReadResult(loaded, "file", "saved sacct dumps")


@register
class StoreSource:
    """An accounting store (`store.py`): the normalized runs of ingested dumps."""

    name = "store"

    def read(self, request: ReadRequest) -> ReadResult:
        from slurmgpu.accounting import store

        opts = request.options
        loaded = store.read_store(opts.store, options=request.normalize, clusters=opts.clusters)
        return ReadResult(loaded, "store", f"accounting store {opts.store}")


@register
class SacctTextSource:
    """Live `sacct -P` text, one call per `chunk_hours` of the window (bounded memory)."""

    name = "sacct"

    def read(self, request: ReadRequest) -> ReadResult:
        from slurmgpu.sources import sacct

        env = request.options.env
        bounds, hours = sacct_calls(request.since, request.until, request.options.chunk_hours)
        fetch: Callable[[datetime, datetime], str] = partial(sacct.sacct_text, env=env)
        loaded = load_mod.load_windows(
            bounds, fetch, name="sacct", options=request.normalize, delimiter=sacct.DELIMITER
        )
        note = "sacct"
        if len(bounds) > 1:
            note += f"; {len(bounds)} sacct calls of {hours:g} h"
        return ReadResult(loaded, "sacct", note)


@register
class SacctJsonSource:
    """Live `sacct --json` (one document for the whole window)."""

    name = "sacct-json"

    def read(self, request: ReadRequest) -> ReadResult:
        from slurmgpu.sources import sacct

        doc = sacct.sacct_json(request.since, request.until, env=request.options.env)
        records = sacct.json_records(doc)
        loaded = load_mod.load_records(records, name="sacct --json", options=request.normalize)
        return ReadResult(loaded, "sacct", "sacct-json")


@register
class PyslurmSource:
    """pyslurm's database API, only when it matches the installed Slurm."""

    name = "pyslurm"

    def read(self, request: ReadRequest) -> ReadResult:
        from slurmgpu.sources import pyslurm_db

        decision = pyslurm_db.pyslurm_decision(request.slurm_version)
        if not decision.usable:
            raise UsageError(f"pyslurm cannot be used: {decision.reason}")
        records = pyslurm_db.pyslurm_records(decision.module, request.since, request.until)
        loaded = load_mod.load_records(records, name="pyslurm", options=request.normalize)
        return ReadResult(loaded, "pyslurm", decision.reason)


@register
class AutoSource:
    """pyslurm when importable and matching Slurm, else sacct text (the reason is kept)."""

    name = "auto"

    def read(self, request: ReadRequest) -> ReadResult:
        from slurmgpu.sources import pyslurm_db

        decision = pyslurm_db.pyslurm_decision(request.slurm_version)
        if decision.usable:
            return PyslurmSource().read(request)
        result = SacctTextSource().read(request)
        result.note = f"sacct text ({decision.reason}); {result.note}"
        return result
