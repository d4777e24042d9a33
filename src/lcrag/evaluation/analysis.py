"""Why RAG fails, and which questions each side wins.

- :func:`classify_failures`: the Self-Route paper's failure analysis (§5.2, prompt of its Table 8): the questions
  Self-Route sent to LC (RAG-and-Route said "unanswerable"), classified by a reader into (A) multi-step reasoning,
  (B) general query, (C) long and complex query, (D) implicit query needing the whole context, (E) other. The
  retrieved chunks are recomputed (retrieval is deterministic and its index is in the run's cache). Results are
  written one line per question as they come, so a stopped analysis resumes.
- :func:`question_words` and :func:`tfidf_words`: the LC-vs-RAG study's §5.3–5.4 -- LC-only against RAG-only
  questions by question word, and the top TF-IDF words of each side (each dataset's questions joined into one
  document, English stop words removed).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from lcrag.core.errors import InputError
from lcrag.evaluation.datasets import EvalItem
from lcrag.evaluation.report import is_correct
from lcrag.readers.base import GenerationParams, Reader
from lcrag.core.types import LLMCall

REASONS = {"A": "multi-step", "B": "general", "C": "long and complex", "D": "implicit", "E": "other"}

# The Self-Route paper, Table 8 (typographic quotes and the "children’s" apostrophe as printed).
FAILURE_PROMPT = """You are given some text chunks from an article, and a question. The text chunks are retrieved by an external retriever.
Now:
(1) Tell whether the question can be answered based only on the provided text chunks.
(2) If the question can be answered, answer the question based on the texts as concisely as you can, using a single phrase if possible.
(3) If the question cannot be answered, choose the reason from the following:
A. The question needs multistep reasoning, thus it is hard to retrieve all the relevant chunks. For example, "What nationality is the performer of song You Can?" contains two steps: find the performer, then find the nationality of the performer. Other examples include "Where does the director of film Wine Of Morning work at?", "What is another notable work made by the author of Miss Sara Sampson?"
B. The question is a general query, thus it is hard to retrieve relevant chunks. For example, "What did the group think about Dave leaving?" is general because the group may include multiple persons, and they can have different thinkings.
C. The question is long and complex, which is hard for the retriever to encode it to retrieve relevant chunks. For example, "What did Julie Morgan elaborate on the online survey when talking about the evaluations on the legitimacy of the children’s rights, protection and demands?", "The Huskies football team were invited to the Alamo Bowl where they were defeated by a team coached by Art Briles and who played their home games at what stadium?"
D. The question is not explicit and requires comprehensive understanding of the whole story and cannot be solved using retrieval-augmented generation. For example, "What caused the shadow behind Koerber’s ship?" needs a comprehensive understanding of the whole story. Another example like "How many words are there in the article" also requires the complete article.
E. Others.
Keep the above reasons in mind, and choose the most possible reason if you think the question cannot be answered based on the text. Output the results in JSON format.
{in_context_examples}
Text: {context}
Question: {input}
Answer:"""

# The paper's few-shot examples were annotated by hand and not published; these are ours, one per reason, in the
# JSON shape the prompt asks for.
FEW_SHOT_EXAMPLES = [
    ("The film Wine of Morning was directed by Katherine Stenholm. It premiered in 1955.",
     "Where does the director of film Wine Of Morning work at?",
     {"answerable": False, "answer": None, "reason": "A"}),
    ("Dave said he would leave the band after the tour. Anna booked the studio for March.",
     "What did the group think about Dave leaving?",
     {"answerable": False, "answer": None, "reason": "B"}),
    ("The committee met on Tuesday. Julie Morgan opened the session with a welcome.",
     "What did Julie Morgan elaborate on the online survey when talking about the evaluations on the legitimacy of "
     "the children's rights, protection and demands?",
     {"answerable": False, "answer": None, "reason": "C"}),
    ("Koerber checked the instruments again. The ship drifted on through the dark.",
     "What caused the shadow behind Koerber's ship?",
     {"answerable": False, "answer": None, "reason": "D"}),
    ("The bridge was completed in 1932 and is 503 metres long.",
     "How long is the bridge?",
     {"answerable": True, "answer": "503 metres", "reason": None}),
]


def few_shot_block(examples=FEW_SHOT_EXAMPLES) -> str:
    return "\n".join(f"Text: {text}\nQuestion: {question}\nAnswer: {json.dumps(label)}\n"
                     for text, question, label in examples)


def parse_reason(output: str) -> str:
    """The reason letter from the classifier's JSON (or the first A-E it names); "answerable" when it answered,
    "unparsed" when neither can be found."""
    match = re.search(r'"reason"\s*:\s*"?\(?([A-E])\b', output)
    if match:
        return REASONS[match.group(1)]
    if re.search(r'"answerable"\s*:\s*true', output, re.IGNORECASE):
        return "answerable"
    match = re.search(r"\b([A-E])[.)]", output)
    return REASONS[match.group(1)] if match else "unparsed"


def routed_to_lc(rows: list[dict]) -> list[dict]:
    """Self-Route rows whose RAG-and-Route step declined, so LC answered (the paper's failure cases)."""
    return [r for r in rows if r["strategy"] == "self-route" and r["route"] == "lc"]


def classify_failures(
    rows: list[dict],
    items: dict[str, EvalItem],
    context_for: Callable[[dict, EvalItem], str],
    reader: Reader,
    out: Path,
    max_tokens: int = 64,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Classify each row's question; results appended to ``out`` (JSONL) as they come; rows already there skipped."""
    done: dict[str, dict] = {}
    if out.exists():
        text = out.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):  # a line cut by a kill: drop it, so the next record starts clean
            text = text[: text.rfind("\n") + 1]
            out.write_text(text, encoding="utf-8")
        for line in text.splitlines():
            record = json.loads(line)
            done[record["key"]] = record
    examples = few_shot_block()
    params = GenerationParams(max_tokens=max_tokens)
    results = []
    with out.open("a", encoding="utf-8") as f:
        for row in rows:
            key = f"{row['config']}|{row['item_id']}"
            if key in done:
                results.append(done[key])
                continue
            item = items.get(row["item_id"])
            if item is None:
                raise InputError(f"question {row['item_id']} is not in the dataset given; pass the run's own dataset")
            prompt = (FAILURE_PROMPT.replace("{in_context_examples}", examples)
                      .replace("{context}", context_for(row, item)).replace("{input}", item.question))
            completion = reader.complete([{"role": "user", "content": prompt}], params)
            record = {"key": key, "item_id": row["item_id"], "dataset": row["dataset"], "config": row["config"],
                      "question": item.question, "reason": parse_reason(completion.text), "output": completion.text,
                      "call": LLMCall.from_completion("classify", completion).__dict__}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            results.append(record)
            if on_row:
                on_row(record)
    return results


def failure_table(records: list[dict]) -> tuple[list[str], list[list]]:
    """Reasons per dataset (the paper's Figure 4 as a table)."""
    labels = [*REASONS.values(), "answerable", "unparsed"]
    counts: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        counts[r["dataset"]][r["reason"]] += 1
        counts["all"][r["reason"]] += 1
    used = [x for x in labels if x in REASONS.values() or any(c[x] for c in counts.values())]
    body = [[d, sum(c.values()), *(c[x] for x in used)] for d, c in sorted(counts.items(), key=lambda kv: kv[0] == "all")]
    return ["dataset", "n", *used], body


# -- LC only vs RAG only ---------------------------------------------------------------------------------------------
def exclusive_questions(rows: list[dict], rag_config: str | None = None, loose: bool = False) -> dict[str, list[dict]]:
    """``{"LC only": rows, "RAG only": rows}``: questions exactly one side got right (strict correctness), RAG taken
    from ``rag_config`` (default: every RAG configuration, each against LC). ``loose``: the study's loose setting,
    ``{"LC better", "RAG better"}`` -- one side correct, or both wrong and one side's F1 higher."""
    lc = {r["item_id"]: r for r in rows if r["strategy"] == "lc"}
    names = ("LC better", "RAG better") if loose else ("LC only", "RAG only")
    sides: dict[str, list[dict]] = {name: [] for name in names}
    for r in rows:
        if r["strategy"] != "rag" or (rag_config and r["config"] != rag_config) or r["item_id"] not in lc:
            continue
        other = lc[r["item_id"]]
        a, b = is_correct(other), is_correct(r)
        if loose and not a and not b:
            a, b = other["f1"] > r["f1"], r["f1"] > other["f1"]
        if a and not b:
            sides[names[0]].append(r)
        elif b and not a:
            sides[names[1]].append(r)
    return sides


def question_words(sides: dict[str, list[dict]]) -> tuple[list[str], list[list]]:
    """Counts by question word (who, what, …, yes-no, other) for each side (the study's Figure 4)."""
    counts = {side: Counter(r["question_type"] for r in rs) for side, rs in sides.items()}
    kinds = sorted({k for c in counts.values() for k in c})
    return ["question word", *sides], [[k, *(counts[s][k] for s in sides)] for k in kinds]


def tfidf_words(sides: dict[str, list[dict]], top: int = 15) -> tuple[list[str], list[list]]:
    """Top words by TF-IDF summed over the two sides: one document per (side, dataset), all its questions joined."""
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
    except ImportError:
        raise InputError("the TF-IDF analysis needs scikit-learn: pip install -e '.[analysis]' in lcrag's checkout") from None
    docs: list[str] = []
    owners: list[str] = []
    for side, rs in sides.items():
        by_dataset: dict[str, list[str]] = defaultdict(list)
        for r in rs:
            by_dataset[r["dataset"]].append(r["question"])
        for questions in by_dataset.values():
            docs.append(" ".join(questions))
            owners.append(side)
    if not docs:
        return ["word", *sides], []
    vectorizer = TfidfVectorizer(stop_words="english")
    try:
        matrix = vectorizer.fit_transform(docs)
    except ValueError:  # only stop words
        return ["word", *sides], []
    words = vectorizer.get_feature_names_out()
    scores = {side: matrix[[i for i, o in enumerate(owners) if o == side]].sum(axis=0).A1 if side in owners
              else None for side in sides}
    total = sum(s for s in scores.values() if s is not None)
    order = sorted(range(len(words)), key=lambda i: (-total[i], words[i]))[:top]
    body = [[words[i], *(f"{scores[s][i]:.3f}" if scores[s] is not None else "0.000" for s in sides)] for i in order]
    return ["word", *(f"TF-IDF, {s}" for s in sides)], body


def items_by_id(items: Iterable[EvalItem]) -> dict[str, EvalItem]:
    return {i.id: i for i in items}
