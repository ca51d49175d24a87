"""The live loop's MPS rules: one MPS server per Linux user, and nodes whose MPS daemon is down.

NVIDIA MPS runs one server per user, and a client of another user waits until that server is
gone: an MPS share (``gpu_share`` < 1, no MIG profile) is placed only on a GPU whose residents
have its user.  A node whose MPS control daemon is down takes no new MPS share.  A job or
resident without a user matches any -- the simulator's case, where no rule is ever set and
every check below returns at its first test.

Owns: :class:`MpsRules` -- each job's user, each down node's reason, and per GPU the code of
the one user of its residents -- and :func:`mps_reason`, the words for a placement those rules
refuse.
Who calls it: :class:`~elastico.placer.placement.book.Book` keeps a GPU's user code in step
with its residents; :class:`~elastico.placer.placement.ClusterState` (``set_mps_user``,
``set_mps_down``, ``place``, ``job_limited``, ``mps_obstacle``).
Whom it calls: :mod:`.fit` (which GPUs would take the shape without these rules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from elastico.errors import InvalidArgument, NotFound
from elastico.model import Configuration

from .fit import eligible, host_ok
from .layout import Layout

if TYPE_CHECKING:
    from .book import Book

__all__ = ["MpsRules", "mps_reason"]


class MpsRules:
    """The MPS rules of one book (empty in the simulator).

    ``users``: job id -> its user as a phrase for reasons (the live loop passes ``"user
    1000"``); ``down``: node index -> why its MPS daemon is down.  ``code`` [G]: the code
    (into ``names``, grow-only and shared by copies) of the one user of a GPU's residents, -1
    none, -2 several; the book keeps it as residents come and go (:meth:`user_code`)."""

    def __init__(self, num_gpus: int):
        self.users: dict[str, str] = {}
        self.down: dict[int, str] = {}
        self.names: dict[str, int] = {}
        self.code = np.full(num_gpus, -1, dtype=np.int64)

    def copy(self) -> "MpsRules":
        new = object.__new__(MpsRules)
        new.users, new.down = dict(self.users), dict(self.down)
        new.names = self.names
        new.code = self.code.copy()
        return new

    def user_code(self, residents) -> int:
        """The code of the one user of ``residents`` (job ids), -1 none, -2 several."""
        users = {self.users.get(j) for j in residents} - {None}
        if len(users) > 1:
            return -2
        return self.names.setdefault(users.pop(), len(self.names)) if users else -1

    def set_user(self, job_id: str, user: str | None) -> None:
        """Record (or, None, forget) ``job_id``'s user; the caller refreshes the codes of
        the job's GPUs if it is booked."""
        if user is None:
            self.users.pop(job_id, None)
        elif not (isinstance(user, str) and user):
            raise InvalidArgument("mps_user", user, "a non-empty string or None")
        else:
            self.users[job_id] = user

    def set_down(self, node_index: int, reason: str | None, num_nodes: int) -> None:
        if not (isinstance(node_index, (int, np.integer)) and 0 <= node_index < num_nodes):
            raise NotFound(f"node_index: no node {node_index}")
        if reason is None:
            self.down.pop(int(node_index), None)
        elif not (isinstance(reason, str) and reason):
            raise InvalidArgument("reason", reason, "a non-empty string or None")
        else:
            self.down[int(node_index)] = reason

    def excluded(self, job_id: str, config: Configuration, layout: Layout
                 ) -> tuple[np.ndarray, str | None] | None:
        """([G] GPUs these rules exclude for this job, the job's user), or None when they
        exclude none."""
        if (config.mig_profile is not None or config.num_gpus == 0 or config.gpu_share >= 1.0
                or not (self.down or self.users)):
            return None
        excl = np.zeros(layout.gpu_node.size, dtype=bool)
        for n in self.down:
            excl[layout.offset_list[n]:layout.offset_list[n + 1]] = True
        user = self.users.get(job_id)
        if user is not None:
            c, mine = self.code, self.names.get(user, -3)
            excl |= ((c == -2) | ((c >= 0) & (c != mine))) & ~layout.is_mig
        return (excl, user) if excl.any() else None


def mps_reason(book: "Book", config: Configuration, excl: np.ndarray, user: str | None) -> str:
    """Why the MPS rules (``excl``, from :meth:`MpsRules.excluded`) keep ``config`` off every
    node that would otherwise take it (free share, GPU memory, CPU and host memory; slowdown
    bounds not), naming the GPUs or nodes (three at most); "" when some node takes it
    anyway."""
    L, rules = book.layout, book.mps
    e = eligible(book, config, leftover=False)
    if isinstance(e, str):
        return ""
    elig = e[0] & host_ok(book, config)[L.gpu_node]
    k, n = config.num_gpus, len(L.nodes)
    fit = np.bincount(L.gpu_node[elig], minlength=n) >= k
    if not fit.any() or (np.bincount(L.gpu_node[elig & ~excl], minlength=n) >= k).any():
        return ""
    msgs: dict[str, None] = {}
    for g in np.flatnonzero(elig & excl & fit[L.gpu_node]).tolist():
        ni = int(L.gpu_node[g])
        if ni in rules.down:
            msgs[f"MPS control daemon on node {L.nodes[ni].name} is down: {rules.down[ni]}"] = None
        else:
            others = sorted({rules.users.get(j) for j in book.gpu_jobs[g]} - {None, user})
            msgs[f"GPU {int(L.gpu_local[g])} of {L.nodes[ni].name} is shared under MPS "
                 f"by {others[0]}; this pod runs as {user}"] = None
    out = list(msgs)
    more = f" (and {len(out) - 3} more)" if len(out) > 3 else ""
    return "; ".join(out[:3]) + more
