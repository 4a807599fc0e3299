"""Every Triton kernel compiles for an H100/H200 (sm_90), even on a CPU-only box.

The interpreter runs kernels as numpy and accepts things the GPU compiler
rejects (and vice versa). Triton wheels ship ptxas, so the full
Python -> TTIR -> TTGIR -> LLVM -> PTX -> cubin pipeline runs without a GPU;
only launching needs one. It runs in a subprocess because a process that
imported triton with TRITON_INTERPRET=1 cannot compile any more.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def ptr(dtype):
    return "*" + dtype


MATMUL = dict(x_ptr=ptr("bf16"), w_ptr=ptr("bf16"), workspace_ptr=ptr("fp32"), M="i32", N="i32", K="i32",
              k_per_split="i32", stride_xm="i32", stride_xk="i32", stride_wn="i32", stride_wk="i32")
QUANT = dict(x_ptr=ptr("bf16"), q_ptr=ptr("i8"), scales_ptr=ptr("fp32"), out_ptr=ptr("bf16"), M="i32",
             N="i32", K="i32", group_size="i32", stride_xm="i32", stride_xk="i32", stride_qn="i32",
             stride_qk="i32", stride_sn="i32", stride_sg="i32", stride_om="i32", stride_on="i32")
ATTENTION = dict(q_ptr=ptr("bf16"), k_cache_ptr=ptr("bf16"), v_cache_ptr=ptr("bf16"),
                 block_tables_ptr=ptr("i32"), seq_of_token_ptr=ptr("i32"), pos_ptr=ptr("i32"),
                 out_ptr=ptr("bf16"), scale="fp32", k_scale="fp32", v_scale="fp32",
                 **{name: "i32" for name in ("stride_qt", "stride_qh", "stride_kb", "stride_ks", "stride_kh",
                                             "stride_vb", "stride_vs", "stride_vh", "stride_bt",
                                             "stride_ot", "stride_oh")})
WRITE_KV = dict(x_ptr=ptr("bf16"), cache_ptr=ptr("i8"), slot_ptr=ptr("i64"), scale="fp32",
                stride_xt="i32", stride_xh="i32", stride_cs="i32", stride_ch="i32")

CASES = {
    "matmul_bf16": ("kernels.matmul", "matmul_partial_kernel", MATMUL,
                    dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32)),
    "matmul_fp32": ("kernels.matmul", "matmul_partial_kernel",
                    {**MATMUL, "x_ptr": ptr("fp32"), "w_ptr": ptr("fp32")},
                    dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32)),
    "split_k_reduce": ("kernels.matmul", "split_k_reduce_kernel",
                       dict(workspace_ptr=ptr("fp32"), out_ptr=ptr("bf16"), numel="i32"),
                       dict(SPLIT_K=4, BLOCK=1024, ROUND_BF16=True)),
    "rms_norm": ("kernels.rmsnorm", "rms_norm_kernel",
                 dict(x_ptr=ptr("bf16"), weight_ptr=ptr("bf16"), out_ptr=ptr("bf16"), hidden="i32",
                      stride_x="i32", stride_out="i32", eps="fp32"),
                 dict(BLOCK=4096)),
    "quant_matmul_int8": ("kernels.quant_matmul", "quant_matmul_kernel", QUANT,
                          dict(BITS=8, BLOCK_M=16, BLOCK_N=64, BLOCK_K=32)),
    "quant_matmul_int4": ("kernels.quant_matmul", "quant_matmul_kernel", {**QUANT, "q_ptr": ptr("u8")},
                          dict(BITS=4, BLOCK_M=16, BLOCK_N=64, BLOCK_K=32)),
    "write_kv_int8": ("kernels.kv_cache_write", "write_kv_kernel", WRITE_KV,
                      dict(NUM_HEADS=8, HEAD_DIM=128, HEADS_P=8, HEAD_DIM_P=128, QUANTIZE=True)),
    "paged_attention_bf16": ("kernels.paged_attention", "paged_attention_kernel", ATTENTION,
                             dict(GROUP=4, HEAD_DIM=128, BLOCK_SIZE=16, GROUP_P=16, HEAD_DIM_P=128,
                                  BLOCK_SIZE_P=16)),
    "paged_attention_int8_cache": ("kernels.paged_attention", "paged_attention_kernel",
                                   {**ATTENTION, "q_ptr": ptr("fp32"), "out_ptr": ptr("fp32"),
                                    "k_cache_ptr": ptr("i8"), "v_cache_ptr": ptr("i8")},
                                   dict(GROUP=1, HEAD_DIM=80, BLOCK_SIZE=32, GROUP_P=16, HEAD_DIM_P=128,
                                        BLOCK_SIZE_P=32)),
}


def compile_cases(names):
    """Runs in the subprocess: compile each case, report "ok" or the error."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    report = {}
    for name in names:
        module_name, kernel_name, signature, constexprs = CASES[name]
        lazy_kernel = getattr(importlib.import_module(module_name), kernel_name)
        fn = lazy_kernel.jitted  # binds `tl` in the kernel's module
        full_signature = {arg: "constexpr" if arg in constexprs else signature[arg] for arg in fn.arg_names}
        try:
            compiled = triton.compile(ASTSource(fn, full_signature, constexprs),
                                      target=GPUTarget("cuda", 90, 32))
            report[name] = "ok" if compiled.asm.get("cubin") else "no cubin produced"
        except Exception as error:  # reported per case by the parent test
            report[name] = f"{type(error).__name__}: {error}"
    return report


@pytest.fixture(scope="module")
def compile_report(tmp_path_factory):
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton_cache"))
    result = subprocess.run([sys.executable, __file__, *CASES], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        pytest.fail(f"compile subprocess failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", CASES)
def test_kernel_compiles_to_an_sm90_cubin(case, compile_report):
    outcome = compile_report[case]
    if "ptxas" in outcome.lower() and "not found" in outcome.lower():
        pytest.skip(outcome)
    assert outcome == "ok", outcome


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    print(json.dumps(compile_cases(sys.argv[1:])))
