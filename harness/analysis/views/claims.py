"""The claims a sweep is judged against: stored with its records (what the sweep ran), or for older records the
ladder file's as it is now. Plain Python and pandas rows, no torch."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from harness.config import ladder as ladder_mod


@dataclass
class Claims:
    """The claims a sweep is judged against: stored with its records, or (older records) the ladder file's."""

    by_rung: dict[int, tuple[float | None, float | None, str, str]]  # rung -> (low, high, label, source)
    total: tuple[float, float, str, str] | None
    note: str = ""
    groups: list[dict] = field(default_factory=list)  # {first, last, low, high, label, source[, component]}
    components: dict[int, str] = field(default_factory=dict)  # rung -> the part of the step its claim is about

    @staticmethod
    def of(records, ladder, results_dir: str = "results") -> "Claims":
        stored = records["ladder_sha"].fillna("") != ""
        if stored.any():
            return Claims._stored(records[stored], ladder, results_dir)
        return Claims._from_ladder(ladder, str(records["ladder"].iloc[0]))

    @staticmethod
    def _stored(records, ladder, results_dir: str = "results") -> "Claims":
        by_rung, parts = {}, {}
        for _, r in records[records["claim_label"].fillna("") != ""].iterrows():  # a claim with no figure: no low
            by_rung[int(r["rung"])] = (_number(r["claim_low"]), _number(r["claim_high"]), r["claim_label"],
                                       r["claim_source"])
            if isinstance(r.get("claim_component"), str) and r["claim_component"]:
                parts[int(r["rung"])] = r["claim_component"]
        with_total = records[records["total_claim_low"].notna()]
        total = None
        if len(with_total):
            t = with_total.iloc[0]
            total = (float(t["total_claim_low"]), float(t["total_claim_high"]), t["total_claim_label"],
                     t["total_claim_source"])
        sha, now = str(records["ladder_sha"].iloc[0]), ladder_mod.file_sha(str(records["ladder"].iloc[0]), results_dir)
        note = ("" if sha == now else f"the ladder file changed since this sweep (sha {sha} then, "
                f"{now or 'no file'} now): verdicts use the claims stored with the records")
        groups = next((json.loads(g) for g in records["group_claims_json"].fillna("") if g), [])
        return Claims(by_rung, total, note, groups, parts)

    @staticmethod
    def _from_ladder(ladder, name: str) -> "Claims":
        if ladder is None:
            return Claims({}, None)
        by_rung = {r.index: (r.claim.low, r.claim.high, r.claim.label(), r.claim.source)
                   for r in ladder.rungs if r.claim is not None}
        parts = {r.index: r.claim.component for r in ladder.rungs if r.claim is not None and r.claim.component}
        t = ladder.total_claim
        total = None if t is None else (t.low, t.high, t.label(), t.source)
        note = (f"these records predate stored claims: claims read from conf/ladder/{name}.yaml as it is now"
                if by_rung or total else "")
        groups = json.loads(ladder_mod.group_claims_json(ladder.group_claims) or "[]")
        return Claims(by_rung, total, note, groups, parts)


def _number(value) -> float | None:
    """A stored claim bound (None for a claim with no figure, which pandas reads as NaN)."""
    return None if value is None or value != value else float(value)
