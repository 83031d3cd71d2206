"""The sampler's log-probs of the tokens transformers' `generate` samples, recorded while it samples them."""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Iterator

import torch
import transformers
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation import logits_process
from transformers.generation.logits_process import LogitNormalization

# The method of a transformers model that builds `generate`'s logits processors, and the parameter the logger reads.
LOGITS_PROCESSORS_METHOD = "_get_logits_processor"
GENERATION_CONFIG_PARAMETER = "generation_config"
# The warpers that truncate the distribution `generate` samples from (top-k, top-p, min-p, typical, epsilon, eta;
# top-h where transformers has it): each only sets the scores of the tokens it drops to its `filter_value`, -inf
# (transformers' `generation/logits_process.py`), so a kept token's log-prob before them minus after them is the log
# of the probability mass they kept, the same at every kept token. `_get_logits_processor` appends them one after the
# other, after temperature; only a watermark or `renormalize_logits`' normalisation (a log-softmax, which changes no
# log-prob) follow them.
TRUNCATING_WARPERS = tuple(
    getattr(logits_process, name)
    for name in (
        "TopHLogitsWarper",
        "TopKLogitsWarper",
        "TopPLogitsWarper",
        "MinPLogitsWarper",
        "TypicalLogitsWarper",
        "EpsilonLogitsWarper",
        "EtaLogitsWarper",
    )
    if hasattr(logits_process, name)
)


