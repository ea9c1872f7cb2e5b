"""A time limit per call of the user's loss (``check(..., timeout=)``, ``--timeout``).

On Unix in the main thread a ``signal.setitimer(ITIMER_REAL)`` alarm interrupts a call
that runs past the limit; elsewhere (another thread, Windows) no signal can interrupt the
call: it runs to its end and is then rejected if it took too long.
"""

from __future__ import annotations

import functools
import signal
import threading
import time

from exchange.core.coefficients import LossFn
from exchange.errors import ObjectiveError

__all__ = ["time_limited"]


class _CallTimedOut(BaseException):
    """Raised by the SIGALRM handler inside a loss call that ran past the limit (private:
    a ``BaseException`` so that a loss's own ``except Exception`` cannot swallow it)."""


def time_limited(loss_fn: LossFn, limit: float, label: str) -> LossFn:
    """``loss_fn`` with a time limit of ``limit`` seconds per call (see the module); the
    previous SIGALRM handler and timer are restored after every call."""

    def too_slow(took: float) -> ObjectiveError:
        return ObjectiveError(
            f"loss_fn={label} took {took:.2f} s for one call, over the time limit of {limit:g} s "
            "(raise --timeout, or make the loss faster: the check calls it thousands of times)"
        )

    armed = [False]

    def on_alarm(signum, frame):
        if armed[0]:  # once the call has returned, a late alarm is ignored
            raise _CallTimedOut()

    @functools.wraps(loss_fn)
    def timed(logprobs, rollout):
        start = time.perf_counter()
        # signal.setitimer exists on Unix only, and Python delivers signals in the main thread only
        if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
            out = loss_fn(logprobs, rollout)
            took = time.perf_counter() - start
            if took > limit:
                raise too_slow(took)
            return out
        previous = signal.signal(signal.SIGALRM, on_alarm)
        outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            try:
                armed[0] = True
                out = loss_fn(logprobs, rollout)
            finally:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                if outer_delay > 0:  # an enclosing timer: re-arm it with what is left of it
                    left = outer_delay - (time.perf_counter() - start)
                    signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), outer_interval)
        except _CallTimedOut:
            raise too_slow(time.perf_counter() - start) from None
        took = time.perf_counter() - start
        if took > limit:  # the alarm fired after the call returned, or between checks
            raise too_slow(took)
        return out

    return timed
