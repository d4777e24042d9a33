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


def test_a_long_text_is_tokenized_from_a_prefix_with_the_whole_texts_first_tokens(embedder):
    """A long text is read from a prefix cut where BERT's pre-tokenizer cuts: its first max_length tokens are the
    whole text's, for texts of spaces, punctuation, control characters, CJK, and words too long to be one piece."""
    import random

    rng = random.Random(7)
    pieces = list("abc   \n\t.,*_-'\x00\x1cé漢字") + ["\u00a0", "\u2014"]
    for _ in range(120):
        length, word = rng.choice([9000, 20000, 40000]), rng.choice([1, 8, 60, 150, 400])
        text = "".join("x" * rng.randint(1, word) if rng.random() < 0.5 else rng.choice(pieces)
                       for _ in range(length // 2))[:length]
        assert embedder._encode([text])[0].ids == embedder._tokenizer.encode(text).ids


def test_a_hostile_chunk_is_embedded_without_tokenizing_all_of_it(embedder):
    """12 MB of ``*a_`` (12 million tokens whole) embeds as its first tokens do."""
    hostile = "*a_" * 4_000_000
    assert np.allclose(embedder.embed([hostile]), embedder.embed([hostile[:3000]]), atol=1e-6)
