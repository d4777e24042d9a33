"""LlamaIndex's ``SentenceSplitter``, as LaRA chunks its documents for RAG: ``sentence-splitter:600:100``.

LaRA (``evaluation/eval_rag.py``) splits each document with ``SentenceSplitter(chunk_size=600, chunk_overlap=100,
separator=' ', paragraph_separator='\\n\\n\\n', secondary_chunking_regex='[^,.;。？！]+[,.;。？！]?')`` counting
tiktoken's cl100k tokens. This is the same algorithm, counting the reader's tokens instead (cl100k is not
available offline, and a chunk's size matters in the reader's tokens):

1. a text of at most ``size`` tokens is one split; a longer one is cut, by the first of these that cuts it at all,
   at paragraph separators (``\\n\\n\\n``, kept at the start of the next part), then into sentences, then (no
   longer "sentences") by the regex, at spaces, into characters; a part still too long is cut again the same way;
2. the splits are merged greedily into chunks of at most ``size`` tokens (a split's size is its own token count);
   each new chunk starts with the last splits of the one before that fit in ``overlap`` tokens;
3. chunks are stripped of surrounding whitespace; empty ones are dropped.

Sentences are found as LlamaIndex finds them: NLTK's Punkt with *no trained parameters* (``PunktSentenceTokenizer()``
— no abbreviation list, so ``Mr.`` ends a sentence), each sentence running to the start of the next. Punkt's
untrained path is ported below (NLTK, Apache-2.0), because lcrag does not depend on NLTK. ``curly_quotes`` picks
the NLTK version: False (the default) is NLTK ≤ 3.9, current when LaRA ran; NLTK 3.10 also treats ‘ ’ “ ” « » as
closing punctuation, which in books with curly quotes ends many more sentences at ``.”``.

Chunks are spans of the document (``text[start:end]``). LlamaIndex joins its splits' texts instead, which differs
in one case: the regex split drops a punctuation mark that follows another (``...``), which a span keeps; it only
happens inside a sentence longer than ``size`` tokens.

Checked against llama-index-core 0.14.25's ``SentenceSplitter`` with LaRA's settings and the same tokenizer callable
(all-MiniLM-L6-v2's WordPiece), on all 130 LaRA documents and the 4 texts of ``shared/data/texts``: with NLTK 3.10.4
(``curly_quotes=True``) 17,040 chunks, 17,005 identical and 35 differing only by the punctuation LlamaIndex's regex
split drops; with NLTK 3.9.1 (the default) 17,046 chunks, 17,011 identical, the same 35 otherwise; the same number of
chunks for every document, and Punkt's sentence spans identical on every text. It runs about 1.4 times as fast.
``tests/unit/evaluation/test_lara_dataset.py`` repeats the check when llama-index-core is installed (the test extra).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from dataclasses import dataclass

from lcrag.core.errors import InputError
from lcrag.chunking.chunkers import size_option
from lcrag.core.registry import CHUNKERS
from lcrag.core.tokenization import Tokenizer, count_many
from lcrag.core.types import Chunk, Document

LARA_PARAGRAPH_SEPARATOR = "\n\n\n"
LARA_SECONDARY_REGEX = "[^,.;。？！]+[,.;。？！]?"


# -- Punkt with no trained parameters (NLTK's nltk/tokenize/punkt.py, the parts an untrained tokenizer uses) ---------
_CURLY = "\u2018\u2019\u201c\u201d\xab\xbb"


class _PunktVars:
    """PunktLanguageVars: the regular expressions, with or without NLTK 3.10's curly quotes."""

    def __init__(self, curly_quotes: bool):
        curly = _CURLY if curly_quotes else ""
        non_word = r"(?:[)\";}\]\*:@\'\({\[%s%s])" % (curly, re.escape("?!"))
        multi_char = r"(?:\-{2,}|\.{2,}|(?:\.\s){2,}\.)"
        word_start = r"[^\(\"\`{\[:;&\#\*@\)}\]\-,]"
        self.boundary_realignment = re.compile(r'["\')\]}%s]+?(?:\s+|(?=--)|$)' % curly, re.MULTILINE)
        self.word_tokenizer = re.compile(
            r"""(
            %(MultiChar)s
            |
            (?=%(WordStart)s)\S+?  # Accept word characters until end is found
            (?= # Sequences marking a word's end
                \s|                                 # White-space
                $|                                  # End-of-string
                %(NonWord)s|%(MultiChar)s|          # Punctuation
                ,(?=$|\s|%(NonWord)s|%(MultiChar)s) # Comma if at end of word
            )
            |
            \S
        )""" % {"NonWord": non_word, "MultiChar": multi_char, "WordStart": word_start},
            re.UNICODE | re.VERBOSE,
        )
        self.period_context = re.compile(
            r"""
            [\.\?!]                  # a potential sentence ending
            (?=(?P<after_tok>
                %(NonWord)s              # either other punctuation
                |
                \s+(?P<next_tok>\S+)     # or whitespace and some other token
            ))""" % {"NonWord": non_word},
            re.UNICODE | re.VERBOSE,
        )


