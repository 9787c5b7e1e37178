"""Whose a file, a folder or a daemon is, and the advice that follows.

The one place that words a problem of ownership. Sloth never advises
taking over (chown) or removing another user's files, nor loosening their
modes: a folder, a socket or a daemon of another user is theirs, and the
way on is to use it as them or to use a folder of one's own. The only
ownership sloth suggests changing is of something root made in the
user's own home (a ``sudo sloth``): it is given back to that user.

Names come from the password database (``pwd``, imported when asked: the
fast path of ``sloth add`` never needs it).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path


def user_name(uid: int) -> str | None:
    """The login name of ``uid``, or None if this machine has none for it."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def whose(uid: int) -> str:
    """``user alice (uid 1234)``; ``uid 1234 (no user of that name here)``."""
    name = user_name(uid)
    return f"user {name} (uid {uid})" if name else f"uid {uid} (no user has that id here)"


def not_ours(p: os.PathLike[str] | str, owner: int) -> tuple[str, str]:
    """(problem, fix) for ``p``, owned by ``owner``, not by us."""
    return f"is owned by {whose(owner)}, not by {whose(os.getuid())} who runs sloth", advice(p, owner)


def advice(p: os.PathLike[str] | str, owner: int) -> str:
    """What to do about ``p`` (or the daemon serving there) belonging to
    ``owner``, who is not us. Never: chown it to us, chmod it, remove it."""
    me = os.getuid()
    mine = "set SLOTH_HOME to a folder of your own"
    if owner == 0 and me != 0 and _in_my_home(Path(p)):
        # sudo sloth left it in our own home: giving it back takes nothing from anyone
        return (f"{p} was made in your home by sloth run as root (sudo?): give it back with "
                f"`sudo chown -R {me} {shlex.quote(os.fspath(p))}`, or {mine}.")
    name = user_name(owner)
    as_them = f"run sloth as that user (`sudo -u {shlex.quote(name)} sloth ...`)" if name else "run sloth as that user"
    return (f"It belongs to {whose(owner)}: sloth does not use, take over or remove another user's files. "
            f"To work with that user's queue, {as_them}; for a queue of your own, {mine}.")


def _in_my_home(p: Path) -> bool:
    home = os.path.expanduser("~")
    try:
        return home not in ("", "/") and Path(os.path.abspath(p)).is_relative_to(os.path.abspath(home))
    except (OSError, ValueError):
        return False


def peer_refused(peer: int, owner: int) -> tuple[str, str]:
    """(message, hint) of a daemon of ``owner`` refusing a client of ``peer``:
    the daemon read nothing from it, so nothing was done."""
    name = user_name(owner)
    as_them = f"`sudo -u {shlex.quote(name)} sloth ...`" if name else "sloth as that user"
    return (f"{whose(peer)} may not use this sloth daemon: it belongs to {whose(owner)}, and serves only them",
            f"Nothing was done. To work with that user's queue, run {as_them}; for a queue of your own, "
            "set SLOTH_HOME to a folder of yours.")
