"""Ladders: ordered rungs, each changing exactly ONE knob relative to the rung before.

A ladder file (``conf/ladder/NAME.yaml``, or ``<results_dir>/ladders/NAME.yaml`` for the ladders a
machine wrote itself, e.g. by ``climb``) holds a default workload, the baseline settings, and
the rungs with the claims the guide makes for them. Values that depend on the size (a batch or
patch that fits a GPU but not a 2-core CPU) may be given per size: ``{full: 8, smoke: 4}``.
Plain Python: no Hydra, no torch. Read by the sweeps (what to run) and by the analysis (a sweep's claims and notes),
so it sits with the settings, below both.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from harness.conf import CONF_DIR, project_dir
from harness.config.keys import check_key, get_key, set_key
from harness.config.schema import RunConfig
from harness.registry import unknown_choice

LADDER_DIR = CONF_DIR / "ladder"
USER_LADDERS = "ladders"  # <results_dir>/ladders/: ladders this machine wrote (``climb``), found after LADDER_DIR
SIZE_NAMES = ("full", "smoke")
LADDER_FIELDS = {"description", "guide", "workload", "base", "rungs", "total_claim", "total_source", "group_claims",
                 "stop_on_oom", "cap_workers_at_cpus", "notes"}
GROUP_FIELDS = {"rungs", "claim", "source", "component", "epoch_samples", "epoch_seconds"}
RUNG_FIELDS = {"set", "claim", "source", "note", "component", "epoch_samples", "epoch_seconds"}
# What a claim may be about besides the whole step: a guide's "2-3x in data loading" is judged on the loader, its
# "1.5x on matmul" on the device's (or, on a CPU, the host's) compute, its "2x during validation" on the validation
# passes (harness.analysis.views.components measures each); an "epoch" claim (persistent workers' "15-20%") at an
# epoch of the guide's length, ``epoch_samples`` (harness.analysis.views.epochs derives it from the epoch boundaries
# measured).
COMPONENTS = ("data", "compute", "validation", "epoch")


@dataclass(frozen=True)
class Claim:
    """A guide's claimed speedup range for a change (x, relative to the rung before or the baseline).

    ``low``/``high`` are None for a claim with no figure (the connectomics guide's "minor speedup"): its ``word``
    is the label, and the table reports what was measured without a verdict. ``component`` ("" for the whole
    step) names the part of the step the claim is about (:data:`COMPONENTS`)."""

    low: float | None
    high: float | None
    source: str
    component: str = ""
    word: str = ""

    @property
    def has_figure(self) -> bool:
        return self.low is not None

    def label(self) -> str:
        if not self.has_figure:
            return self.word
        return f"{self.low:g}x" if self.low == self.high else f"{self.low:g}-{self.high:g}x"


@dataclass(frozen=True)
class GroupClaim:
    """A guide's claim for several consecutive rungs together (rungs ``first``..``last``, both included),
    judged as rung ``last`` over the rung before ``first`` (e.g. DETR's "20-40%" for workers + prefetch +
    persistent workers)."""

    first: int
    last: int
    claim: Claim

    def span(self) -> str:
        return f"rungs {self.first}-{self.last}"


@dataclass(frozen=True)
class Rung:
    index: int
    key: str  # "" for the baseline
    value: Any = None
    claim: Claim | None = None
    note: str = ""

    def value_for(self, size: str) -> Any:
        return value_for_size(self.value, size)

    def change(self, size: str) -> str:
        """The one override this rung adds, e.g. ``precision=bf16-mixed`` ("" for the baseline)."""
        return f"{self.key}={format_value(self.value_for(size))}" if self.key else ""


@dataclass(frozen=True)
class Ladder:
    name: str
    description: str
    guide: str
    workload: str
    base: dict[str, Any]
    rungs: tuple[Rung, ...]
    total_claim: Claim | None = None
    group_claims: tuple[GroupClaim, ...] = ()
    stop_on_oom: bool = False
    cap_workers_at_cpus: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    path: str = ""  # the file it was read from ("" for a ladder built in memory)

    def varied_keys(self) -> set[str]:
        return {r.key for r in self.rungs if r.key}

    def settings(self, rung: int, size: str, dropped: frozenset[int] = frozenset()) -> dict[str, Any]:
        """Settings of ``rung``: workload and base, then every earlier change except ``dropped`` ones."""
        values: dict[str, Any] = {"workload": self.workload}
        values.update({k: value_for_size(v, size) for k, v in self.base.items()})
        for r in self.rungs[1 : rung + 1]:
            if r.index not in dropped or r.index == rung:
                values[r.key] = r.value_for(size)
        return values

    def turn(self, rung: int, size: str,
             dropped: frozenset[int] = frozenset()) -> tuple[dict[str, Any], dict[str, Any]]:
        """What a run of ``rung`` takes of the ladder, in one call: its settings (:meth:`settings`) and the record
        fields that carry its claims (:func:`claim_fields`)."""
        return self.settings(rung, size, dropped), claim_fields(self, rung)


def value_for_size(value: Any, size: str) -> Any:
    if isinstance(value, dict) and set(value) <= set(SIZE_NAMES) and value:
        if size not in value:
            raise ValueError(f"value {value} has no entry for size {size!r}")
        return value[size]
    return value


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def search_path(results_dir: str = "results", config_dirs: Iterable[str] = ()) -> list[Path]:
    """Where ``+ladder=NAME`` looks, in order: the shipped ladders, ``ladder/`` of each config folder given
    (``--config-dir DIR``, as Hydra's groups) and of ``harness-conf/`` here, then the results folder's own."""
    folders = [Path(d) for d in config_dirs]
    project = project_dir()
    if project is not None and project not in [d.resolve() for d in folders]:
        folders.append(project)
    return [LADDER_DIR, *(d / "ladder" for d in folders), Path(results_dir) / USER_LADDERS]


def find(name: str, results_dir: str = "results", config_dirs: Iterable[str] = ()) -> Path | None:
    return next((d / f"{name}.yaml" for d in search_path(results_dir, config_dirs) if (d / f"{name}.yaml").is_file()),
                None)


def available(results_dir: str = "results", config_dirs: Iterable[str] = ()) -> list[str]:
    return sorted({p.stem for d in search_path(results_dir, config_dirs) for p in d.glob("*.yaml")})


def _sha(path: Path | None) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path is not None and path.exists() else ""


def file_sha(name: str, results_dir: str = "results") -> str:
    """sha256 (16 hex) of the ladder file's text; "" when there is no such file."""
    return _sha(find(name, results_dir))


def group_claims_json(groups: tuple[GroupClaim, ...]) -> str:
    """The ladder's group claims as stored with every record of a sweep ("" when it has none)."""
    if not groups:
        return ""
    return json.dumps([{"first": g.first, "last": g.last, "low": g.claim.low, "high": g.claim.high,
                        "label": g.claim.label(), "source": g.claim.source,
                        **({"component": g.claim.component} if g.claim.component else {})} for g in groups])


def claim_fields(ladder: Ladder, rung: int) -> dict[str, Any]:
    """The RunRecord columns that carry a rung's claim and the ladder's total and group claims (store schema 2-4);
    a claim with no figure has a label and no low/high, and ``claim_component`` names a claim's part of the step."""
    fields: dict[str, Any] = {"ladder_sha": _sha(Path(ladder.path)) if ladder.path else file_sha(ladder.name),
                              "group_claims_json": group_claims_json(ladder.group_claims)}
    for prefix, claim in (("claim", ladder.rungs[rung].claim), ("total_claim", ladder.total_claim)):
        if claim is not None:
            fields.update({f"{prefix}_low": claim.low, f"{prefix}_high": claim.high,
                           f"{prefix}_label": claim.label(), f"{prefix}_source": claim.source})
    claim = ladder.rungs[rung].claim
    if claim is not None and claim.component:
        fields["claim_component"] = claim.component
    return fields


def load(name: str, results_dir: str = "results", config_dirs: Iterable[str] = ()) -> Ladder:
    """Load and validate ``conf/ladder/NAME.yaml`` (else ``DIR/ladder/NAME.yaml`` of a config folder, else
    ``<results_dir>/ladders/NAME.yaml``); an unknown name says which folders were searched."""
    config_dirs = tuple(config_dirs)
    path = find(name, results_dir, config_dirs)
    if path is None:
        folders = ", ".join(str(d) for d in search_path(results_dir, config_dirs))
        raise ValueError(f"{unknown_choice('ladder', name, available(results_dir, config_dirs))} (looked in "
                         f"{folders})")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise ValueError(f"ladder file {path}{at} is not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    try:
        return dataclasses.replace(parse(name, raw), path=str(path))
    except ValueError as exc:
        raise ValueError(f"{exc} (in {path})") from None


def parse(name: str, raw: dict[str, Any]) -> Ladder:
    """Build a Ladder from its mapping, rejecting any rung that changes zero or several knobs."""
    if not isinstance(raw, dict) or not isinstance(raw.get("rungs"), list):
        raise ValueError(f"ladder {name!r}: needs a 'rungs' list (may be empty)")
    unknown = set(raw) - LADDER_FIELDS
    if unknown:
        raise unknown_choice(f"field in ladder {name!r}:", sorted(unknown)[0], LADDER_FIELDS)
    base = dict(raw.get("base") or {})
    for key in base:
        check_key(key)
    rungs = [Rung(index=0, key="", note="baseline")]
    for i, entry in enumerate(raw["rungs"], start=1):
        rungs.append(_parse_rung(name, i, entry))
    ladder = Ladder(
        name=name,
        description=str(raw.get("description", "")),
        guide=str(raw.get("guide", "")),
        workload=str(raw.get("workload", "unet3d")),
        base=base,
        rungs=tuple(rungs),
        total_claim=_parse_claim(raw.get("total_claim"), raw.get("total_source", "")),
        group_claims=tuple(_parse_group(name, len(rungs) - 1, g) for g in raw.get("group_claims") or ()),
        stop_on_oom=bool(raw.get("stop_on_oom", False)),
        cap_workers_at_cpus=bool(raw.get("cap_workers_at_cpus", False)),
        notes=tuple(raw.get("notes", ()) or ()),
    )
    if ladder.total_claim is not None and not ladder.total_claim.has_figure:
        raise ValueError(f"ladder {name!r}: total_claim {ladder.total_claim.word!r} has no figure; a total is "
                         "judged against [LOW, HIGH] (a claim with no figure belongs to a rung or a group)")
    _check_one_change_each(ladder)
    return ladder


def _parse_rung(name: str, index: int, entry: Any) -> Rung:
    change = entry.get("set") if isinstance(entry, dict) else None
    unknown = set(entry) - RUNG_FIELDS if isinstance(entry, dict) else set()
    if unknown:
        raise unknown_choice(f"field of rung {index} in ladder {name!r}:", sorted(unknown)[0], RUNG_FIELDS)
    if not isinstance(change, dict) or len(change) != 1:
        n = len(change) if isinstance(change, dict) else 0
        raise ValueError(
            f"ladder {name!r} rung {index}: changes {n} knobs ({change}); every rung must change exactly one, "
            "written as `set: {KEY: VALUE}`"
        )
    (key, value), = change.items()
    check_key(key)
    claim = _parse_claim(entry.get("claim"), entry.get("source", ""), _component(name, entry))
    return Rung(index=index, key=key, value=value, claim=claim, note=str(entry.get("note", "")))


def _parse_group(name: str, n_rungs: int, entry: Any) -> GroupClaim:
    """``{rungs: [FIRST, LAST], claim: [LOW, HIGH], source: TEXT}``: a claim for rungs FIRST..LAST together."""
    if not isinstance(entry, dict):
        raise ValueError(f"ladder {name!r}: a group claim is a mapping {{rungs: [FIRST, LAST], claim: [LOW, HIGH], "
                         f"source: TEXT}}, not {entry!r}")
    unknown = set(entry) - GROUP_FIELDS
    if unknown:
        raise unknown_choice(f"field of a group claim in ladder {name!r}:", sorted(unknown)[0], GROUP_FIELDS)
    span = entry.get("rungs")
    if (not isinstance(span, list) or len(span) != 2 or not all(isinstance(i, int) for i in span)
            or not 1 <= span[0] < span[1] <= n_rungs):
        raise ValueError(f"ladder {name!r}: group claim rungs={span!r} is not valid: give [FIRST, LAST], two rung "
                         f"numbers with 1 <= FIRST < LAST <= {n_rungs} (the ladder's rungs)")
    if entry.get("claim") is None:
        raise ValueError(f"ladder {name!r}: group claim over rungs {span} has no claim: [LOW, HIGH]")
    claim = _parse_claim(entry["claim"], entry.get("source", ""), _component(name, entry))
    return GroupClaim(first=span[0], last=span[1], claim=claim)


def _component(name: str, entry: dict) -> str:
    """The part of the step a claim is about ("" for the whole step), one of :data:`COMPONENTS`; an epoch claim is
    ``epoch:N`` with the guide's N samples an epoch (``epoch_samples``), or ``epoch_s:S`` where the guide gives its
    epoch as S seconds of its baseline (``epoch_seconds``: the DETR guide's minutes)."""
    component, samples, seconds = entry.get("component"), entry.get("epoch_samples"), entry.get("epoch_seconds")
    if (component == "epoch") != ((samples is not None) != (seconds is not None)):
        raise ValueError(f"ladder {name!r}: epoch_samples={samples!r}, epoch_seconds={seconds!r} with "
                         f"component={component!r}: a claim at the guide's epoch length gives component: epoch and "
                         "one of epoch_samples: N (the guide's samples an epoch) or epoch_seconds: S (its epoch's "
                         "seconds at its baseline), and no other component takes either")
    if component is None:
        return ""
    if component not in COMPONENTS:
        raise unknown_choice(f"claim component in ladder {name!r}:", str(component), COMPONENTS)
    if entry.get("claim") is None:
        raise ValueError(f"ladder {name!r}: component {component!r} without a claim; give claim: [LOW, HIGH] too")
    if component != "epoch":
        return str(component)
    field, value = ("epoch_samples", samples) if samples is not None else ("epoch_seconds", seconds)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"ladder {name!r}: {field}={value!r} is not valid: give the guide's "
                         f"{'samples' if field == 'epoch_samples' else 'seconds'} an epoch as a whole number > 0")
    return f"epoch:{value}" if field == "epoch_samples" else f"epoch_s:{value}"


def _parse_claim(claim: Any, source: str, component: str = "") -> Claim | None:
    """``[LOW, HIGH]``, one number, or a word for a claim with no figure (``minor``)."""
    if claim is None:
        return None
    if isinstance(claim, str):
        if not claim.strip():
            raise ValueError("a claim with no figure needs the guide's word for it (e.g. claim: minor), not ''")
        return Claim(low=None, high=None, source=str(source), component=component, word=claim.strip())
    low, high = (claim, claim) if isinstance(claim, (int, float)) else (claim[0], claim[-1])
    return Claim(low=float(low), high=float(high), source=str(source), component=component)


def _check_one_change_each(ladder: Ladder) -> None:
    """Each rung's value must differ from what the rung before had at some size (else it changes nothing). A rung
    may change nothing at one size where its knob has no effect there (the guide's cuDNN toggle on a CPU's size)."""
    for r in ladder.rungs[1:]:
        same = [size for size in SIZE_NAMES if _unchanged(ladder, r, size)]
        if len(same) == len(SIZE_NAMES):
            raise ValueError(
                f"ladder {ladder.name!r} rung {r.index}: {r.key}={format_value(r.value_for(same[0]))} is what the "
                f"rung before already had (every size), so the rung changes zero knobs"
            )


def _unchanged(ladder: Ladder, r: Rung, size: str) -> bool:
    before = ladder.settings(r.index - 1, size)
    defaults = RunConfig()
    if r.key.startswith("workload."):  # workload.* defaults are the workload's own
        set_key(defaults, "workload", before["workload"])
    previous = before.get(r.key, _default(defaults, r.key))
    return format_value(previous) == format_value(r.value_for(size))


def _default(cfg: RunConfig, key: str) -> Any:
    return get_key(cfg, key)