_NUMERIC = re.compile(r"^-?[\.,]?\d[\d,\.-]*\.?$")
_ELLIPSIS = re.compile(r"\.\.+$")
_INITIAL = re.compile(r"[^\W\d]\.$", re.UNICODE)
_PUNCTUATION = tuple(";:,.!?")


@dataclass
class _Token:
    tok: str
    sentbreak: bool = False
    abbr: bool = False
    ellipsis: bool = False

    @property
    def period_final(self) -> bool:
        return self.tok.endswith(".")

    @property
    def type(self) -> str:
        return _NUMERIC.sub("##number##", self.tok.lower())

    @property
    def type_no_period(self) -> str:
        t = self.type
        return t[:-1] if len(t) > 1 and t[-1] == "." else t


class _Punkt:
    """``PunktSentenceTokenizer()``'s ``span_tokenize`` with empty parameters: no abbreviations, collocations,
    sentence starters or orthographic context, so of the second pass only the initial and number rules remain."""

    def __init__(self, curly_quotes: bool = False):
        self.vars = _PunktVars(curly_quotes)

    def _tokens(self, text: str) -> Iterator[_Token]:
        for line in text.split("\n"):
            if line.strip():
                for tok in self.vars.word_tokenizer.findall(line):
                    yield self._first_pass(_Token(tok))

    @staticmethod
    def _first_pass(t: _Token) -> _Token:
        if t.tok in (".", "?", "!"):
            t.sentbreak = True
        elif _ELLIPSIS.match(t.tok):
            t.ellipsis = True
        elif t.period_final and not t.tok.endswith(".."):
            t.sentbreak = True  # no abbreviation is known
        return t

    @staticmethod
    def _starts_sentence(t: _Token) -> bool | str:
        """The orthographic heuristic with no orthographic context: punctuation and lower-case words never start a
        sentence; anything else is unknown."""
        if t.tok in _PUNCTUATION or t.tok[0].islower():
            return False
        return "unknown"

    def _second_pass(self, t1: _Token, t2: _Token | None) -> None:
        if t2 is None or not t1.period_final:
            return
        initial = bool(_INITIAL.match(t1.tok))
        # (abbreviations and ellipses could become breaks only by orthographic evidence, which is never True here)
        if initial or t1.type_no_period == "##number##":
            starts = self._starts_sentence(t2)
            if starts is False:
                t1.sentbreak, t1.abbr = False, True
            elif initial and t2.tok[0].isupper():  # "unknown", an initial before a capital: J. Bach
                t1.sentbreak, t1.abbr = False, True

    def _contains_sentbreak(self, text: str) -> bool:
        tokens = list(self._tokens(text))
        found = False
        for t1, t2 in zip(tokens, tokens[1:] + [None]):
            self._second_pass(t1, t2)
            if found:
                return True
            if t1.sentbreak:
                found = True
        return False

    def _end_contexts(self, text: str) -> Iterator[tuple[re.Match, str]]:
        previous_slice, previous_match = slice(0, 0), None
        for match in self.vars.period_context.finditer(text):
            before = text[previous_slice.stop : match.start()]
            last_space = next((i for i in range(len(before) - 1, -1, -1) if before[i] in string.whitespace), 0)
            start = last_space + previous_slice.stop + 1 if last_space else previous_slice.start
            word = slice(start, match.start())
            if previous_match and previous_slice.stop <= word.start:
                yield previous_match, text[previous_slice] + previous_match.group() + previous_match.group("after_tok")
            previous_match, previous_slice = match, word
        if previous_match:
            yield previous_match, text[previous_slice] + previous_match.group() + previous_match.group("after_tok")

    def _slices(self, text: str) -> Iterator[slice]:
        last_break = 0
        for match, context in self._end_contexts(text):
            if self._contains_sentbreak(context):
                yield slice(last_break, match.end())
                last_break = match.start("next_tok") if match.group("next_tok") else match.end()
        yield slice(last_break, len(text.rstrip()))

    def span_tokenize(self, text: str) -> Iterator[tuple[int, int]]:
        slices = list(self._slices(text))
        realign = 0
        for s1, s2 in zip(slices, slices[1:] + [None]):
            s1 = slice(s1.start + realign, s1.stop)
            if s2 is None:
                if text[s1]:
                    yield s1.start, s1.stop
                continue
            m = self.vars.boundary_realignment.match(text[s2])
            if m:
                yield s1.start, s2.start + len(m.group(0).rstrip())
                realign = m.end()
            else:
                realign = 0
                if text[s1]:
                    yield s1.start, s1.stop


