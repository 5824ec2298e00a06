"""The config groups: those shipped with the package (``ladder/``, ``workload/``, ``data/``, ``hydra/`` and the root
``config.yaml``, package data, so that an installed wheel carries them: Hydra's primary config folder), and a
repository's own, ``harness-conf/`` of the folder the harness runs from (``harness init`` writes it).

A leaf module (no imports of the harness): the commands, the ladder reader and the workload reader find the
files through :data:`CONF_DIR` and :func:`project_dir`.
"""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent
# A repository's own config groups (``workload/``, ``ladder/``, ``data/``): on the search path of every command run
# from the folder that holds it, as if given with --config-dir. Not ``harness/``: that would shadow the package.
PROJECT_DIR = "harness-conf"


def project_dir() -> Path | None:
    """``harness-conf/`` of the folder the harness runs from, or None."""
    folder = Path(PROJECT_DIR)
    return folder.resolve() if folder.is_dir() else None