class SampledTokenLogprobs(LogitsProcessor):
    r"""
    Called after all of `generate`'s logits processors, with the scores `generate` samples each next token from
    (after temperature, top-k, top-p, min-p and the model's other processors), it records the log-prob of each sampled
    token under them. It keeps a single step's log-softmax (batch × vocabulary) until its next call, whose `input_ids`
    end with the token sampled from it; [`~SampledTokenLogprobs.logprobs`] adds the last step's token after
    generation. The scores pass through unchanged.

    Where `generate` truncates the distribution (top-k, top-p...), [`~SampledTokenLogprobs.before_truncation`] is
    called with the scores before the truncating warpers, and likewise keeps one step's log-softmax of them until the
    token sampled from it is known: that token's log-prob before truncation, log p(x), minus the one it was sampled
    with, log p(x) - log M, is the log of the mass M the truncation kept at its position
    ([`~SampledTokenLogprobs.kept_logmass`]). That holds because the truncating warpers leave the scores of the tokens
    they keep as they are (they set the others to -inf): the two log-softmaxes differ by the same log M at every kept
    token, the sampled one included.
    """

    def __init__(self):
        self._prompt_length: int | None = None
        self._input_ids: torch.Tensor | None = None  # the last call's: the prompts and every sampled token but the last
        self._log_softmax: torch.Tensor | None = None  # the last call's
        self._columns: list[torch.Tensor] = []  # per step but the last, each row's sampled token's log-prob
        # The same of the scores before truncation, where `generate` truncates.
        self._untruncated: torch.Tensor | None = None
        self._untruncated_columns: list[torch.Tensor] = []
        self.truncation_problem = ""  # why the kept mass cannot be told where `generate` truncates

    def before_truncation(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> None:
        if self._untruncated is not None:
            self._untruncated_columns.append(self._untruncated.gather(1, input_ids[:, -1:]))
        self._untruncated = torch.log_softmax(scores, dim=-1)

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
        return _sampled_columns(self._columns, self._log_softmax, completion_ids)

    def kept_logmass(self, completion_ids: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor | None:
        """The log of the mass the truncation kept at each position of `completion_ids`, in a tensor of their shape (0
        past the steps sampled): their log-probs before truncation minus `logprobs`, those they were sampled with
        ([`~SampledTokenLogprobs.logprobs`], which found the tokens); None where nothing truncated."""
        if self._untruncated is None:
            return None
        return _sampled_columns(self._untruncated_columns, self._untruncated, completion_ids) - logprobs


def _sampled_columns(columns: list[torch.Tensor], last: torch.Tensor, completion_ids: torch.Tensor) -> torch.Tensor:
    """The per-step log-probs of the sampled tokens (`columns`, every step's but the last), with the last step's token's
    from its log-softmax (`last`), in a tensor of `completion_ids`'s shape (0 past the steps sampled)."""
    steps, width = len(columns) + 1, completion_ids.size(1)
    columns = columns[:width]
    if steps <= width:
        columns.append(last.gather(1, completion_ids[:, steps - 1 : steps]))
    logprobs = torch.cat(columns, dim=1)
    return torch.nn.functional.pad(logprobs, (0, width - logprobs.size(1)))


class ProcessorsThenRecorder(LogitsProcessorList):
    r"""
    `generate`'s logits processors, then a [`SampledTokenLogprobs`] on the scores they return. The recorder is called
    by the list, not as one of its processors, which transformers inspects at every step: it costs only its own work.
    Where the list truncates (top-k, top-p...), it is run in two parts, the processors before the truncating warpers
    and the rest, and the recorder also sees the scores between them ([`truncation_start`]).
    """

    def __init__(self, processors: LogitsProcessorList, recorder: SampledTokenLogprobs):
        super().__init__(processors)
        self.recorder = recorder
        # Another logger's list below ours (a second callback on the trainer): it runs the processors and records, and
        # this recorder reads what it saw.
        self._inner = processors if isinstance(processors, ProcessorsThenRecorder) else None
        start, recorder.truncation_problem = truncation_start(processors)
        self._parts = None if start is None or self._inner is not None else (LogitsProcessorList(self[:start]), LogitsProcessorList(self[start:]))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.FloatTensor:
        if self._inner is not None:
            scores = self._inner(input_ids, scores, **kwargs)
            if self._inner.recorder._untruncated is not None:  # its log-softmax before truncation: the same scores to a log-softmax
                self.recorder.before_truncation(input_ids, self._inner.recorder._untruncated)
            return self.recorder(input_ids, scores)
        if self._parts is None:
            return self.recorder(input_ids, super().__call__(input_ids, scores, **kwargs))
        before, truncating = self._parts
        scores = before(input_ids, scores, **kwargs)
        self.recorder.before_truncation(input_ids, scores)
        return self.recorder(input_ids, truncating(input_ids, scores, **kwargs))


def truncation_start(processors: list) -> tuple[int | None, str]:
    """Where the truncating warpers start in `processors`, or None where there is none, or (with a reason) where the
    mass they keep cannot be told from the log-probs before them and those sampled with: a processor after the first
    of them that changes log-probs (any but the truncating warpers and `renormalize_logits`' normalisation), or a
    warper that sets the tokens it drops to a finite score (a `filter_value` of its own)."""
    first = next((index for index, processor in enumerate(processors) if type(processor) in TRUNCATING_WARPERS), None)
    if first is None:
        return None, ""
    rest = processors[first:]
    others = [
        type(processor).__name__
        for processor in rest
        if type(processor) not in (*TRUNCATING_WARPERS, LogitNormalization)
    ]
    if others:
        return None, f"{', '.join(others)} after `generate`'s first truncating warper"
    finite = [
        type(processor).__name__
        for processor in rest
        if type(processor) in TRUNCATING_WARPERS and getattr(processor, "filter_value", None) != -math.inf
    ]
    if finite:
        return None, f"{', '.join(finite)} sets the tokens it drops to a finite score, not -inf"
    return first, ""


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
        method = getattr(type(model), LOGITS_PROCESSORS_METHOD, None)  # the class's: an instance's own wrapper passes its arguments on
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
        own = vars(model).get(LOGITS_PROCESSORS_METHOD)  # an instance's own wrapper (a profiler's, another logger's), kept below ours
        get_logits_processor = getattr(model, LOGITS_PROCESSORS_METHOD)
        # The arguments as the class's method names them: a wrapper below takes (*args, **kwargs) and passes them on.
        signature = inspect.signature(getattr(type(model), LOGITS_PROCESSORS_METHOD).__get__(model))

        @functools.wraps(get_logits_processor)
        def with_recorder(*args, **kwargs):
            processors = get_logits_processor(*args, **kwargs)
            try:
                sampling = signature.bind(*args, **kwargs).arguments[GENERATION_CONFIG_PARAMETER].do_sample
            except (TypeError, KeyError, AttributeError):  # called otherwise than generate calls it: not recorded
                return processors
            if not sampling:
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

    def logprobs(
        self, completion_ids: torch.Tensor, completion_mask: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, str]:
        """The last recording's log-probs of the completions and the log of the mass `generate`'s truncation (top-k,
        top-p...) kept at each of their positions, tensors of `completion_ids`'s shape, and a problem: without
        log-probs, why none (the recording must have seen exactly one sampling `generate` call, which sampled these
        tokens); with them, why no kept mass where `generate` truncated. The kept mass is None where nothing
        truncated."""
        recorders, self._recorders = self._recorders, []
        if len(recorders) != 1:
            return None, None, f"{len(recorders)} sampling `generate` calls for one generation batch, not 1"
        recorder = recorders[0]
        logprobs = recorder.logprobs(completion_ids, completion_mask.bool())
        if logprobs is None:
            return None, None, "the tokens `generate` sampled are not TRL's completions, row for row"
        return logprobs, recorder.kept_logmass(completion_ids, logprobs), recorder.truncation_problem
