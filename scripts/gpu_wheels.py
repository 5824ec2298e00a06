"""What a lent GPU machine must be given to run the harness: the packages its image lacks, as wheels carried in
``.whl/`` and installed with ``pip install --no-index --no-deps`` (docs/gpu.md), so that every dependency a carried
package needs at import must be carried too.

    python3 scripts/gpu_wheels.py            # the packages to carry, as pip requirements (one a line)
    python3 scripts/gpu_wheels.py check      # on the GPU machine: import each; exit 1 naming what is missing

The test tier checks these lists against what harness/ and harness_models/ import, so that a ladder never ends ``error``
on a slot for a module nobody carried (the SEResNet stand-in's soundfile needs cffi, which needs pycparser).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# What the lent machines' image has (module: distribution), with the dependencies those bring.
# SciPy and PyYAML were there on the H100 of 2026-11-27 (the headline's check imported them, none carried).
IMAGE = {"torch": "torch", "torchvision": "torchvision", "pandas": "pandas", "pyarrow": "pyarrow",
         "matplotlib": "matplotlib", "psutil": "psutil", "pynvml": "nvidia-ml-py", "rich": "rich", "numpy": "numpy",
         "PIL": "pillow", "scipy": "scipy", "yaml": "PyYAML"}
# What must be carried (module: pip requirement); versions where the H100's runs used them.
CARRIED = {"monai": "monai==1.6.1", "hydra": "hydra-core==1.3.8", "omegaconf": "omegaconf==2.3.1",
           "antlr4": "antlr4-python3-runtime==4.9.3", "nibabel": "nibabel==5.4.2",
           "soundfile": "soundfile", "cffi": "cffi", "pycparser": "pycparser"}
# Only DETR's workload needs it; the H100's image of 2026-11-27 had it (the check printed no note). Where an image
# lacks it, carry it in a call of its own (61 MB, past what one call carries with the rest).
ON_ITS_OWN = {"cv2": "opencv-python-headless"}
# Imported by optional parts that a GPU slot does not run, so not carried: the trackers' clients (an export runs where
# the user reads the results), Hugging Face (the GPU plan's lm parts run workload=gpt, the harness's own decoder),
# torchao (lm.float8 is `skipped` with the reason where it is missing).
NOT_CARRIED = {"mlflow": "export --to mlflow", "wandb": "export --to wandb", "tensorboard": "export --to tb",
               "transformers": "workload=gpt2 / llama", "torchao": "lm.float8"}
# What a carried package imports that --no-deps does not install (from each one's own requirements).
REQUIRES = {"hydra": ("omegaconf", "antlr4"), "omegaconf": ("antlr4", "yaml"), "soundfile": ("cffi",),
            "cffi": ("pycparser",), "monai": ("numpy", "torch"), "nibabel": ("numpy",), "scipy": ("numpy",)}
LOCAL = ("harness", "harness_models", "scripts", "tests")


def imported_modules(folders: tuple[str, ...] = ("harness", "harness_models")) -> dict[str, list[str]]:
    """The third-party top-level modules the sources under ``folders`` import (at the top or inside a function),
    each with the files that import it."""
    found: dict[str, set[str]] = {}
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {name.split(".")[0] for name in names}:
                    if top not in sys.stdlib_module_names and top not in LOCAL:
                        found.setdefault(top, set()).add(path.relative_to(REPO).as_posix())
    return {name: sorted(files) for name, files in sorted(found.items())}


def uncovered(modules) -> list[str]:
    """The modules among ``modules``, and what the carried ones require, that neither the image has nor is
    carried."""
    known = {**IMAGE, **CARRIED, **ON_ITS_OWN, **NOT_CARRIED}
    seen, todo = set(), list(modules)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += REQUIRES.get(name, ())
    return sorted(name for name in seen if name not in known)


def check() -> int:
    """Import every module of the image and of the carried wheels here; 1 naming the missing ones."""
    missing = []
    for name in [*IMAGE, *CARRIED]:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing.append(f"{name} ({CARRIED.get(name) or IMAGE[name]}: {exc})")
    for name, wheel in ON_ITS_OWN.items():
        if importlib.util.find_spec(name) is None:
            print(f"note: no {name} ({wheel}): the DETR ladders will end error; carry it in a call of its own")
    if missing:
        print("MISSING, carry their wheels in .whl/: " + "; ".join(missing))
        return 1
    print(f"every module the harness imports is here ({len(IMAGE) + len(CARRIED)})")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["check"]:
        return check()
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(CARRIED.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
