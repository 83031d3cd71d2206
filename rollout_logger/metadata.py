"""What the rollout logger writes and the board reads, agreed in one place: the keys of a line and the names of a run
folder's files. Plain Python, so the board imports it without torch or TRL (`rl_board` reads lines by it; the logger
writes them by it)."""

import re

# Every key a line of the logger can have, in their order.
LINE_KEYS = (
    "prompt",
    "images",
    "response",
    "response_tokens",
    "tool_mask",
    "logprobs",
    "sampler_logprobs",
    "sampler_kept_logmass",
    "is_ratio",
    "ref_logprobs",
    "entropies",
    "reward",
    "rewards_per_func",
    "advantage",
    "group_id",
    "truncated",
    "rank",
    "step",
    "micro_batch",
    "loss_passes",
    "turns",
    "stop_reason",
)
# An agent's trajectory, turn by turn (`turns`, a list in order; other trainers' formats convert into it too): each
# turn {"role": "system" | "user" | "assistant" | "tool" | "environment", "text": the turn's text} and, where they
# apply: "token_start", "token_end" (the turn's span in `response_tokens`, end exclusive; only the turns inside the
# response: what the policy sampled, and the tool results a trainer put between them), "tool_calls" ([{"name",
# "arguments" (a JSON object, or the text as written when it is not valid JSON), "id"}], on the assistant turn that
# makes them), "tool_name", "tool_call_id" and "error" (a tool's turn: the tool that answered, and its error message
# when it failed; its result is the text), "images" (the turn's images, entries as a line's `images`: a tool that
# returned an image, a prompt message that shows one), "reward" and "advantage" (a format's per-turn values). `stop_reason` says
# why the trajectory ended: "stop" (the policy ended it), "length" (cut at the token limit), "tool_limit" (the most
# tool calls allowed), "error", or the trainer's own word.
TURN_ROLES = ("system", "user", "assistant", "tool", "environment")
STOP_REASONS = ("stop", "length", "tool_limit", "error")
# A chat message's reasoning (reasoning_content: TRL's parse_response, OpenAI-compatible servers; reasoning: vLLM's
# newer name, rLLM's messages) is its turn's text's start, as chat templates write it: <think>\n...\n</think>\n.
REASONING_KEYS = ("reasoning_content", "reasoning")


# A message's text with the message's reasoning before it, the first of REASONING_KEYS that is a text.
def with_reasoning(message: dict, text: str) -> str:
    reasoning = next((message[key] for key in REASONING_KEYS if isinstance(message.get(key), str) and message[key]), None)
    return thought(reasoning) + text if reasoning else text


def thought(reasoning: str) -> str:
    return f"<think>\n{reasoning}\n</think>\n"


# The keys of the board's line format: the logger's and the others the board reads (docs/data-format.md). Any
# other key of a line is a field (a reward function's log_extra column, a reward's extras): one named like a format
# key is written as extra_<name>.
FORMAT_KEYS = frozenset(LINE_KEYS + ("ref_response", "ref_reward", "valid_reward", "ref_valid_reward", "ground_truth", "values", "token_rewards", "policy_version"))
# An asynchronous trainer's sample says which policy sampled it: `policy_version`, an integer from 0, counted in the
# line's steps: the step whose policy (the weights that step trained) generated the response, the oldest where its
# generation spanned several. The sample's staleness is step - policy_version (0: on-policy); a synchronous trainer's
# lines need none.
# The per-token lists, one value per response token: the trainer's log-probabilities (`logprobs`, the forward pass
# the loss uses), the sampler's (`sampler_logprobs`: vLLM's, or `generate`'s from the distribution it sampled from,
# after temperature, top-k and top-p), the importance-sampling weight the trainer applied for their difference
# (`is_ratio`, e.g. TRL's vLLM correction, after its truncation or masking), the reference model's, and entropies.
# `sampler_kept_logmass`: where the sampler truncated the distribution (top-k, top-p, min-p, typical, epsilon, eta),
# the log of the probability mass, under the distribution before truncation (after temperature), that the truncation
# kept at the token's position (0 where it cut nothing; absent where the sampler truncated nothing, or cannot say):
# `sampler_logprobs` is the truncated distribution's, log p(x) - log M, so logprobs - sampler_logprobs is log M plus
# the numeric drift between sampler and trainer.
PER_TOKEN_KEYS = ("logprobs", "sampler_logprobs", "is_ratio", "ref_logprobs", "entropies")
PER_TOKEN_KEYS += ("sampler_kept_logmass",)
# The run's metadata (META_FILE) names the sampler and the importance-sampling correction the trainer applied:
# {"sampler": {"engine": "vllm" | "transformers", "temperature", "top_k", "top_p", "min_p"},
#  "importance_sampling": {"mode": "token_truncate" | "token_mask" | "sequence_truncate" | "sequence_mask",
#                          "clip_min", "clip_max"} (absent: none applied)}
SAMPLER_META_KEY = "sampler"
IMPORTANCE_SAMPLING_META_KEY = "importance_sampling"
# What each loss pass over a sample did with it (`loss_passes`, one object per pass, in order): the optimizer step and
# micro-batch of the pass ({"step", "micro_batch"}), and per response token (null at tokens a tool wrote):
# `policy_ratio`, the ratio π_θ/π_old the loss clipped (absent when the pass ran on-policy: ratio 1 by construction);
# `clipped`, -1 where PPO's lower clip, +1 where its upper clip zeroed the token's gradient (TRL's clip_ratio/*: ratio
# below 1 - ε_low with a negative advantage, above 1 + ε_high with a positive one), else 0; `entropy_mask`, 1 where
# the entropy mask (`top_entropy_quantile`) kept the token, 0 where it dropped it (absent without one); and
# `update_weight`, -∂loss/∂logp of the token in the pass's loss: the weight of the token's log-prob gradient in the
# update (advantage, ratio, clipping, masks, importance weight and the loss type's normalisation, plus the KL pull).
LOSS_PASS_TOKEN_KEYS = ("policy_ratio", "clipped", "entropy_mask", "update_weight")
# The run's metadata names the loss's clipping: {"loss": {"epsilon_low", "epsilon_high", "delta",
# "importance_sampling_level": "token" | "sequence", "top_entropy_quantile"}} (with the top-level `loss_type`).
LOSS_META_KEY = "loss"

