# The two quick-start targets are `make demo` and `make test`; both set up .venv first.
.PHONY: setup demo demo-serving test test-serving test-gpu bench bench-serving eval train clean

setup:
	@scripts/setup.sh

# The engine serving the shipped model (continuous batching over mixed tasks).
demo: setup
	.venv/bin/sandbox demo

# Work in progress (issue 3): the serving stack (local Ray, Serve, Prometheus), 30 s of traffic, then down.
demo-serving: setup
	.venv/bin/sandbox run --rate 3 --duration 30

test: setup
	.venv/bin/python -m pytest -q --ignore=tests/serving

test-serving: setup
	.venv/bin/python -m pytest -q tests/serving

test-gpu: setup
	.venv/bin/python -m pytest -q -m gpu tests/kernels

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
