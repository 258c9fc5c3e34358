"""Whole workflows over many runs, built on one scenario's run: the nightly matrix (matrix.py), the
pre-release load test (prerelease.py, gates.py, compare.py, maxrate.py), the upstream corpus
(corpus.py), bisection across versions (bisect.py), seeded exploration and shrinking (explore.py,
shrink.py), the Markdown report for upstream (upstream.py) and its reproduction without rmqchaos, a JUnit test
run against released jars (repro.py).

May import: every other part of `pipeline`."""
