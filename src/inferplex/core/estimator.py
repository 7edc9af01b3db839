"""An online estimate of a model's execution time as a function of batch rows.

Each observed batch size keeps an exponentially weighted mean; sizes never seen are read off a
least-squares line (fixed cost + cost per row) through those means. Pure: the caller passes
the measured seconds in, so tests need no clock.
"""

from __future__ import annotations


class ExecutionEstimator:
    def __init__(self, smoothing: float = 0.2) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self._smoothing = smoothing
        self._means: dict[int, float] = {}
        self._provisional: set[int] = set()  # sizes seen once: their mean is that one run
        self._line: tuple[float, float] | None = None  # (fixed seconds, seconds per row)

    def observe(self, rows: int, seconds: float) -> None:
        mean = self._means.get(rows)
        if mean is None or rows in self._provisional:
            # a size's first run pays one-time costs (allocation, kernel choice): often many
            # times a usual run, it would hold the mean up for dozens of batches, so the
            # second run replaces it instead of blending with it
            self._provisional.symmetric_difference_update((rows,))
            self._means[rows] = seconds
        else:
            self._means[rows] = mean + self._smoothing * (seconds - mean)
        self._line = None

    def estimate(self, rows: int) -> float | None:
        """Predicted seconds for a batch of ``rows``; None before any observation."""
        mean = self._means.get(rows)
        if mean is not None:
            return mean
        if not self._means:
            return None
        fixed, per_row = self._fit()
        return max(fixed + per_row * rows, 0.0)

    def _fit(self) -> tuple[float, float]:
        if self._line is None:
            points = list(self._means.items())
            if len(points) == 1:
                ((size, seconds),) = points
                # one size seen: assume the time scales with rows from there (no fixed part)
                self._line = (0.0, seconds / size)
            else:
                n = len(points)
                mean_x = sum(x for x, _ in points) / n
                mean_y = sum(y for _, y in points) / n
                var = sum((x - mean_x) ** 2 for x, _ in points)
                per_row = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
                per_row = max(per_row, 0.0)
                self._line = (max(mean_y - per_row * mean_x, 0.0), per_row)
        return self._line

    @property
    def observed_sizes(self) -> dict[int, float]:
        return dict(self._means)
