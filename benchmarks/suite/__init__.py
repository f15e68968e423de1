"""The benchmark suite: ketch against a hand-written aiohttp loop and peer frameworks.

Run everything with ``python benchmarks/run_all.py`` (see that file and README.md).
Modules: :mod:`script` (the deterministic conversation), :mod:`server` (the scripted
LLM server), :mod:`impls` (one agent task, four implementations), :mod:`client` (the
measuring harness a client process runs), :mod:`scale`, :mod:`history`,
:mod:`coldstart`.
"""
