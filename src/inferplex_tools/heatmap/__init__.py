"""``inferplex heatmap``: resource use per model over time, from recorded ``/metrics`` scrapes
(``inferplex bench --record-metrics FILE``), as a PNG for capacity planning.

:mod:`.series` turns the scrapes into per-model series; :mod:`.render` draws them.
"""
