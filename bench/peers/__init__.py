"""A real Triton Inference Server to measure inferplex against (bench/vs_triton.py).

- ``install.sh``: Triton 2.51 (PyTriton 0.7.0's bundled ``tritonserver`` with its Python
  backend) and Triton's perf_analyzer 2.51, under /tmp, nothing system-wide.
- :mod:`bench.peers.models`: the benchmark models (add_sub, the MLP, ResNet-18), built with
  the project's own model scripts and configured alike for both servers.
- :mod:`bench.peers.triton`: a Triton repository of those models, each running ONNX Runtime
  in Triton's Python backend (``triton_model.py``); Triton started and stopped on loopback;
  ``python -m bench.peers.triton`` serves them until Ctrl-C.
- :mod:`bench.peers.perf_analyzer`: perf_analyzer runs, their CSV, and the server's CPU time
  per request over each run.
"""
