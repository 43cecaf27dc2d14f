"""The digest's benchmark suite: a big-day generator, a counting proxy, the direct-query floor and the runner.

``bench/run`` (see ``bench/runner.py``) starts its own VictoriaMetrics and VictoriaLogs, loads generated days into
them and measures the digest against the floor (the same queries sent directly), a naive download-and-count
baseline, and itself over 30 days. ``docs/benchmarks.md`` holds the numbers of the last full run.
"""
