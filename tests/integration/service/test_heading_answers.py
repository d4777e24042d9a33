"""Issue 42 (reproduced 3): an answer's sources carry a bounded section path. Five nested 40,000-character headings
over 400 small sections gave a 2.8 MB answer (each source carried every title whole), and each such answer was kept
in the answer cache; now each source cites the innermost titles, cut, and the answer is kept at well under 64 KB."""

from __future__ import annotations

import json
import sys

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.retrieval.index import CHUNK_OVERHEAD_BYTES
from lcrag.core.provenance import ELLIPSIS, SOURCE_SECTION_LEVELS, SOURCE_TITLE_CHARS
from lcrag.service.answer_cache import dump, from_cache
from lcrag.service.answering import Answering
from lcrag.service.limits import MAX_KEPT_ANSWER_BYTES


def nested_headings(sections: int = 400, title_chars: int = 40_000) -> str:
    top = "".join(f"{'#' * level} {chr(64 + level) * title_chars}\n\n" for level in range(1, 6))
    return top + "".join(f"###### Part {i}\n\nPart {i} holds the code {7000 + i}.\n\n" for i in range(sections))


def test_an_answer_over_nested_long_headings_is_bounded_and_kept(tmp_path, scripted_reader):
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=10, strategy="rag")
    reader = scripted_reader(lambda m: "7123")
    answering = Answering(settings, tmp_path / "collections", pipeline=Pipeline(settings, reader=reader),
                          answer_cache=True)
    try:
        answering.collections.create("deep")
        answering.collections.add_file("deep", "deep.md", iter([nested_headings().encode()]), 8 << 20)
        assert answering.collections.wait("deep", 120).state == "ready"
        answer = answering.ask("deep", "Which code does part 123 hold?", {})
        sent = json.dumps(answer.to_dict())
        assert len(answer.sources) == 10 and len(sent) < 16_000 < MAX_KEPT_ANSWER_BYTES, len(sent)
        for source in answer.sources:
            assert source.section[0] == ELLIPSIS and len(source.section) == SOURCE_SECTION_LEVELS + 1
            assert all(len(title) <= SOURCE_TITLE_CHARS for title in source.section)
            assert source.section[-1].startswith("Part ")
        assert len(dump(answer)) <= MAX_KEPT_ANSWER_BYTES
        assert from_cache(answering.ask("deep", "Which code does part 123 hold?", {}))  # kept, and served
        # --index-memory-mb weighs the index by what it holds: the file's layout (400 sections' table) too
        document = answering.document("deep")
        index = answering.base.index(document)
        chunks = CHUNK_OVERHEAD_BYTES * len(index.chunks)  # their texts are read from the file's, held once
        file_text, layout = sys.getsizeof(document.parts[0][1].text), document.parts[0][1].layout.memory_bytes()
        assert layout > 50_000
        assert index.memory_bytes() >= sys.getsizeof(document.text) + file_text + chunks + layout
    finally:
        answering.close()
