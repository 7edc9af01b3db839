"""``inferplex bench``: a load generator and regression gate for any KServe V2 server.

Modules, in the order data flows through them:

- :mod:`.control`: the server's non-inference API (metadata, config, statistics, load) over
  HTTP or gRPC, recording every call for the compatibility report (:mod:`.compat`).
- :mod:`.payloads`: request inputs synthesised from the model metadata, pre-encoded once.
- :mod:`.clients`: cheap inference clients (raw keep-alive HTTP/1.1, grpc.aio with raw bytes).
- :mod:`.load`: closed-loop (concurrency) and open-loop (rate) load, measured in windows until
  the figures are stable (:mod:`.stats`).
- :mod:`.sweep`: one bench run: every model x level, plus the server-side breakdown from the
  statistics extension (:mod:`.breakdown`); results in :mod:`.results`.
- :mod:`.output`, :mod:`.plot`: terminal table, JSON, CSV, PNG.
- :mod:`.compare`: the regression gate against a baseline.
- :mod:`.policies` (scheduling A/B on servers it launches, :mod:`.launch`), :mod:`.gate`
  (version gate), :mod:`.recorder` (``/metrics`` scrapes to JSONL for ``inferplex heatmap``).
"""


class BenchError(Exception):
    """A bench run cannot go on: bad options, or a server that does not answer as V2 says.

    The message names what was wrong and what was expected; the command prints it and exits 2.
    """
