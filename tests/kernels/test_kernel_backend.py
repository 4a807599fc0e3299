import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels.backend import resolve_backend

REPO = Path(__file__).resolve().parents[2]


def test_no_choice_means_triton_exactly_when_cuda_is_available():
    assert resolve_backend(None) == ("triton" if torch.cuda.is_available() else "torch")


@pytest.mark.parametrize("name", ["torch", "triton"])
def test_an_explicit_backend_is_kept(name):
    assert resolve_backend(name) == name


@pytest.mark.parametrize("name", ["cuda", "Torch", ""])
def test_an_unknown_backend_is_rejected_naming_the_setting(name):
    with pytest.raises(ValueError, match="kernel_backend"):
        resolve_backend(name)


def test_importing_kernels_does_not_import_triton():
    code = "import sys, kernels; assert 'triton' not in sys.modules, 'triton imported eagerly'"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
