"""The sampler's log-probs of the tokens transformers' `generate` samples, recorded while it samples them."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch
import transformers
from transformers import LogitsProcessor, LogitsProcessorList

# The method of a transformers model that builds `generate`'s logits processors, and the parameter the logger reads.
LOGITS_PROCESSORS_METHOD = "_get_logits_processor"
GENERATION_CONFIG_PARAMETER = "generation_config"


class SampledTokenLogprobs(LogitsProcessor):
    r"""
    Called after all of `generate`'s logits processors, with the scores `generate` samples each next token from
    (after temperature, top-k, top-p, min-p and the model's other processors), it records the log-prob of each sampled
    token under them. It keeps a single step's log-softmax (batch × vocabulary) until its next call, whose `input_ids`
    end with the token sampled from it; [`~SampledTokenLogprobs.logprobs`] adds the last step's token after
    generation. The scores pass through unchanged.
    """

    def __init__(self):
        self._prompt_length: int | None = None
        self._input_ids: torch.Tensor | None = None  # the last call's: the prompts and every sampled token but the last
        self._log_softmax: torch.Tensor | None = None  # the last call's
        self._columns: list[torch.Tensor] = []  # per step but the last, each row's sampled token's log-prob

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._log_softmax is None:
            self._prompt_length = input_ids.size(1)
        else:
            self._columns.append(self._log_softmax.gather(1, input_ids[:, -1:]))
        self._input_ids = input_ids
        self._log_softmax = torch.log_softmax(scores, dim=-1)
        return scores

    def logprobs(self, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor | None:
        """The log-probs of `completion_ids` (rows of sampled tokens, padded) where `completion_mask` is set, in a
        tensor of their shape (0 past the steps sampled); None unless those are the tokens this processor saw sampled,
        row for row."""
        if self._log_softmax is None or completion_ids.size(0) != self._log_softmax.size(0):
            return None
        sampled = self._input_ids[:, self._prompt_length :]  # every step's token but the last one's
        steps, width = sampled.size(1) + 1, completion_ids.size(1)
        seen = min(steps - 1, width)
        mask = completion_mask[:, :seen]
        if completion_mask[:, steps:].any() or not torch.equal(sampled[:, :seen][mask], completion_ids[:, :seen][mask]):
            return None
        columns = self._columns[:width]
        if steps <= width:
            columns.append(self._log_softmax.gather(1, completion_ids[:, steps - 1 : steps]))
        logprobs = torch.cat(columns, dim=1)
        return torch.nn.functional.pad(logprobs, (0, width - logprobs.size(1)))


class ProcessorsThenRecorder(LogitsProcessorList):
    r"""
    `generate`'s logits processors, then a [`SampledTokenLogprobs`] on the scores they return. The recorder is called
    by the list, not as one of its processors, which transformers inspects at every step: it costs only its own work.
    """

    def __init__(self, processors: LogitsProcessorList, recorder: SampledTokenLogprobs):
        super().__init__(processors)
        self.recorder = recorder

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.FloatTensor:
        return self.recorder(input_ids, super().__call__(input_ids, scores, **kwargs))


class GenerateLogprobs:
    r"""
    Records the sampler's log-probs of each token a model's `generate` samples, during a block
    ([`~GenerateLogprobs.recording`]): it wraps the model instance's `_get_logits_processor` (the class is left
    untouched) so that a [`SampledTokenLogprobs`] follows the processors of each sampling `generate` call. Processors
    given to `generate` come before temperature and the other warpers; this one comes after them all.

    Args:
        model ([`~transformers.PreTrainedModel`]):
            A model of the class that will generate; raises a `RuntimeError` if its `generate` does not build its
            processors as this class expects.
    """

    def __init__(self, model):
        method = getattr(model, LOGITS_PROCESSORS_METHOD, None)
        if method is None or GENERATION_CONFIG_PARAMETER not in inspect.signature(method).parameters:
            raise RuntimeError(
                f"RolloutLoggerCallback cannot record the sampler's log-probs: {type(model).__name__} (transformers "
                f"{transformers.__version__}) has no `{LOGITS_PROCESSORS_METHOD}` taking "
                f"`{GENERATION_CONFIG_PARAMETER}`; pass sampler_logprobs=False to log without them."
            )
        self._recorders: list[SampledTokenLogprobs] = []

    @contextlib.contextmanager
    def recording(self, model) -> Iterator[None]:
        """While the block runs, each sampling `generate` call of `model` records its tokens' log-probs (of the
        calls before, none are kept)."""
        self._recorders = []
        own = vars(model).get(LOGITS_PROCESSORS_METHOD)  # an instance's own wrapper (a profiler's), kept below ours
        get_logits_processor = getattr(model, LOGITS_PROCESSORS_METHOD)
        signature = inspect.signature(get_logits_processor)

        def with_recorder(*args, **kwargs):
            processors = get_logits_processor(*args, **kwargs)
            if not signature.bind(*args, **kwargs).arguments[GENERATION_CONFIG_PARAMETER].do_sample:
                return processors
            self._recorders.append(SampledTokenLogprobs())
            return ProcessorsThenRecorder(processors, self._recorders[-1])

        setattr(model, LOGITS_PROCESSORS_METHOD, with_recorder)
        try:
            yield
        finally:
            if own is None:
                delattr(model, LOGITS_PROCESSORS_METHOD)  # the class's method again
            else:
                setattr(model, LOGITS_PROCESSORS_METHOD, own)

    def logprobs(self, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> tuple[torch.Tensor | None, str]:
        """The last recording's log-probs of the completions, a tensor of `completion_ids`'s shape, or None and why
        not: the recording must have seen exactly one sampling `generate` call, which sampled these tokens."""
        recorders, self._recorders = self._recorders, []
        if len(recorders) != 1:
            return None, f"{len(recorders)} sampling `generate` calls for one generation batch, not 1"
        logprobs = recorders[0].logprobs(completion_ids, completion_mask.bool())
        if logprobs is None:
            return None, "the tokens `generate` sampled are not TRL's completions, row for row"
        return logprobs, ""
