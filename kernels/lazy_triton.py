"""Triton kernels that cost nothing until they first launch.

`import kernels` must work on machines without Triton (and stay cheap where it
is installed), yet each kernel file should read top to bottom as
"kernel, launcher, reference". `lazy_jit` reconciles the two: it stands in for
`@triton.jit` and only imports Triton when a kernel is first launched.

A kernel module using it must start with `from __future__ import annotations`
so that `BLOCK: tl.constexpr` stays a string (Triton reads it as text) instead
of needing `tl` at import time, and may import `triton.language as tl` under
`TYPE_CHECKING` for editors. On first launch `tl` is bound in that module's
globals, which is where both the compiler and the CPU interpreter
(TRITON_INTERPRET=1, read at that moment) resolve it.

Kernels built this way cannot call each other as Triton sub-functions (the
callee would still be a LazyKernel when the caller compiles), so each kernel is
self-contained.
"""

from __future__ import annotations

import functools
from typing import Any, Callable


class LazyKernel:
    """A function that becomes `triton.jit(fn)` on first use."""

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn
        self._jitted: Any = None
        functools.update_wrapper(self, fn)

    @property
    def jitted(self) -> Any:
        if self._jitted is None:
            import triton
            import triton.language as tl

            self.fn.__globals__["tl"] = tl
            self._jitted = triton.jit(self.fn)
            if type(self._jitted).__name__ == "InterpretedFunction":
                from kernels.interpreter_fixes import fix_interpreter  # imports triton: only once it may

                fix_interpreter()
        return self._jitted

    def __getitem__(self, grid: Any) -> Any:
        return self.jitted[grid]


def lazy_jit(fn: Callable[..., None]) -> LazyKernel:
    return LazyKernel(fn)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n; Triton block shapes must be powers of two."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def dot_dim(n: int) -> int:
    """Block size for a dimension that feeds `tl.dot`, which needs >= 16."""
    return max(16, next_power_of_2(n))
