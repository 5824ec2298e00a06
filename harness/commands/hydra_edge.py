"""The Hydra edge: the one module that composes configs and launches Hydra apps.

Commands that take ``key=value`` overrides (run, sweep, diagnose, noise, climb, fit) call :func:`hydra_app` with
a task that returns its exit code, or :func:`compose_settings` for the composed settings alone; they
hand plain dicts on to ``harness.config``. Nothing below the commands imports Hydra.

How Hydra is driven, and why. A single run is composed once, with the compose API (which also turns a bad value
into one line), and its task is called with that config: the tasks use nothing of Hydra's runtime (no
``HydraConfig``, no output folder, no job logging: ``conf/config.yaml`` turns them off, ``hydra.run.dir`` is ``.``
and ``hydra.output_subdir`` null). A campaign (``sweep -m``) needs Hydra's multirun (its sweeper and launcher, e.g.
submitit's, and ``HydraConfig`` in each job), and ``--help``/``--cfg``/``--info`` are Hydra's own: both go through
:func:`hydra_cli`, which makes the two calls ``@hydra.main`` makes (parse the arguments, ``_run_hydra``) with the
arguments given instead of ``sys.argv``. ``_run_hydra`` is internal to Hydra; the alternatives were rewriting
``sys.argv`` around ``@hydra.main`` (what this replaced: global state, wrong in a thread or a test) or
``Hydra.create_main_hydra2(...).multirun(...)`` (internal too, and it leaves out the search path, the error report
and the flags that ``_run_hydra`` handles). ``hydra-core>=1.3.2`` (pyproject) takes ``_run_hydra(args, args_parser,
task_function, config_path, config_name)``; tests/test_hydra_edge.py fails if that changes.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Optional

from harness import config as config_mod
from harness import shell
from harness.climb.space import ClimbConfig
from harness.fit.search import FitConfig
from harness.conf import CONF_DIR, project_dir
from harness.registry import unknown_choice
from harness.config.workload import WorkloadSpec

CONFIG_GROUPS = ("ladder", "data", "workload")  # Hydra groups: `data=disk` picks conf/data/disk.yaml
HELP_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info")


@dataclass
class HydraRoot(config_mod.RunConfig):
    """RunConfig plus the optional ladder node that ``+ladder=NAME`` adds, the campaign id that ``sweep -m``
    gives every sweep it launches, the ``climb.*`` settings of ``climb`` and the ``fit.*`` settings of ``fit``. The
    workload node starts empty: the ``workload`` group fills it (a default with fields would leave its model's
    arguments behind in another workload's model node)."""

    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    ladder: Optional[Any] = None
    campaign: str = ""
    climb: ClimbConfig = field(default_factory=ClimbConfig)
    fit: FitConfig = field(default_factory=FitConfig)


_registered = False


def register_schema() -> None:
    global _registered
    if not _registered:
        from hydra.core.config_store import ConfigStore

        ConfigStore.instance().store(name="base", node=HydraRoot)
        _registered = True


def override_key(override: str) -> str | None:
    """The setting an override names (None for Hydra's own, for config groups and for flags)."""
    if override.startswith("-") or "=" not in override:
        return None
    key = override.split("=", 1)[0].lstrip("+~")
    if key.startswith(("hydra", "ladder.", "climb.", "fit.")) or key in CONFIG_GROUPS or key == "campaign":
        return None
    return key


def with_config_dirs(argv: list[str]) -> list[str]:
    """``--config-dir DIR`` (Hydra's flag, also ``-cd DIR`` and ``--config-dir=DIR``) as the override
    ``hydra.searchpath=[file://DIR]``, which the compose API honours too: the user's own config files
    (``DIR/workload/NAME.yaml``) join the groups; then ``harness-conf/`` of the current folder, when there is one
    (:func:`project_dir`). ValueError for a folder that is not there."""
    out, dirs, args = [], [], iter(argv)
    for arg in args:
        flag, _, value = arg.partition("=")
        if flag in shell.CONFIG_DIR_FLAGS:
            value = value or next(args, "")
            if not Path(value).is_dir():
                raise ValueError(f"{flag} {value!r}: no such folder "
                                 "(it holds your config groups, e.g. workload/NAME.yaml)")
            dirs.append(Path(value).resolve().as_uri())
        else:
            out.append(arg)
    if dirs:
        if any(a.lstrip("+").startswith(shell.SEARCH_PATH + "=") for a in out):
            raise ValueError("give your config folders with --config-dir or with hydra.searchpath, not both")
        out = shell.with_search_path(out, dirs)
    project = project_dir()
    if project is not None and project not in [Path(d).resolve() for d in config_dirs(out)]:
        out = add_search_dir(out, project)
    return out


def config_dirs(overrides: list[str]) -> list[str]:
    """The folders of the config search path the overrides give (``hydra.searchpath=[file:///DIR,...]``, which
    ``--config-dir DIR`` becomes): where a user's ``ladder/NAME.yaml`` is found too."""
    from urllib.parse import unquote, urlparse

    return [unquote(urlparse(uri).path) for uri in shell.search_path(overrides) if uri.startswith("file://")]


def add_search_dir(overrides: list[str], folder: Path) -> list[str]:
    """``overrides`` with ``folder`` added to Hydra's config search path (after the ones already given)."""
    return shell.with_search_path(overrides, [folder.resolve().as_uri()])


def check_overrides(overrides: list[str]) -> None:
    """Unknown settings stop here, before Hydra or anything else runs, with did-you-mean; so does a ``--flag``
    given where settings are ``key=value`` (``--results DIR`` for ``results_dir=DIR``)."""
    for i, override in enumerate(overrides):
        flag_setting(override, overrides[i + 1] if i + 1 < len(overrides) else "")
        key = override_key(override)
        if key is not None:
            config_mod.check_key(key)
        check_own_key(shell.given_key(override))


OWN_NODES = {"climb": ClimbConfig, "fit": FitConfig}  # the settings of `climb` and `fit` alone


def check_own_key(key: str) -> None:
    """ValueError naming an unknown ``climb.*`` or ``fit.*`` setting and the valid ones."""
    node, dot, _ = key.partition(".")
    if dot and node in OWN_NODES:
        known = [f"{node}.{f.name}" for f in fields(OWN_NODES[node])]
        if key not in known:
            raise unknown_choice("setting", key, known)


FLAG_SETTINGS = {"--results": "results_dir", "--results-dir": "results_dir", "--results_dir": "results_dir"}
HYDRA_FLAGS = ("--multirun", "--cfg", "--info", "--resolve", "--package", "--config-name", "--config-path", "--run",
               "--shell-completion", "--hydra-help", "--version", "--experimental-rerun", *HELP_FLAGS)


def flag_setting(arg: str, following: str = "") -> None:
    """ValueError for a ``--flag`` (``following``: the argument after it, its value when it has no ``=``) that a
    measuring command takes as a setting ``key=value``, naming the setting and the fix."""
    flag, _, value = arg.partition("=")
    if not flag.startswith("--") or flag in HYDRA_FLAGS:
        return
    key = FLAG_SETTINGS.get(flag, flag[2:].replace("-", "_"))
    value = value or (following if following and "=" not in following and not following.startswith("-") else "")
    head = f"{arg!r}: this command takes its settings as key=value, without dashes"
    try:
        config_mod.check_key(key)
    except ValueError as exc:  # no setting of that name: the did-you-mean, without the whole list
        unknown = str(exc).split(" Valid choices")[0].rstrip(".")
        raise ValueError(f"{head}; {unknown} (every setting: python -m harness run --help)") from None
    raise ValueError(f"{head}: write {key}={value or 'VALUE'} (every setting: python -m harness run --help)")


def hydra_app(overrides: list[str], task: Callable[[Any], int], multirun: bool = False) -> int:
    """Run ``task`` over the settings ``overrides`` compose to; return its exit code. One run (run, diagnose, noise,
    climb, fit): composed once (the compose API), ``task`` called with that config. A campaign (``multirun``) and
    Hydra's own flags (``--help``, ``--cfg``, ...): Hydra's command line (:func:`hydra_cli`); the largest exit code its
    jobs returned (jobs a launcher runs in other processes return theirs there: their caller reads the store)."""
    if any(o in HELP_FLAGS for o in overrides):
        return hydra_cli(overrides, task)
    try:
        overrides = with_config_dirs(overrides)
        check_overrides(overrides)
        cfg = None if multirun else compose_settings(overrides)  # a bad value is one line, not Hydra's error page
        if multirun:
            check_jobs(overrides)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if multirun:
        return hydra_cli(["--multirun", *overrides], task)
    return int(task(cfg) or 0)


def check_jobs(overrides: list[str]) -> None:
    """Every job of a multirun composed once, before any starts: ValueError with one line for a bad value of any
    job (Hydra's multirun would print its error page after the jobs before it ran)."""
    from harness.sweeps import campaign  # here: only a multirun expands its jobs (a single run's start skips it)

    for job in campaign.expand(sweep_alternatives(overrides)):
        compose_settings(job)


def hydra_cli(args: list[str], task: Callable[[Any], int]) -> int:
    """Hydra's command line over ``args``, ``task`` its job: what ``@hydra.main`` does, given the arguments instead of
    reading them from ``sys.argv`` (its two steps, parse and run, are the two calls here)."""
    from hydra import version
    from hydra._internal.utils import _run_hydra, get_args_parser

    version.setbase("1.3")
    register_schema()
    codes: list[int] = []

    def job(cfg) -> int:
        code = int(task(cfg) or 0)
        codes.append(code)
        return code

    parser = get_args_parser()
    try:
        _run_hydra(args=parser.parse_args(args), args_parser=parser, task_function=job, config_path=str(CONF_DIR),
                   config_name="config")
    except SystemExit as exc:  # Hydra exits on its own errors (bad override syntax, unknown group) and after --help
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    return max(codes, default=0)


def compose_settings(overrides: list[str], return_hydra_config: bool = False):
    """The composed config (Hydra's compose API); ValueError with one line for a bad override."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    register_schema()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=overrides, return_hydra_config=return_hydra_config)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ValueError(unreadable_override(overrides) or hydra_error_text(exc)) from None


def unreadable_override(overrides: list[str]) -> str:
    """The one line for the first override Hydra's grammar cannot read, with the quoting that reads ("" if they
    all parse): a value with an accent or a quote needs Hydra's own quotes, inside the shell's."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except HydraException as exc:
            reason = str(exc).strip().splitlines()[0]
            key, _, value = override.partition("=")
            if not value or value.lstrip()[:1] in ("[", "{", "(", "'", '"'):  # a list or a quoted value: no guess
                return f"{override!r}: Hydra cannot read it ({reason})"
            quoted = f"{key}={shell.hydra_value(value)}"
            return (f"{override!r}: Hydra cannot read the value {value!r} ({reason}); quote it for Hydra inside "
                    f"the shell's quotes: {_shell_word(quoted)}")
    return ""


