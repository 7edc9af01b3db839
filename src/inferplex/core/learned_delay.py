"""The learned queue delay of a dynamic batcher (ours, ``learn_delay``).

The queue delay is a maximum (Triton: "the maximum time a request will be delayed to wait for
additional requests"), and where waiting does not gather requests it only adds latency: one
request at a time waits the whole delay for nobody. So each closed batch counts whether it
held more than one request (an exponential average); once ``LEARN_AFTER`` batches say that
almost none did (below ``SKIP_BELOW``), batches close without waiting, except one in
``PROBE_EVERY``, which waits to see whether traffic has grown. A batch of several requests,
waited for or not, brings the waiting back.

Pure: no clock, no I/O; the batcher asks ``skipping`` when it plans and ``count`` when a
batch closes.
"""

from __future__ import annotations

#: batches seen before the delay may be skipped
LEARN_AFTER = 16
#: the share of batches of several requests below which it is skipped
SKIP_BELOW = 0.05
#: one batch in this many still waits the delay while it is skipped
PROBE_EVERY = 16
_GAIN_WEIGHT = 0.1  # of the latest batch in the average


class DelayLearner:
    """Whether waiting the queue delay gathers requests, learned from the batches closed."""

    __slots__ = ("_batched", "_seen", "_since_probe")

    def __init__(self) -> None:
        self._batched = 1.0  # average of "the batch held several requests"
        self._seen = 0  # batches counted, up to LEARN_AFTER
        self._since_probe = 0  # batches closed without the delay since one waited it

    def skipping(self) -> bool:
        """Whether the next batch closes without waiting the delay."""
        return (
            self._seen >= LEARN_AFTER
            and self._batched < SKIP_BELOW
            and self._since_probe < PROBE_EVERY - 1
        )

    def count(self, several: bool, skipped: bool) -> None:
        """A batch closed: ``several`` requests in it or not; ``skipped``: it did not wait."""
        self._batched += _GAIN_WEIGHT * (float(several) - self._batched)
        if self._seen < LEARN_AFTER:
            self._seen += 1
        self._since_probe = self._since_probe + 1 if skipped else 0