# -- the splitter -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SentenceSplitterChunker:
    """LlamaIndex's SentenceSplitter over reader tokens (LaRA's RAG: 600 tokens, 100 overlap)."""

    tokenizer: Tokenizer
    size: int = 600
    overlap: int = 100
    paragraph_separator: str = LARA_PARAGRAPH_SEPARATOR
    secondary_regex: str = LARA_SECONDARY_REGEX
    curly_quotes: bool = False

    @property
    def key(self) -> str:
        quotes = ":nltk3.10" if self.curly_quotes else ""
        return f"sentence-splitter:{self.tokenizer.name}:{self.size}:{self.overlap}{quotes}"

    def run(self, document: Document) -> list[Chunk]:
        if self.size <= 0:
            raise InputError("chunk size must be positive")
        if not 0 <= self.overlap < self.size:
            raise InputError("chunk overlap must be at least 0 and smaller than the chunk size")
        text = document.text
        if not text:
            return []
        splitter = _Splitter(self, text)
        chunks = []
        for a, b in splitter.merge(splitter.split(0, len(text))):
            while a < b and text[a].isspace():
                a += 1
            while b > a and text[b - 1].isspace():
                b -= 1
            if a < b:
                chunks.append(Chunk(len(chunks), a, b, text[a:b]))
        return chunks


