"""Issue 34 item 12: model calls a client orders are paid for. A retriever that writes summaries with the reader (tree,
raptor) is offered only when the operator lists it (`--retrievers`); when it is, its summaries are written by the
collection's indexing job (issue 43), not by a request, and `search`, which makes no model call, refuses it."""

from __future__ import annotations

import pytest

from lcrag.cli.engine import allowed_retrievers
from lcrag.core.errors import OptionError

TEXT = " ".join(f"Section {i}. The valve {i} opens at {10 + i} bar and closes at {5 + i} bar." for i in range(60))


def test_by_default_a_client_chooses_only_retrievers_that_make_no_reader_call_and_embed_only_chunks():
    offered = allowed_retrievers(None, "bm25")
    assert {"bm25", "dense", "hybrid"} <= set(offered) and not {"tree", "raptor", "sentence-window"} & set(offered)
    assert "tree" in allowed_retrievers(None, "tree")  # the server's own retriever is always offered
    assert "sentence-window" in allowed_retrievers(None, "sentence-window")
    assert allowed_retrievers(["bm25", "tree"], "bm25") == ("bm25", "tree")
    with pytest.raises(OptionError, match="--retrievers 'treee': not a retriever"):
        allowed_retrievers(["treee"], "bm25")
