"""``check``'s thresholds: a default fraction plus overrides by workload or by ladder, parsed from repeated
``--threshold`` / ``--mem-threshold`` values; and ``BadInput``, the one-line error of a check's input."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


class BadInput(ValueError):
    """Input that ``check``/``baseline`` cannot use; the message is one line, and the exit code is 2."""



@dataclass
class Thresholds:
    """A default fraction plus overrides by workload or by ladder (the ladder one wins: it is narrower)."""

    default: float
    by_workload: dict[str, float] = field(default_factory=dict)
    by_ladder: dict[str, float] = field(default_factory=dict)
    by_rung: dict[int, float] = field(default_factory=dict)  # one config of a sweep (bisect's half steps)

    def get(self, workload: str, ladder: str, rung: int | None = None) -> float:
        if rung in self.by_rung:
            return self.by_rung[rung]
        if ladder in self.by_ladder:
            return self.by_ladder[ladder]
        return self.by_workload.get(workload, self.default)

    def describe(self, sign: str) -> str:
        extra = [f"{k} {sign}{v:.0%}" for k, v in self.by_workload.items()]
        extra += [f"ladder:{k} {sign}{v:.0%}" for k, v in self.by_ladder.items()]
        extra += [f"rung:{k} {sign}{v:.1%}" for k, v in self.by_rung.items()]
        return f"{sign}{self.default:.0%}" + (f" ({', '.join(extra)})" if extra else "")

    def check_names(self, flag: str, workloads: set[str], ladders: set[str]) -> None:
        """A threshold naming a workload or ladder that is not in the data is a typo: say so."""
        if self.by_rung:  # the stored check's configs are not a sweep's rungs
            raise BadInput(f"{flag} rung:{next(iter(self.by_rung))}=...: per-config thresholds are for check "
                           "--against; valid here: FRACTION, WORKLOAD=FRACTION or ladder:NAME=FRACTION")
        for kind, given, known in (("workload", self.by_workload, workloads), ("ladder", self.by_ladder, ladders)):
            for name in given:
                if name not in known:
                    raise BadInput(f"{flag} names {kind} {name!r}, which is in neither sweep; "
                                   f"valid choices: {', '.join(sorted(known)) or 'none'}")


def parse_thresholds(values: list[str] | None, default: float, flag: str) -> Thresholds:
    """Parse repeated ``--threshold`` values: ``0.05``, ``WORKLOAD=0.07``, ``ladder:NAME=0.1`` or ``rung:N=0.05``."""
    result = Thresholds(default)
    for value in values or []:
        key, _, number = value.rpartition("=")
        fraction = _fraction(number, value, flag)
        if not key:
            result.default = fraction
        elif key.startswith("rung:"):
            result.by_rung[_rung(key, value, flag)] = fraction
        elif key.startswith("ladder:"):
            result.by_ladder[key.removeprefix("ladder:")] = fraction
        else:
            result.by_workload[key] = fraction
    return result


def _rung(key: str, value: str, flag: str) -> int:
    number = key.removeprefix("rung:")
    if not number.isdigit():
        raise BadInput(f"{flag} {value!r}: rung:N needs a config's rung number, as rung:2=0.05")
    return int(number)


def _fraction(text: str, value: str, flag: str) -> float:
    try:
        fraction = float(text)
    except ValueError:
        fraction = math.nan
    if not 0 < fraction < 1:
        raise BadInput(f"{flag} {value!r}: expected a fraction between 0 and 1 (0.05 means 5%), "
                       f"as 0.05, WORKLOAD=0.07 or ladder:NAME=0.1")
    return fraction
