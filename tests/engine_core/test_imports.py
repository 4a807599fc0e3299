import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_core_modules_import_neither_torch_nor_ray():
    code = (
        "import sys\n"
        "import services.engine.sequence, services.engine.block_pool\n"
        "import services.engine.kv_cache_manager, services.engine.scheduler\n"
        "heavy = sorted(m for m in ('torch', 'ray') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
