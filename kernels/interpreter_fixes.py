"""Make Triton 3.6's CPU interpreter compute what a GPU computes.

Tests run the Triton kernels in the interpreter (TRITON_INTERPRET=1). Three of
its bugs would make correct kernels look wrong, so `fix_interpreter` patches
them, once, the first time a kernel is built in interpreter mode. Compiled
(GPU) kernels never come here.

1. Scalars are 1-element arrays turned into loop bounds with `int(array)`,
   which numpy >= 2.4 refuses, so `for i in range(start, stop, STEP)` with
   runtime bounds fails (triton-lang/triton#9171, fixed upstream by #9172 the
   same way as here).
2. bfloat16 values are held as their raw uint16 bits, and `tl.dot` hands
   those bits to numpy as integers. Widening bf16 to fp32 first is exact
   (append 16 zero bits), which is what an fp32-accumulating MMA sees.
3. `x.to(tl.bfloat16)` from fp32 truncates (and from fp16 reinterprets
   bits); GPUs (and torch) round to nearest even.
"""

from __future__ import annotations

_applied = False


def fix_interpreter() -> None:
    global _applied
    if _applied:
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original_patch_lang_tensor = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original_patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    def widen_bf16(handle):
        if handle.dtype.scalar != tl.bfloat16:
            return handle
        bits = handle.data.astype(np.uint32) << 16
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    original_create_dot = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original_create_dot(self, widen_bf16(a), widen_bf16(b), d, input_precision,
                                   max_num_imprecise_acc)

    original_cast_impl = interpreter.InterpreterBuilder.cast_impl

    def cast_impl(self, src, dst_type):
        if dst_type.scalar != tl.bfloat16 or src.dtype.scalar == tl.bfloat16:
            return original_cast_impl(self, src, dst_type)
        # Any other source (fp16, ints) widens to fp32 exactly first.
        values = np.asarray(src.data).astype(np.float32)
        bits = values.view(np.uint32)
        # Round to nearest even: add 0x7FFF plus the lowest kept bit, then
        # drop 16 bits. NaN keeps its sign and top bits, made quiet.
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        nan = np.isnan(values)
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
        return interpreter.TensorHandle(rounded, tl.bfloat16)

    interpreter._patch_lang_tensor = patch_lang_tensor
    interpreter.InterpreterBuilder.create_dot = create_dot
    interpreter.InterpreterBuilder.cast_impl = cast_impl
    _applied = True