# Where a run's folder goes by default: <the trainer's output_dir>/rollout_samples/<the run's name>.
ROLLOUTS_FOLDER = "rollout_samples"
# A rank's lines: rollout_data_rank_<rank>_<launch id>.jsonl; the launch id orders a resumed run's launches.
RANK_FILE = "rollout_data_rank_{rank}_{launch}.jsonl"
RANK_FILE_PATTERN = re.compile(r"_rank_(\d+)_(.+)\.jsonl$")
# Beside each rank file, its lines' summaries as the board indexes them (the rank file's name + SUMMARIES_SUFFIX), so
# that the board opens a run without parsing its lines (rl_board/reading/summaries.py writes and reads them; the
# logger writes them on its writing thread when the board's reading layer imports: msgspec, pysimdjson and google-re2
# installed).
# Append-only: SUMMARIES_MAGIC, then records, each a little-endian uint32 payload length, the payload's uint32 CRC-32
# (zlib.crc32) and the payload (MessagePack). The first record is the header: {"format": SUMMARIES_FORMAT,
# "summary_format": the board's summary version (rl_board.reading.lines.SUMMARY_FORMAT), "numbers": its summary
# numbers' names, "data_file": the rank file's name}. Each record after it covers one batch of whole lines, written
# after the batch's lines, in file order from byte 0: {"start", "end" (the batch's byte range), "physical_lines",
# "line_index", "offset", "length" (int64 arrays as bytes), "step_hint" (float64), "good" (uint8), "step" (int64),
# "numbers" {name: float64 bytes} (a number absent: NaN on every line), "texts" {name: [str | None]}, "fields"
# {name: float64 bytes, or [str | None] for a text/ field: the batch's first 256 names}, "more_fields" {name: [rows
# (int64 bytes), values as in "fields", one a row]: the names after them, absent in files written before it},
# "problems" [[row, kind, text]], "texts_offset", "texts_length" (int64 bytes: where each line's texts are in the texts
# file, -1 for a line that has none there)}.
# A record cut short at the end (a crash while writing it) is ignored; the lines past the last whole record are read
# from the rank file.
SUMMARIES_SUFFIX = ".summaries"
# Beside them, the texts file (the rank file's name + TEXTS_SUFFIX), written before each batch's record: for each line
# that the board's fast decoder reads, a JSON object of the keys a step's tables show (prompt, response, step,
# ref_response, ground_truth, images: their JSON as in the line, byte for byte) and a newline. A step's texts are then
# together, so that the board reads a step in view with one small read a rank file instead of its lines' per-token
# lists (on object storage: about 300 kB a step of 128 samples, against 6 MB).
TEXTS_SUFFIX = ".texts"
SUMMARIES_MAGIC = b"RLBSUMS\n"
SUMMARIES_FORMAT = 1
# The run's settings, written once per launch.
META_FILE = "rollout_meta_{launch}.json"
META_FILES = "rollout_meta*.json"
# The trainer's own logged numbers (rank 0), one event a line.
METRICS_FILE = "rollout_metrics_{launch}.jsonl"
METRICS_FILES = "rollout_metrics_*.jsonl"
# The prompts' images, named by their content's hash; a line lists them as {"path": "images/<hash>.<png|jpg>", ...}.
IMAGES_FOLDER = "images"
# A URL's user and password (https://user:password@host/...): neither side keeps them where it writes or shows a URL.
# A password may hold "/" (AWS's secret keys do) and "@": it runs to the last "@" of the URL.
URL_USER_INFO = re.compile(r"(?<=://)(?:[^/@\s:\"']+:[^\s\"']*|[^/@\s\"']+)@")
