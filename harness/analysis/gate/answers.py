"""A check's answer as its exit code, the same for both kinds of check (``harness.commands.exit_codes`` lists
them with every command's). No imports: the command line reads these without loading the statistics."""

from __future__ import annotations

DECIDED_OK = 0  # every config decided, nothing regressed
REGRESSED = 1  # a config regressed (decided), or now fails
NOTHING_COMPARABLE = 2  # as bad input: a baseline of other hardware, configs failing on both sides
BUSY = 5  # a config was measured on a busy machine: no verdict, run it again on a quiet one
UNDECIDED = 6  # a config is neither shown beyond nor within the threshold when the budget ran out


def exit_code(statuses: list[str]) -> int:
    """The exit code of a check whose rows have ``statuses``: busy first (a busy machine's check is never 0 or 1:
    it is run again on a quiet one), then a regression, nothing comparable, undecided, else decided-unchanged."""
    if "busy" in statuses:
        return BUSY
    if "regressed" in statuses:
        return REGRESSED
    if not set(statuses) & {"undecided", "improved", "unchanged"}:
        return NOTHING_COMPARABLE
    return UNDECIDED if "undecided" in statuses else DECIDED_OK


def verdict(code: int, named: dict[str, list[str]]) -> str:
    """The verdict line for exit ``code``, naming the configs of each status in ``named``."""
    def names(*statuses: str) -> str:
        return "; ".join(n for s in statuses for n in named.get(s, []))

    if code == REGRESSED:
        return "FAIL: regressed: " + names("regressed")
    if code == BUSY:
        return "BUSY: no verdict, the machine was busy: " + names("busy")
    if code == UNDECIDED:
        return "UNDECIDED: neither beyond nor within the threshold yet: " + names("undecided", "warned", "bimodal")
    if code == NOTHING_COMPARABLE:
        return "ERROR: nothing comparable"
    return "OK: decided, nothing regressed"
