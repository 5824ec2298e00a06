"""The command lines the harness prints, built so that each runs as printed.

Every word is quoted for the shell (``shlex``); a value the harness writes into an override is also quoted for
Hydra when Hydra's grammar would not read it plain (a space, an accent, a comma, a quote). The words a user
gave are kept as given (they composed once, so they compose again), ``--config-dir DIR`` with its folder.
Plain strings: no torch, no Hydra, no other module of the harness.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Callable, Iterable

PROGRAM = "python -m harness"
CONFIG_DIR_FLAGS = ("--config-dir", "-cd")  # Hydra's flag; its folder is the next word, or after "="
SEARCH_PATH = "hydra.searchpath"  # the override that --config-dir DIR becomes: hydra.searchpath=[file:///DIR]
# what Hydra reads as a plain value (its override grammar's unquoted characters, less the ones a shell or an
# interpolation could take for its own)
_PLAIN = re.compile(r"[A-Za-z0-9_\-/+.%@:]+")


def command(*words: str) -> str:
    """``python -m harness WORD ...``, each word quoted for the shell where it needs it."""
    return " ".join([PROGRAM, *(shlex.quote(w) for w in words)])


def hydra_value(value: Any) -> str:
    """``value`` as Hydra reads it back: true/false, null, [a,b], and a string quoted when it is not plain."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text):
        return text
    if "'" not in text:
        return f"'{text}'"
    if '"' not in text:
        return f'"{text}"'
    return "'" + text.replace("'", "\\'") + "'"


def override(key: str, value: Any) -> str:
    """``key=value`` as one override (not yet quoted for the shell: :func:`command` does that)."""
    return f"{key}={hydra_value(value)}"


def given_key(word: str) -> str:
    """The key an override writes, as given (``+a.b=1`` -> ``a.b``); "" for a flag or a word without ``=``."""
    return word.split("=", 1)[0].lstrip("+~") if "=" in word and not word.startswith("-") else ""


def settings_only(argv: Iterable[str]) -> bool:
    """Whether every word is a setting (``key=value``), no flag among them (``--help``, ``-m``, ``--config-dir``)."""
    return all("=" in word and not word.startswith("-") for word in argv)


def arguments(argv: Iterable[str]) -> list[tuple[str, ...]]:
    """The words of a command line, a flag that takes a folder together with its folder."""
    out, words = [], iter(argv)
    for word in words:
        if word in CONFIG_DIR_FLAGS:
            following = next(words, None)
            out.append((word,) if following is None else (word, following))
        else:
            out.append((word,))
    return out


def is_config_dir(argument: tuple[str, ...]) -> bool:
    return argument[0].partition("=")[0] in CONFIG_DIR_FLAGS


def config_dirs_of(argv: Iterable[str]) -> list[str]:
    """The folders ``--config-dir DIR`` (``-cd DIR``, ``--config-dir=DIR``) name among the words of a command."""
    out = []
    for argument in arguments(argv):
        if is_config_dir(argument):
            folder = argument[1] if len(argument) > 1 else argument[0].partition("=")[2]
            out += [folder] if folder else []
    return out


def select(argv: Iterable[str], keep: Callable[[str], bool], config_dirs: bool = True) -> list[str]:
    """The words of ``argv`` whose override key ``keep`` accepts, and the config folders (unless not wanted)."""
    out: list[str] = []
    for argument in arguments(argv):
        if is_config_dir(argument):
            if config_dirs:
                out.extend(argument)
        elif keep(given_key(argument[0])):
            out.extend(argument)
    return out


def without(argv: Iterable[str], keys: Iterable[str]) -> list[str]:
    """``argv`` less the overrides of ``keys`` (a key ending in "." drops everything below it)."""
    keys = tuple(keys)
    return select(argv, lambda key: not any(key == k or (k.endswith(".") and key.startswith(k)) for k in keys))


def search_path(overrides: Iterable[str]) -> list[str]:
    """The URIs of Hydra's config search path that ``overrides`` give (``hydra.searchpath=[file:///DIR,...]``)."""
    uris = []
    for word in overrides:
        if word.lstrip("+").startswith(SEARCH_PATH + "="):
            listed = word.partition("=")[2].strip().removeprefix("[").removesuffix("]")
            uris += [uri.strip() for uri in listed.split(",") if uri.strip()]
    return uris


def with_search_path(overrides: list[str], uris: list[str]) -> list[str]:
    """``overrides`` with ``uris`` added to Hydra's config search path (after the ones already given)."""
    if not uris:
        return overrides
    for i, word in enumerate(overrides):
        if word.lstrip("+").startswith(SEARCH_PATH + "="):
            head = word.partition("=")[0]
            return overrides[:i] + [f"{head}=[{','.join(search_path([word]) + uris)}]"] + overrides[i + 1:]
    return overrides + [f"{SEARCH_PATH}=[{','.join(uris)}]"]
