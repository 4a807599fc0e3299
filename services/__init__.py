"""The serving stack: the model (`model`), the engine (`engine`), the Ray Serve deployments (`serve`), and
the layer that brings it all up and down and reads it back (`stack`: Ray, Serve, Prometheus, compose).

May import `kernels` only; the engine core (`engine.scheduler`, `block_pool`, `sequence`) imports neither
torch nor Ray (tests/test_imports.py, tests/engine_core/test_imports.py).
"""
