"""What Session's methods return: small dataclasses of plain Python values and numpy arrays.

Log-probs are natural logarithms of the model's softmax over the whole vocabulary, float32 as
the library computes them; sums are in double (Python float), added in order over the float32
values, as ``estream score`` adds them, so every number equals the CLI's bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


@dataclass
class TextScore:
    """Per-token scores of one text (``estream score`` on ``{"text": ...}`` or
    ``{"ids": [...]}``).

    ids:      int32 [n], the tokens scored (BOS + the text's tokens; the ids as given)
    logprobs: float32 [n], log P(ids[i] | ids[<i]); NaN for a first token with nothing before
              it (a text's BOS, ids starting with BOS), a number for ids conditioned on an
              implicit BOS (docs/prompts.md)
    ranks:    int32 [n], 1 + the tokens ranked above ids[i] (1: the model's top token); 0 where
              logprobs is NaN
    sum:      the sum of the logprobs that are numbers (double)
    top_ids, top_logprobs: [n, top] the best tokens per position and their log-probs, best
              first (with ``top=``; -1 / NaN where logprobs is NaN); None otherwise
    """

    ids: np.ndarray
    logprobs: np.ndarray
    ranks: np.ndarray
    sum: float
    top_ids: Optional[np.ndarray] = None
    top_logprobs: Optional[np.ndarray] = None

    @property
    def greedy(self) -> np.ndarray:
        """bool [n]: whether each token is the model's top token (False at position 0)."""
        return self.ranks == 1


@dataclass
class Choice:
    """A multiple-choice record (``{"context": C, "choices": [...], "gold": G}``).

    logprobs: per choice, log P(choice | context) (double sums)
    n_tokens: per choice, its tokens; n_bytes: its UTF-8 bytes
    chosen:             argmax of logprobs (lm-evaluation-harness's acc)
    chosen_norm_tokens: argmax of logprob / n_tokens
    chosen_norm_bytes:  argmax of logprob / n_bytes (the harness's acc_norm)
    (ties go to the lowest index). With gold: correct = {"chosen": bool, ...} per rule.
    """

    logprobs: list[float]
    n_tokens: list[int]
    n_bytes: list[int]
    chosen: int
    chosen_norm_tokens: int
    chosen_norm_bytes: int
    gold: Optional[int] = None
    correct: Optional[dict[str, bool]] = None


@dataclass
class Classification:
    """Which label continues a text (``{"text": T, "labels": [...]}``).

    label_logprobs: log P(label | text) per label (one-token labels: the next token's
                    log-prob; longer ones: the continuation's sum)
    probs:          those renormalised over the labels (they sum to 1)
    label:          the index of the best label (ties: the lowest)
    labels:         the labels as given
    """

    label_logprobs: list[float]
    probs: list[float]
    label: int
    labels: list[str] = field(default_factory=list)


@dataclass
class NextTokens:
    """The next token after a chat (``estream score`` on ``{"messages": [...]}``): the
    distribution an LLM judge reads.

    ids:      int32 [top], the best next tokens, best first (ties: the lower id)
    logprobs: float32 [top], their log-probs
    n_tokens: the rendered prompt's tokens
    """

    ids: np.ndarray
    logprobs: np.ndarray
    n_tokens: int


@dataclass
class Rerank:
    """How relevant each document is to a query (``{"query", "documents"}``).

    scores:  per document, P(yes) / (P(yes) + P(no)) after the rerank prompt (double)
    ranking: the documents' indexes by decreasing score (ties: the lower index first)
    """

    scores: list[float]
    ranking: list[int]


@dataclass
class Perplexity:
    """``estream ppl``'s result (llama-perplexity's convention).

    ppl: exp(nll); nll: mean negative log-likelihood in nats; n_scored: predictions scored;
    chunks: chunks of ctx tokens evaluated; n_tokens: the text's tokens (BOS included)
    """

    ppl: float
    nll: float
    n_scored: int
    chunks: int
    ctx: int
    n_tokens: int
