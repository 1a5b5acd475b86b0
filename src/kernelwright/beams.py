"""Beam search for kernelwright.generate (both paths: generate.py and seq2seq.py), as
transformers' `model.generate(num_beams=K, do_sample=False)` gives it.

Each input row runs as K rows of the plans' batch (row b's beams at b*K .. b*K + K-1),
its prompt repeated. Each step, on the host: the logits' log-softmax through the logits
processors, plus each beam's running score, give the scores of all K x vocab
continuations of a row; the best max(2, 1 + end ids) x K of them are kept (enough that K
remain running when the best end), those that hit a stopping criterion (an end id, the
length, the caller's) join the finished hypotheses (their score divided by their new
tokens to the `length_penalty`), the best K others run on. The KV cache follows its
beams: `reorder(parents)` makes each cache row b*K + j the row of its beam's parent
(decoding.reorder_cache: a plan of its own, so the greedy and sampling plans are the
ones they were). A row is done where no running beam can beat its worst finished one
(transformers' heuristic, by `early_stopping`), or, with early_stopping=True, once it
has K finished; the search ends when every row is done or at the length. The result
is each row's best `num_return_sequences` finished hypotheses, best first, padded to
the longest with transformers' fill id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .decoding import Options, Sampling

NEG = -1.0e9  # transformers' score of a hypothesis that may not be chosen


@dataclass
class Beams:
    """transformers' beam search options under its names: `num_beams` hypotheses per
    input row (1: no beam search), the `length_penalty` exponent of a finished
    hypothesis' length, `early_stopping` (True: a row ends with K finished hypotheses;
    False: when the heuristic says the running ones cannot do better; "never": the same,
    with the length at its maximum for a positive length_penalty) and
    `num_return_sequences` per input row (at most num_beams)."""

    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1

    def check(self, sampling: Sampling, options: Options) -> None:
        """A ValueError for options beam search does not take."""
        if not isinstance(self.num_beams, int) or self.num_beams < 1:
            raise ValueError(f"num_beams must be a positive int, got {self.num_beams!r}")
        if not isinstance(self.num_return_sequences, int) or not (
                1 <= self.num_return_sequences <= self.num_beams):
            raise ValueError(f"num_return_sequences must be an int from 1 to num_beams "
                             f"({self.num_beams}), got {self.num_return_sequences!r}")
        if self.early_stopping not in (True, False, "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', got "
                             f"{self.early_stopping!r}")
        if self.num_beams > 1 and sampling.do_sample:
            raise ValueError("beam search with sampling (do_sample=True, num_beams > 1) is not "
                             "supported: pass do_sample=False or num_beams=1")
        if self.num_beams > 1 and options.streamer is not None:
            raise ValueError("a streamer cannot follow beam search (as in transformers): pass "
                             "num_beams=1")

    def expand(self, t: torch.Tensor) -> torch.Tensor:
        """`t` [B, ...] with each row repeated num_beams times: [B * num_beams, ...]."""
        return t.repeat_interleave(self.num_beams, 0) if self.num_beams > 1 else t


def _gather(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """t[b, index[b, j], ...] for each row b: [B, n, ...]."""
    index = index.view(*index.shape, *([1] * (t.dim() - 2)))
    return torch.take_along_dim(t, index, dim=1)


def beam_search(ids: torch.Tensor, prefill: Callable[[], torch.Tensor],
                step: Callable[[torch.Tensor, int], torch.Tensor],
                reorder: Callable[[torch.Tensor], None], new: int, beams: Beams,
                options: Options, eos: list[int], pad: int | None,
                pads: torch.Tensor | None = None) -> torch.Tensor:
    """Beam search over up to `new` tokens after `ids` [B * K, L] (each input row
    repeated K = beams.num_beams times); returns [B * num_return_sequences, L + n] ids.
    `prefill()` runs the prompts and returns their logits [B * K, vocab]; `reorder(
    parents [B * K])` makes each cache row the one of `parents` (an index into the
    batch); `step(tokens [B * K, 1], i)` runs the i-th token after the prompt and
    returns the next logits. `options`' processors see each beam's ids so far (`pads`:
    each row's left padding), its criteria the kept continuations' ids."""
    k = beams.num_beams
    rows, length = ids.shape
    batch, total = rows // k, length + new
    keep = max(2, 1 + len(eos)) * k  # continuations kept a step
    fill = (pad or eos[0]) if eos else -1  # transformers' output fill
    processors = options.processors(length, eos, pads)
    criteria = options.criteria()
    eos_ids = torch.tensor(eos, dtype=torch.long)

    running = torch.full((batch, k, total), fill, dtype=torch.long)
    running[:, :, :length] = ids.view(batch, k, length)
    finished = running.clone()
    # only the first beam of a row counts at first: the others would repeat its tokens
    running_scores = torch.zeros(batch, k)
    running_scores[:, 1:] = NEG
    finished_scores = torch.full((batch, k), NEG)
    # each new token's beam (b * K + j) at its step: -1 where there is none
    running_parents = torch.full((batch, k, new), -1, dtype=torch.long)
    finished_parents = running_parents.clone()
    is_finished = torch.zeros(batch, k, dtype=torch.bool)
    improvable = torch.ones(batch, 1, dtype=torch.bool)
    first_k = torch.arange(keep) < k
    offsets = torch.arange(batch).view(batch, 1) * k

    logits = prefill()
    for cur in range(length, total):
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        if processors is not None:
            log_probs = processors(running[:, :, :cur].reshape(rows, cur), log_probs)
        vocab = log_probs.shape[-1]
        scores = (log_probs.view(batch, k, vocab) + running_scores[:, :, None]).view(batch, -1)
        top_scores, top = torch.topk(scores, keep)
        beam = top // vocab
        top_seqs = _gather(running, beam)
        top_seqs[:, :, cur] = top % vocab
        top_parents = _gather(running_parents, beam)
        top_parents[:, :, cur - length] = beam + offsets

        # which continuations end here: the length, an end id, the caller's criteria
        hit = torch.full((batch, keep), cur + 1 >= total)
        if eos:
            hit |= torch.isin(top_seqs[:, :, cur], eos_ids)
        if criteria is not None:
            hit |= criteria(top_seqs[:, :, :cur + 1].reshape(batch * keep, cur + 1),
                            None).view(batch, keep)

        # the best K that did not end run on
        live = top_scores + hit.to(torch.float32) * NEG
        chosen = torch.topk(live, k).indices
        running = _gather(top_seqs, chosen)
        running_scores = _gather(live, chosen)
        running_parents = _gather(top_parents, chosen)

        # those of the best K that ended join the finished ones, if good enough
        ended = hit & first_k[None, :]
        penalised = top_scores / ((cur + 1 - length) ** beams.length_penalty)
        full = is_finished.all(-1, keepdim=True) & (beams.early_stopping is True)
        penalised += full.to(torch.float32) * NEG
        penalised += (~improvable).to(torch.float32) * NEG
        penalised += (~ended) * NEG
        best = torch.topk(torch.cat((finished_scores, penalised), 1), k).indices
        finished = _gather(torch.cat((finished, top_seqs), 1), best)
        finished_scores = _gather(torch.cat((finished_scores, penalised), 1), best)
        finished_parents = _gather(torch.cat((finished_parents, top_parents), 1), best)
        is_finished = _gather(torch.cat((is_finished, ended), 1), best)

        improvable &= _may_improve(running_scores, finished_scores, is_finished,
                                   cur + 1 - length, new, beams)
        if not (bool(improvable.any()) and not (bool(is_finished.all())
                                                and beams.early_stopping is True)
                and not bool(hit.all())):
            break
        parents = running_parents[:, :, cur - length].reshape(rows)
        if not torch.equal(parents, torch.arange(rows)):
            reorder(parents)
        logits = step(running[:, :, cur].reshape(rows, 1), cur - length)

    r = beams.num_return_sequences
    out = finished[:, :r].reshape(batch * r, total)
    made = int((finished_parents[:, :r] >= 0).sum(-1).max())
    return out[:, :length + made]


def _may_improve(running_scores: torch.Tensor, finished_scores: torch.Tensor,
                 is_finished: torch.Tensor, made: int, new: int, beams: Beams) -> torch.Tensor:
    """[B, 1]: whether a row's best running beam may still beat its worst finished one
    (any where fewer than K finished), its score taken at `made` new tokens (at `new`
    with early_stopping "never" and a positive length penalty): transformers'
    heuristic."""
    if beams.early_stopping == "never" and beams.length_penalty > 0.0:
        made = new
    best = running_scores[:, :1] / (made ** beams.length_penalty)
    worst = torch.where(is_finished, finished_scores.min(1, keepdim=True).values, NEG)
    return (best > worst).any(-1, keepdim=True)
