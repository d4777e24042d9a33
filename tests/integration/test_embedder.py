import numpy as np


def test_bundled_embedder_vectors(embedder):
    v = embedder.embed(["A cat sits on the mat.", "A kitten is sitting on a rug.", "Stock prices fell sharply today."])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_batching_does_not_change_vectors(embedder):
    texts = [f"sentence number {i} " * (i % 7 + 1) for i in range(40)]
    together = embedder.embed(texts)
    one_by_one = np.vstack([embedder.embed([t]) for t in texts])
    assert np.allclose(together, one_by_one, atol=1e-4)
