"""A real pool of two OpenAI-compatible reader servers — two llama.cpp servers (xllamacpp, each in a process of its own)
serving the bundled model — behind one lcrag pipeline: one server is killed (SIGKILL) mid-run and every question is
still answered, by the other; before that, document affinity kept each document on one server, whose prefix cache
answered its later questions."""

import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from reader_servers import llama_server

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.readers import server_stats, streaming
from lcrag.documents.synthetic import needle_document

pytestmark = pytest.mark.slow


@pytest.fixture
def two_servers():
    started = [llama_server(threads=1, ctx=2048) for _ in range(2)]
    yield started
    for process, _ in started:
        process.kill()
        process.wait(30)


def ask(pipeline: Pipeline, document, question: str, listen: bool):
    """One LC question, half of them streamed as the service streams them (a cut stream resumes on the other
    server)."""
    if not listen:
        return pipeline.ask(document, question)
    with streaming.listening(streaming.Listener()):
        return pipeline.ask(document, question)


def test_a_server_killed_mid_run_leaves_every_question_answered(two_servers, tmp_path):
    (first, url_a), (second, url_b) = two_servers
    settings = Settings(llm="openai:smollm2", base_url=f"{url_a},{url_b}", strategy="lc", max_tokens=12,
                        cache=False, cache_dir=tmp_path, backoff=120, max_backoff=300, timeout=300)
    # a long first skip: the killed server must still be skipped when the run ends, however slow the machine
    pipeline = Pipeline(settings)
    documents = [needle_document(250, seed=seed) for seed in range(4)]
    questions = [(doc, fact.question) for doc, facts in documents for fact in facts]  # 3 per document
    answered = []
    lock = threading.Lock()

    def ask_and_kill(item):
        i, (doc, question) = item
        answer = ask(pipeline, doc, question, i % 2 == 0)
        with lock:
            answered.append(answer)
            if len(answered) == 3:  # mid-run, the other worker's question under way: the busier server goes
                (first, second)[busiest].send_signal(signal.SIGKILL)
        return answer

    try:
        firsts = [ask(pipeline, doc, question, i % 2 == 1) for i, (doc, question) in enumerate(questions[::3])]
        seconds = [ask(pipeline, doc, question, False) for doc, question in questions[1::3]]
        before = server_stats(pipeline.reader)
        busiest = max(range(2), key=lambda i: before[i]["completions"])
        with ThreadPoolExecutor(2) as run:
            answers = list(run.map(ask_and_kill, enumerate(questions)))
        after = server_stats(pipeline.reader)
    finally:
        pipeline.close()
    # affinity: a document's second question went to its first's server, whose prefix cache held the document
    assert all(a.calls[0].cached_prompt_tokens > 0.8 * a.calls[0].prompt_tokens for a in seconds)
    assert all(a.text.strip() for a in firsts + seconds + answers) and len(answers) == len(questions)
    assert after[busiest]["up"] is False and after[busiest]["failures"] >= 1
    assert after[1 - busiest]["completions"] > before[1 - busiest]["completions"]
