"""``first-chunk``: the reader sees the document's first chunk only."""

from lcrag.core.registry import STRATEGIES
from lcrag.strategies.base import QueryContext, Strategy, Timer, call_reader
from lcrag.core.types import Answer, ChunkUsed


@STRATEGIES.register("first-chunk", help="the document's first chunk only (example plugin)")
class FirstChunk(Strategy):
    name = "first-chunk"

    def run(self, ctx: QueryContext, question: str) -> Answer:
        timer = Timer()
        with timer.stage("retrieve"):
            chunk = ctx.index().chunks[0]
        messages = ctx.prompts.messages(ctx.prompts.rag, question, context=chunk.text)
        text, call = call_reader(ctx, "answer", messages, timer)
        used = [ChunkUsed(chunk.index, chunk.start, chunk.end, 1.0)]
        return Answer(text, question, self.name, route="first-chunk", calls=[call], chunks=used, timings=timer.timings)
