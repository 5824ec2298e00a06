"""MONAI imported for the harness's reference workloads without the optional packages they never use.

``import monai`` walks every MONAI subpackage (``load_submodules``) and ``monai.networks.nets`` imports every network;
on the way MONAI imports, each through its own handling of an absent optional package (``monai.utils.optional_import``
or a ``try: import ... except ImportError``), torchvision (AHNet's FPN backbone), transformers (TransChex), mlflow (its
MLflow handler), matplotlib (its notebook plots), pandas (its CSV datasets, its profiling tables), scikit-learn (its
embedding-collapse metric), requests and huggingface_hub (its downloads: TCIA, MMARs, bundles, MedicalNet's weights),
OpenCV (the ultrasound confidence map, its video datasets), TensorBoard, tensorboardX and ``torch.utils.tensorboard``
(its TensorBoard images and handlers) and five of scipy's subpackages (scipy is one of MONAI's optional extras, each
imported through ``optional_import``): ``scipy.signal`` (the ultrasound confidence map, the signal transforms; it
imports ``scipy.stats``), ``scipy.ndimage`` (spline interpolation orders given as integers, hole filling, distance
transforms, surface metrics), ``scipy.sparse`` (DiNTS, the confidence map), ``scipy.spatial`` and ``scipy.optimize``
(metrics); and, where a GPU machine's image has them, CuPy and cupyx (its GPU arrays and their transforms),
scikit-image (its morphology and measurement transforms; it imports ``scipy.ndimage`` too), h5py and tifffile (its
readers), torchaudio (its signal transforms) and einops (its transformer blocks): seconds of a 2-core CPU's start, none
of it used by the reference workloads' UNet, BasicUNet, MedNeXt, SE-ResNet, DiceCE loss or data pipelines (their
rotation and elastic deformation interpolate with torch, by mode name). MONAI has no switch to import only some of its
networks, and its subpackages import each other in the walk's order, so the walk itself stays; what :func:`trimmed`
does is what MONAI does where those packages are not installed: inside it, an import of one of :data:`OPTIONAL` made by
MONAI's own code (the importing frame's module is ``monai.*``) finds no such package.

What stays true (``tests/test_trimmed_imports.py``): the built model, its parameter count and FLOPs, and the loss are
those of a full import; only MONAI's own imports are trimmed (a reference workload's module importing torchvision itself
gets it); after the block any import of a trimmed package gets the real package; a user's workload (any ``_target_``
outside ``harness_models`` and torch, :func:`reference_only`) is never trimmed, and a warm launcher that trimmed does
not fork a run of one (``harness.run.parent.zygote``). What MONAI's trimmed features need (AHNet's FPN backbone,
TransChex, the MLflow handler, MONAI's plots, its CSV datasets, that metric, its downloads, its video and TensorBoard
features) raises MONAI's own ``OptionalImportError`` in that process (hole filling, for one: tested); scipy itself, and
a subpackage imported by anything but MONAI's own modules (nibabel, a reference model, the harness), is never trimmed.
The run's record names the packages trimmed (``imports_trimmed``).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from typing import Any, Iterator

# MONAI's, unused here (a name and its submodules)
OPTIONAL = ("torchvision", "transformers", "mlflow", "matplotlib", "pandas", "sklearn", "requests", "huggingface_hub",
            "cv2", "tensorboard", "tensorboardX", "scipy.signal", "scipy.ndimage", "scipy.sparse", "scipy.spatial",
            "scipy.optimize",
            # and what a GPU machine's image holds besides (MONAI asks for each when imported; none is used here)
            "cupy", "cupyx", "skimage", "h5py", "tifffile", "torchaudio", "einops",
            "torch.utils.tensorboard")  # torch's writer, which MONAI's handlers import (it imports TensorBoard)
TRIMMED_BY = "monai"  # whose own imports of them are trimmed
REFERENCE = ("harness_models.", "torch.")  # the _target_ roots of the harness's own reference workloads
TRIMMED: set[str] = set()  # the packages MONAI's imports were refused in this process (as named in OPTIONAL)


class _Trimmer(importlib.abc.MetaPathFinder):
    """Refuses an import of one of :data:`OPTIONAL` (or its submodules) that MONAI's own code makes, and only while
    that package is not imported already: a package that is there is never hidden."""

    def find_spec(self, fullname, path=None, target=None):
        name = next((n for n in OPTIONAL if fullname == n or fullname.startswith(n + ".")), None)
        if name is None or name in sys.modules or not _imported_by_monai():
            return None
        TRIMMED.add(name)
        raise ModuleNotFoundError(f"No module named {fullname!r} (not imported for a reference workload)",
                                  name=fullname)


def _imported_by_monai() -> bool:
    """Whether the import under way was asked for by a MONAI module: the first frame outside the import system."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(("importlib", "_frozen_importlib")) and module != __name__:
            return module == TRIMMED_BY or module.startswith(TRIMMED_BY + ".")
        frame = frame.f_back
    return False


@contextlib.contextmanager
def trimmed(on: bool = True) -> Iterator[None]:
    """MONAI's imports of :data:`OPTIONAL` refused inside (``on``); otherwise, and after, imports as usual."""
    if not on or any(isinstance(f, _Trimmer) for f in sys.meta_path):
        yield
        return
    trimmer = _Trimmer()
    sys.meta_path.insert(0, trimmer)
    try:
        yield
    finally:
        sys.meta_path.remove(trimmer)


def trimmed_names() -> str:
    """The packages trimmed in this process (sorted, comma-separated; "" for none): what its record keeps."""
    return ",".join(sorted(TRIMMED))


def reference_only(values: Any) -> bool:
    """Whether the workload is one of the harness's own: its targets (nested dicts, lists, a dataclass's fields)
    include the harness's reference code and every one is that or torch's; a user's module anywhere: False."""
    targets = list(_targets(values))
    return any(t.startswith(REFERENCE[0]) for t in targets) and all(t.startswith(REFERENCE) for t in targets)


def _targets(node: Any) -> Iterator[str]:
    if hasattr(node, "__dataclass_fields__"):
        node = {name: getattr(node, name) for name in node.__dataclass_fields__}
    elif hasattr(node, "items") and not isinstance(node, dict):  # an omegaconf node
        node = dict(node.items())
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "_target_" and isinstance(value, str):
                yield value
            elif key != "checkpoint_units":
                yield from _targets(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _targets(value)
