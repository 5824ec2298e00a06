"""Where a record goes once it is made: a list of sinks, each handed every record in turn.

A sink is anything with ``put(record)``. The store is one (:class:`StoreSink`: a run measured or skipped as a whole
record, a copy of an earlier run, ``cached_from`` set, as the copy's few columns); a tracker's export, a live page or
a second store is one more, given to the command's :class:`Pipeline` beside it. A run's record reaches every sink
before an interrupt can end the command (``harness.run.parent.isolate`` holds the signals while it is put); a
sink that fails raises, as the store always did: a finished measurement is never lost silently.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol

from harness.store import RunRecord, store_copy, store_record


class Sink(Protocol):
    def put(self, record: RunRecord) -> None: ...


@dataclass(frozen=True)
class StoreSink:
    """The parquet store under ``results_dir`` (``harness.store.write``): a copy as its ``COPY_COLUMNS``, any other
    record whole (kept in the fallback folder, or printed, where the results folder refuses it)."""

    results_dir: str | os.PathLike

    def put(self, record: RunRecord) -> None:
        if record.cached_from:
            store_copy(record, self.results_dir)
        else:
            store_record(record, self.results_dir)


@dataclass(frozen=True)
class Pipeline:
    """The sinks of one command, in order: the store first, so that a record is safe before anything else sees it."""

    sinks: tuple[Sink, ...] = field(default_factory=tuple)

    @staticmethod
    def to_store(results_dir: str | os.PathLike, *more: Sink) -> "Pipeline":
        return Pipeline((StoreSink(results_dir), *more))

    def put(self, record: RunRecord) -> RunRecord:
        for sink in self.sinks:
            sink.put(record)
        return record