def _shell_word(word: str) -> str:
    """``word`` for a shell, in double quotes when they keep it as it is (easier to read than shlex's)."""
    import shlex

    return f'"{word}"' if not any(c in word for c in '"$`\\!') else shlex.quote(word)


def sweep_alternatives(overrides: list[str]) -> list[tuple[str, list[str]]]:
    """Each override's key and its values, as overrides (``a=1,2`` -> ``("a", ["a=1", "a=2"])``), parsed by
    Hydra's override grammar (``range``, ``choice``, quoting; its public parser): what a campaign combines
    (``harness.sweeps.campaign.expand``). ValueError with one line for a bad override or an interval sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise ValueError(unreadable_override(overrides) or hydra_error_text(exc)) from None
    alternatives = []
    for override in parsed:
        key = override.get_key_element()
        if not override.is_sweep_override():
            alternatives.append((key, [f"{key}={override.get_value_element_as_str()}"]))
        elif override.is_discrete_sweep():
            alternatives.append((key, [f"{key}={value}" for value in override.sweep_string_iterator()]))
        else:
            raise ValueError(f"{override.input_line!r}: a campaign runs one sweep per value, so it takes a list "
                             "of values (a,b or range(...) or choice(...)), not an interval")
    return alternatives


def hydra_error_text(exc: BaseException) -> str:
    """One line for a Hydra/OmegaConf error: the bad override and what was wrong with it."""
    causes = [exc]
    while causes[-1].__cause__ is not None and len(causes) < 5:
        causes.append(causes[-1].__cause__)
    head = str(exc).strip().splitlines()[0]
    missing = re.search(r"Could not find '(\w+)/([^']+)'", str(exc))
    if missing and (CONF_DIR / missing.group(1)).is_dir():
        group, name = missing.groups()
        choices = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        mine = " (or a file of yours: --config-dir DIR with DIR/workload/NAME.yaml)" if group == "workload" else ""
        return f"{group}={name} is not a choice; valid choices: {', '.join(choices)}{mine}"
    detail = next((str(c).strip().splitlines()[0] for c in causes[1:] if str(c).strip()), "")
    text = f"{head}: {detail}" if detail and detail not in head else head
    typed = wrong_type(text)
    if typed:
        return typed
    new_key = re.search(r"Could not override '([^']+)'", text)
    if new_key and "not in struct" in text:
        text += f" (to add a key the config does not have, write +{new_key.group(1)}=VALUE)"
    return text


# what a setting of each type takes, by the words of OmegaConf's conversion errors
TYPE_WORDS = {"converted to Integer": "a whole number", "converted to Float": "a number",
              "not a valid bool": "true or false", "is not a ListConfig": "a list, e.g. [1,2]"}


def wrong_type(text: str) -> str:
    """One line for a value of the wrong type (``batch_size=abc``): the setting, the value and what it takes; ""
    for another error."""
    given = re.match(r"Error merging override ([^=\s]+)=(.*?): ", text)
    takes = next((words for marker, words in TYPE_WORDS.items() if marker in text), "")
    if not given or not takes:
        return ""
    key, value = given.groups()
    return f"{key}={value!r} is not valid: {key} takes {takes}"


def plain_settings(cfg) -> dict:
    """The composed Hydra config as a plain dict of run settings (no ladder node, campaign id, climb or fit node)."""
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(cfg, resolve=True)
    for key in ("ladder", "campaign", "climb", "fit", "hydra"):
        values.pop(key, None)
    return values


def fit_settings(cfg) -> FitConfig:
    """The composed ``fit.*`` settings as a plain FitConfig."""
    from omegaconf import OmegaConf

    return FitConfig(**OmegaConf.to_container(cfg.fit, resolve=True))


def climb_settings(cfg) -> ClimbConfig:
    """The composed ``climb.*`` settings as a plain ClimbConfig."""
    from omegaconf import OmegaConf

    return ClimbConfig(**OmegaConf.to_container(cfg.climb, resolve=True))
