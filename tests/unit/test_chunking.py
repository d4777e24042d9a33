import pytest

from lcrag.chunking import SentenceChunker, TokenChunker, WordChunker, make_chunker
from lcrag.core.errors import InputError
from lcrag.core.tokenization import _byte_to_char_offsets
from lcrag.core.types import Document

TEXT = (
    "Dr. Smith arrived at 5 p.m. on Tuesday.  He met the mayor, Mrs. Jones.\n\n"
    "They talked about the bridge! Was it safe? Nobody knew.\n"
    "Ünïcödé words — and “quotes” — survive too. " * 3
)


def assert_offsets(doc, chunks):
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert doc.text[c.start : c.end] == c.text
    starts = [c.start for c in chunks]
    assert starts == sorted(starts)


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_word_chunks_keep_offsets(size):
    doc = Document(TEXT)
    chunks = WordChunker(size).run(doc)
    assert_offsets(doc, chunks)
    assert all(len(c.text.split()) == size for c in chunks[:-1])
    assert sum(len(c.text.split()) for c in chunks) == len(TEXT.split())


def test_word_chunk_overlap():
    doc = Document("a b c d e f g")
    chunks = WordChunker(3, overlap=1).run(doc)
    assert [c.text for c in chunks] == ["a b c", "c d e", "e f g"]
    with pytest.raises(InputError):
        WordChunker(3, overlap=3).run(doc)


def test_sentence_chunks_keep_abbreviations_and_offsets():
    doc = Document(TEXT)
    sentences = SentenceChunker(max_words=1).run(doc)
    assert_offsets(doc, sentences)
    assert sentences[0].text == "Dr. Smith arrived at 5 p.m. on Tuesday."
    assert sentences[1].text == "He met the mayor, Mrs. Jones."
    packed = SentenceChunker(max_words=20).run(doc)
    assert_offsets(doc, packed)
    assert len(packed) < len(sentences)
    assert all(len(c.text.split()) <= 20 for c in packed)


def test_token_chunks(whitespace_tokenizer):
    doc = Document(TEXT)
    chunks = TokenChunker(whitespace_tokenizer, size=5).run(doc)
    assert_offsets(doc, chunks)
    assert all(len(whitespace_tokenizer.encode(c.text)) == 5 for c in chunks[:-1])
    assert chunks[0].start == 0
    assert chunks[-1].end in (len(TEXT.rstrip()), len(TEXT))


def test_make_chunker_errors():
    with pytest.raises(InputError, match="tokenizer"):
        make_chunker("tokens")
    with pytest.raises(InputError, match="unknown chunk unit"):
        make_chunker("pages")


def test_byte_offsets_map_to_characters():
    text = "aé世b"
    # bytes: a(1) é(2) 世(3) b(1) -> byte ends 1, 3, 6, 7
    assert _byte_to_char_offsets(text, [1, 3, 6, 7]) == [1, 2, 3, 4]
    # a split inside a multi-byte character moves past it
    assert _byte_to_char_offsets(text, [4]) == [3]


def test_sentences_are_read_in_blocks_as_syntok_reads_the_whole_text(monkeypatch):
    """syntok slows faster than a text grows, so long texts are split in blocks at blank lines or line ends: the
    sentences found are the same as over the whole text, offsets included."""
    from syntok import segmenter

    import lcrag.chunking.chunkers as chunkers

    text = "\n\n".join(" ".join(f"Paragraph {p} sentence {s} says Dr. Smith was in room {s}." for s in range(3))
                       + ("\nA line of its own ends here." if p % 3 else "") for p in range(40))
    text += "\n\n" + " ".join([f"One long line of sentences (number {n}), no break at all!" for n in range(30)])
    whole = [(tokens[0].offset, tokens[-1].offset + len(tokens[-1].value))
             for paragraph in segmenter.analyze(text) for sentence in paragraph
             if (tokens := [t for t in sentence if t.value])]
    monkeypatch.setattr(chunkers, "_SENTENCE_BLOCK", 300)
    assert len(list(chunkers._blocks(text, 300))) > 20
    assert SentenceChunker.sentence_spans(text) == whole


def test_a_text_without_spaces_is_chunked_into_bounded_pieces():
    from lcrag.chunking.chunkers import WordChunker
    from lcrag.core.text import MAX_WORD_CHARS

    chinese = "東京は日本の首都です。" * 3000  # 33,000 characters, no space
    chunks = WordChunker(300).run(Document(text=chinese, id="zh"))
    assert len(chunks) == 110 and all(len(c.text) == 300 for c in chunks)
    blob = "QUJD" * 250_000  # a megabyte of base64
    chunks = WordChunker(300).run(Document(text=blob, id="b64"))
    assert max(len(c.text) for c in chunks) == 300 * MAX_WORD_CHARS and "".join(c.text for c in chunks) == blob


def test_spaced_text_is_chunked_by_its_words_as_before():
    from lcrag.chunking.chunkers import WordChunker

    text = " ".join(f"word{i}," for i in range(1000))
    chunks = WordChunker(300).run(Document(text=text, id="en"))
    assert [len(c.text.split()) for c in chunks] == [300, 300, 300, 100]
