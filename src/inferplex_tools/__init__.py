"""inferplex's tools: ``inferplex bench`` (load generator, regression gate, MLPerf LoadGen),
``inferplex tune`` (configuration search), ``inferplex optimize`` (INT8 / FP16 variants) and
``inferplex heatmap`` (resource use over time).

A package of its own beside ``inferplex``, in the same distribution: the tools use the server's
packages (config, codecs, the wire helpers of ``inferplex.transport``), never the reverse, so
a serving process never imports a benchmark client. The ``inferplex`` command loads a tool's
command only when it is named (``inferplex.cli.tools``); the ``bench`` extra installs what the
tools need beyond the server (tritonclient, MLPerf LoadGen, matplotlib).
"""
