"""Where the bundled data lives.

Installed wheels carry ``data/`` inside the package (``elastico/data``, mapped in
pyproject.toml); an editable install reads the repository's ``data/`` folder.  The
``ELASTICO_DATA`` environment variable overrides both.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from elastico.errors import InvalidArgument

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


def _holds(test) -> bool:
    """A path test (``Path.is_file`` etc.) that reads a permission error as False."""
    try:
        return bool(test())
    except OSError:
        return False


def check_input_file(flag: str, path: Path, what: str = "file") -> None:
    """An input file given on the command line: an existing regular file this process may
    read.  Raises InvalidArgument naming ``flag`` and the path."""
    if not _holds(path.is_file):
        raise InvalidArgument(flag, str(path), f"must be an existing {what}")
    if not os.access(path, os.R_OK):
        raise InvalidArgument(flag, str(path), "must be readable by this process")


def check_output_file(flag: str, path: Path) -> None:
    """An output file given on the command line, checked before any work (a long run must not
    end in a write error): a file path, not a folder, in an existing folder, writable by this
    process -- probed by opening it for appending and writing zero bytes, since ``os.access``
    says yes to root on a full or virtual device (``/dev/full``, ``/proc``); a file the probe
    created is removed again, and a FIFO is not opened (that would wait for a reader).
    Raises InvalidArgument naming ``flag`` and the path."""
    folder = path.parent if str(path.parent) else Path(".")
    if str(path) in ("", ".") or _holds(path.is_dir):
        raise InvalidArgument(flag, str(path), "must be a file path, not a folder")
    if not _holds(folder.is_dir):
        raise InvalidArgument(flag, str(path), "its folder must exist and be searchable")
    if not os.access(folder, os.W_OK) or (_holds(path.exists) and not os.access(path, os.W_OK)):
        raise InvalidArgument(flag, str(path), "must be writable")
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            return
        existed = True
    except OSError:
        existed = False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, b"")
        finally:
            os.close(fd)
    except OSError as e:
        raise InvalidArgument(flag, str(path), f"could not be written: {e.strerror}") from None
    finally:
        if not existed:
            try:
                os.unlink(path)
            except OSError:
                pass


def check_output_dir(flag: str, path: Path) -> None:
    """An output folder given on the command line, checked before any work: an existing folder
    or one that can be created, in which this process can write.  Probed by creating (and
    removing) an empty folder in it or in its nearest existing ancestor: ``os.access`` says
    yes to root even on a read-only or virtual file system such as ``/proc``.  Raises
    InvalidArgument naming ``flag`` and the path."""
    if _holds(path.exists) and not _holds(path.is_dir):
        raise InvalidArgument(flag, str(path), "must be a folder (it is a file)")
    anc = path.absolute()
    while not _holds(anc.exists) and anc != anc.parent:
        anc = anc.parent
    if not _holds(anc.is_dir):
        raise InvalidArgument(flag, str(path), f"must be a folder that can be created ({anc} "
                                               "is not a folder)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".elastico-probe-", dir=anc))
    except OSError as e:
        what = ("must be a writable folder" if anc == path.absolute() else
                f"must be a folder that can be created: {anc} is not writable")
        raise InvalidArgument(flag, str(path), f"{what} ({e.strerror})") from None