class _Splitter:
    def __init__(self, settings: SentenceSplitterChunker, text: str):
        self.s = settings
        self.text = text
        self.punkt = _Punkt(settings.curly_quotes)
        self.regex = re.compile(settings.secondary_regex) if settings.secondary_regex else None

    def _sizes(self, spans: list[tuple[int, int]]) -> list[int]:
        return count_many(self.s.tokenizer, [self.text[a:b] for a, b in spans])

    def _by_separator(self, a: int, b: int, sep: str) -> list[tuple[int, int]]:
        """``split_text_keep_separator``: the separator starts the next part; empty parts are dropped."""
        parts, start = [], a
        pos = self.text.find(sep, a, b) if sep else -1
        while pos != -1:
            parts.append((start, pos))
            start = pos
            pos = self.text.find(sep, pos + len(sep), b)
        parts.append((start, b))
        return [(x, y) for x, y in parts if y > x]

    def _by_sentence(self, a: int, b: int) -> list[tuple[int, int]]:
        """Each sentence runs to the start of the next (the first from its own start; the last to the end)."""
        starts = [a + s for s, _ in self.punkt.span_tokenize(self.text[a:b])]
        return [(s, e) for s, e in zip(starts, starts[1:] + [b])]

    def _pieces(self, a: int, b: int) -> tuple[list[tuple[int, int]], bool]:
        for parts in (lambda: self._by_separator(a, b, self.s.paragraph_separator), lambda: self._by_sentence(a, b)):
            found = parts()
            if len(found) > 1:
                return found, True
        subs = [lambda: self._by_separator(a, b, " "), lambda: [(i, i + 1) for i in range(a, b)]]
        if self.regex is not None:
            subs.insert(0, lambda: [(a + m.start(), a + m.end()) for m in self.regex.finditer(self.text[a:b])])
        for parts in subs:
            found = parts()
            if len(found) > 1:
                break
        return found, False

    def split(self, a: int, b: int, size: int | None = None) -> list[tuple[int, int, bool, int]]:
        """(start, end, is a sentence, tokens) of each split of ``text[a:b]``."""
        size = self._sizes([(a, b)])[0] if size is None else size
        if size <= self.s.size:
            return [(a, b, True, size)]
        parts, is_sentence = self._pieces(a, b)
        out: list[tuple[int, int, bool, int]] = []
        for (x, y), n in zip(parts, self._sizes(parts)):
            if n <= self.s.size or len(parts) == 1:  # one indivisible part: kept whole, never cut forever
                out.append((x, y, is_sentence, n))
            else:
                out.extend(self.split(x, y, n))
        return out

    def merge(self, splits: list[tuple[int, int, bool, int]]) -> list[tuple[int, int]]:
        """SentenceSplitter._merge over spans: each chunk is (start of its first split, end of its last)."""
        size, overlap = self.s.size, self.s.overlap
        chunks: list[tuple[int, int]] = []
        cur: list[tuple[int, int, int]] = []  # (start, end, tokens)
        cur_len, new_chunk = 0, True

        def close() -> None:
            nonlocal cur, cur_len, new_chunk
            chunks.append((cur[0][0], cur[-1][1]))
            last, cur, cur_len, new_chunk = cur, [], 0, True
            i = len(last) - 1
            while i >= 0 and cur_len + last[i][2] <= overlap:
                cur_len += last[i][2]
                cur.insert(0, last[i])
                i -= 1

        i = 0
        while i < len(splits):
            a, b, is_sentence, n = splits[i]
            if cur_len + n > size and not new_chunk:
                close()
                continue
            if new_chunk and cur_len + n > size:
                while cur and cur_len + n > size:  # drop overlap until the split fits
                    cur_len -= cur.pop(0)[2]
            if is_sentence or cur_len + n <= size or new_chunk:
                cur_len += n
                cur.append((a, b, n))
                i += 1
                new_chunk = False
            else:
                close()
        if not new_chunk:
            chunks.append((cur[0][0], cur[-1][1]))
        return chunks


@CHUNKERS.register("sentence-splitter", help="LlamaIndex's SentenceSplitter (LaRA's RAG): paragraphs and sentences "
                   "packed into SIZE reader tokens (default 600), OVERLAP tokens shared (default 100)",
                   options=(size_option(600, "reader tokens a chunk, at most"),),
                   needs_tokenizer=True, overlap=100)
def sentence_splitter_chunker(size: int = 600, tokenizer: Tokenizer | None = None, overlap: int = 100) -> SentenceSplitterChunker:
    if tokenizer is None:
        raise InputError("the sentence splitter counts the reader's tokens and needs its tokenizer")
    return SentenceSplitterChunker(tokenizer, size, overlap)
