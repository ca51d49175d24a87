"""Where the bundled data lives.

Installed wheels carry ``data/`` inside the package (``elastico/data``, mapped in
pyproject.toml); an editable install reads the repository's ``data/`` folder.  The
``ELASTICO_DATA`` environment variable overrides both.
"""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir() -> Path:
    """The bundled data folder.  Raises FileNotFoundError naming every place looked at."""
    env = os.environ.get("ELASTICO_DATA")
    candidates = [Path(env)] if env else [_PKG / "data", _PKG.parent / "data"]
    for c in candidates:
        if (c / "alibaba-gpu-v2023-openb").is_dir():
            return c
    raise FileNotFoundError(
        "bundled data not found; looked in " + ", ".join(str(c) for c in candidates)
        + " (set ELASTICO_DATA to the folder holding alibaba-gpu-v2023-openb/)"
    )


def data_file(*parts: str) -> Path:
    """A file under :func:`data_dir`, e.g. ``data_file("gavel-throughputs", "x.json")``."""
    p = data_dir().joinpath(*parts)
    if not p.exists():
        raise FileNotFoundError(f"bundled data file missing: {p}")
    return p
