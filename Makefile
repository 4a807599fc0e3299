# The two quick-start targets are `make demo` and `make test`; both set up .venv first.
.PHONY: setup demo demo-engine test test-serving test-gpu bench bench-serving eval train clean

setup:
	@scripts/setup.sh

# Brings the serving stack up (local Ray, Serve, Prometheus), runs 30 s of traffic, shows the metrics, stops it all.
demo: setup
	.venv/bin/sandbox run --rate 3 --duration 30

demo-engine: setup
	.venv/bin/sandbox demo

test: setup
	.venv/bin/python -m pytest -q

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

# Retrains the shipped weights from scratch (about 40 minutes on 2 CPU cores).
train: setup
	.venv/bin/python -m services.model.train --model target --out services/model/weights/target
	.venv/bin/python -m services.model.train --model draft --out services/model/weights/draft

clean:
	rm -rf .venv .pytest_cache
