import pytest

from lcrag.readers.llamacpp import EmbeddedLlamaReader
from lcrag.retrieval import OnnxMiniLMEmbedder
from lcrag.documents.synthetic import needle_document


@pytest.fixture(scope="session")
def reader():
    r = EmbeddedLlamaReader()
    yield r
    r.close()


@pytest.fixture(scope="session")
def embedder():
    return OnnxMiniLMEmbedder()


@pytest.fixture(scope="session")
def needles():
    return needle_document(1500, seed=3)
