# The two quick-start targets are `make drill` and `make test`; both set up .venv first.
.PHONY: setup drill demo demo-engine test test-serving test-gpu verify-all bench bench-serving eval train clean

setup:
	@scripts/setup.sh

# A drill on the embedded default (local Ray, Ray Serve, local Prometheus, CPU): a random incident,
# paged through a real alert; it goes on until Ctrl-C, which reverts the fault and stops everything.
drill: setup
	.venv/bin/sandbox drill --random

# The serving stack on the embedded default (local Ray, Ray Serve, local Prometheus, CPU):
# up, 30 s of traffic through the OpenAI API, what Prometheus saw, then down.
demo: setup
	.venv/bin/sandbox run --rate 3 --duration 30

# The engine alone on the shipped model (continuous batching over mixed tasks, no Ray).
demo-engine: setup
	.venv/bin/sandbox demo

test: setup
	.venv/bin/python -m pytest -q

test-serving: setup
	.venv/bin/python -m pytest -q tests/serving

test-gpu: setup
	.venv/bin/python -m pytest -q -m gpu tests/kernels

# `sandbox verify` for every variant of every incident, one headless drill each (about two hours: 20 variants, 5-7 min each).
verify-all: setup
	.venv/bin/sandbox verify --all

eval: setup
	.venv/bin/sandbox eval --json

bench: setup
	.venv/bin/python bench/engine_throughput.py --json

bench-serving: setup
	.venv/bin/python bench/serving.py --json

# Retrains the shipped weights from scratch (about 30 + 6 minutes on 2 idle CPU cores).
train: setup
	.venv/bin/python -m services.model.train --model target --out services/model/weights/target
	.venv/bin/python -m services.model.train --model draft --out services/model/weights/draft

clean:
	rm -rf .venv .pytest_cache
