"""The canary prober: per-task accuracy and output consistency, measured through the OpenAI API.

    probes.py    what it asks (held-out task prompts; fixed prompts in greedy and seeded modes)
    ledger.py    consistency bookkeeping (reference answers, match/mismatch)
    metrics.py   its counters (names declared in services/serve/metric_names.py)
    endpoint.py  the metrics endpoint and its file_sd target file
    prober.py    the probe loop
    process.py   starting it as a process of its own
    __main__.py  `python -m sandbox.canary`
"""
