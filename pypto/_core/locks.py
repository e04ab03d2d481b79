"""Module locks that survive fork: a fork copies a lock in whatever state another thread of the
parent left it, and no thread of the child would ever release one held there."""

import os
import threading

__all__ = ["ForkSafeLock"]


class ForkSafeLock:
    """A lock (``with lock:``) that a forked child gets new.

    ``held_across_fork``: a fork first takes the lock, so it waits for whatever the lock guards
    in another thread (a thread probe, a module import) to finish, and the child never starts
    with that half done. Meant for module-level locks (fork hooks cannot be unregistered).
    """

    def __init__(self, held_across_fork=False):
        self._lock = threading.Lock()
        if held_across_fork:
            os.register_at_fork(
                before=self._hold, after_in_parent=self._let_go, after_in_child=self._renew
            )
        else:
            os.register_at_fork(after_in_child=self._renew)

    def _hold(self):
        self._lock.acquire()

    def _let_go(self):
        self._lock.release()

    def _renew(self):
        self._lock = threading.Lock()

    def __enter__(self):
        self._lock.acquire()
        return self

    def __exit__(self, *exc):
        self._lock.release()
