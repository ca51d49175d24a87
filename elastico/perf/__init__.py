"""Performance models (core layer): "how fast does job J run in configuration C".
:mod:`~elastico.perf.throughput` holds the measured training throughputs (Gavel, MISO, Sia)
and the rules that extend them.  Pure: plain data in, numbers out."""
