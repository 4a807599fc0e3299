import pytest
import torch

from services.model.paths import draft_path, early_draft_path, target_path


@pytest.fixture(scope="session", autouse=True)
def _small_thread_count():
    torch.set_num_threads(2)


@pytest.fixture(scope="session")
def model_path() -> str:
    return str(target_path())


@pytest.fixture(scope="session")
def draft_model_path() -> str:
    return str(draft_path())


@pytest.fixture(scope="session")
def early_draft_model_path() -> str:
    return str(early_draft_path())


@pytest.fixture(scope="session")
def tokenizer(model_path):
    from services.model.tokenizer import CharTokenizer
    return CharTokenizer.from_pretrained(model_path)


@pytest.fixture(scope="session")
def reference_model(model_path):
    from services.model.llama import load_pretrained
    return load_pretrained(model_path)
