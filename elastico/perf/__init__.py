"""Performance models (core layer): "how fast does job J run in configuration C".
:mod:`~elastico.perf.throughput` holds the measured training throughputs (Gavel, MISO, Sia)
and the rules that extend them; :mod:`~elastico.perf.llm` the offline LLM inference model
(roofline physics from the architecture and the GPU catalogue, efficiencies fitted to public
measurements).  Pure: plain data in, numbers out."""
