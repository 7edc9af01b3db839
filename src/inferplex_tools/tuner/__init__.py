"""``inferplex tune``: search a model's serving configuration for throughput vs latency.

- :mod:`.space`: the parameters searched (max batch size, queue delay, instance count,
  intra-op threads, precision) and their candidates;
- :mod:`.search`: successive halving over the candidates (why: see its docstring);
- :mod:`.pareto`: the throughput-vs-p99 Pareto frontier and the best under a latency target;
- :mod:`.decision`: whether the winner replaces the current configuration (``--write``);
- :mod:`.configs`: a candidate as a model configuration (served copies, ``--write``);
- :mod:`.journal`: the resumable JSONL results file;
- :mod:`.runner`: serves each rung's candidates and measures them with the bench engine.
"""
