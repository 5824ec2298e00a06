"""harness: measure which change makes training fast, with numbers you can trust.

Flow: config -> workload + knobs -> isolated run -> measurement -> store -> tables / plots / checks.
"""

__version__ = "0.1.0"
DISTRIBUTION = "training-harness"  # the name it installs under; `python -m harness` checks it (harness.__main__)
