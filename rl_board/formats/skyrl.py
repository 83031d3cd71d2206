"""SkyRL's evaluation dumps: with trainer.dump_eval_results (on by default) evaluate() and evaluate_step_wise()
(skyrl/train/evaluate.py of NovaSky-AI/SkyRL @ a9564572eb8e91076be43c1bd5e4615e3de17265; skyrl-agent's trainer does the
same) call dump_per_dataset_eval_results (skyrl/train/utils/trainer_utils.py), which writes
<trainer.export_path>/dumped_evals/global_step_<N>_evals/ (eval_only/ for an evaluation outside training): one
<data_source>.jsonl per data source ("/" replaced by "_", "unknown" for none), opened with "w", a line per generated
sample: input_prompt (the prompt's token ids decoded, special tokens and chat template kept), output_response (the
response's ids decoded), score (the sample's reward: a number, or a list of per-token rewards), stop_reason (the
engine's: stop, length, ...; null when the generator gave none), env_class, env_extras (the dataset row's extras:
data_source, reward_spec, ...) and data_source; then aggregated_results.jsonl, one line of the evaluation's metrics
(eval/<source>/avg_score, pass_at_<n>, ...). A step-wise evaluation dumps every step of a trajectory as its own line.

Its training dumps (trainer.dump_data_batch: dumped_data/global_step_<N>_training_input.pkl, the TrainingInputBatch
pickled by TensorBatch.save, skyrl/backends/skyrl_train/training_batch.py) are pickles: never opened (unpickling runs
code from the file); each is named in the load report, to be converted where it was written (docs/formats.md, Pickled
dumps).

A line becomes a board line, line for line (the load report's line numbers are the file's): prompt input_prompt,
response output_response, reward score (a per-token score: its sum, as SkyRL's avg_score counts it, with the list as
token_rewards), stop_reason as it is (length: truncated), ground_truth env_extras' reward_spec.ground_truth (SkyRL's
datasets' answer), step N from the folder's name (eval_only: 0), text/data_source the facet; the samples of one
prompt in one folder (the same input_prompt: eval_n_samples_per_prompt of them) a group, so that eval_only's and
global_step_0_evals' (eval_before_train), both step 0, stay apart; env_class, env_extras kept as fields, and eval_dump
the folder's name. aggregated_results.jsonl is not samples: a note names it. Opened at dumped_evals/, at the export
path holding it, or at one global_step_<N>_evals/ (or dumped_evals/eval_only/) alone."""
import json
import re

from rl_board.formats.agent_turns import encoded, finite
from rl_board.formats.base import UTF8_BOM, Folder, RunFormat, RunLayout, group_of_prompt, json_object, parent_and_name
from rl_board.reading.storage import FileStatus, joined, list_folder

EVALS_FOLDER = "dumped_evals"


DATA_FOLDER = "dumped_data"


STEP_FOLDER = re.compile(r"global_step_(\d+)_evals|eval_only")


AGGREGATED = "aggregated_results.jsonl"


PICKLE = re.compile(r".*\.pkl")


NAME = "SkyRL evaluation dumps (dumped_evals/global_step_<N>_evals/<data_source>.jsonl)"


# SkyRL's keys as the board's.
KEYS = {"input_prompt": "prompt", "output_response": "response", "stop_reason": "stop_reason"}


# trainer.export_path holds dumped_evals/ and dumped_data/ (and the trainer's checkpoints, ckpts/, when not elsewhere):
# a folder with either is one run, those two folders its; dumped_evals/ opened alone is the run too.
LAYOUT = RunLayout(folders=frozenset({EVALS_FOLDER, DATA_FOLDER}), named=frozenset({EVALS_FOLDER}), parts=re.compile(f"{EVALS_FOLDER}|{DATA_FOLDER}|{STEP_FOLDER.pattern}"))


def recognise(folder: Folder) -> tuple[dict[str, FileStatus], RunFormat] | None:
    run_dir = folder.run_dir.rstrip("/")
    parent, name = parent_and_name(run_dir)
    if name == EVALS_FOLDER:
        evals, names = run_dir, folder.folders
    elif is_step_folder(parent, name) and folder.jsonl:
        evals, names = parent, {name}
    elif folder.folders & {EVALS_FOLDER, DATA_FOLDER}:
        evals = joined(run_dir, EVALS_FOLDER)
        names = {entry.name for entry in list_folder(evals) if entry.is_dir} if EVALS_FOLDER in folder.folders else set()
    else:
        return None
    sources, contexts, problems = {}, {}, []
    for name in sorted(names, key=step_of):
        if not STEP_FOLDER.fullmatch(name):
            continue
        for entry in list_folder(joined(evals, name)):
            if entry.is_dir or not entry.name.endswith(".jsonl"):
                continue
            if entry.name == AGGREGATED:
                problems.append((f"{name}/{entry.name}", 0, "note", "SkyRL's aggregated evaluation metrics (one line), not samples: not read"))
                continue
            sources[entry.path] = entry.status
            contexts[entry.path] = (f"{name}_{entry.name}", [step_of(name), name])
    if DATA_FOLDER in folder.folders:
        for entry in list_folder(joined(run_dir, DATA_FOLDER)):
            if not entry.is_dir and PICKLE.fullmatch(entry.name):
                problems.append((f"{DATA_FOLDER}/{entry.name}", 0, "not read", "a pickle (SkyRL's training batch): unpickling runs code from the file, so the board never "
                                 "opens it; convert it where it was written (docs/formats.md, Pickled dumps)"))
    return sources, RunFormat(NAME, dump_lines, (), tuple(problems), file_contexts=contexts)


# One evaluation's folder opened alone: global_step_<N>_evals, or eval_only inside dumped_evals/ (a name too plain to
# take anywhere).
def is_step_folder(parent: str, name: str) -> bool:
    return bool(STEP_FOLDER.fullmatch(name)) and (name != "eval_only" or parent_and_name(parent.rstrip("/"))[1] == EVALS_FOLDER)


# A step folder's step: global_step_<N>_evals is N, eval_only 0.
def step_of(name: str) -> int:
    match = STEP_FOLDER.fullmatch(name)
    return int(match.group(1)) if match and match.group(1) else 0


# A <data_source>.jsonl as the board's lines, line for line (a line that is not a JSON object stays as it is: a bad
# line at its number, or the incomplete last line of a file being written).
def dump_lines(data: bytes, context: tuple) -> bytes:
    ((step, folder_name),) = context
    return b"\n".join(dump_line(line, step, folder_name) for line in data.removeprefix(UTF8_BOM).split(b"\n"))


def dump_line(line: bytes, step: int, folder_name: str) -> bytes:
    fields = json_object(line)
    if fields is None:
        return line
    board = {KEYS.get(key, key): value for key, value in fields.items() if key != "score"}
    score = fields.get("score")
    if isinstance(score, list):
        board["token_rewards"] = score
        scores = [finite(value) for value in score]
        board["reward"] = sum(scores) if scores and None not in scores else None
    else:
        board["reward"] = finite(score)
    if isinstance(fields.get("stop_reason"), str):
        board["truncated"] = fields["stop_reason"] == "length"
    extras = fields.get("env_extras")
    reward_spec = extras.get("reward_spec") if isinstance(extras, dict) else None
    if isinstance(reward_spec, dict) and reward_spec.get("ground_truth") is not None:
        board["ground_truth"] = reward_spec["ground_truth"]
    prompt = board.get("prompt")
    group = group_of_prompt(prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True))
    board |= {"step": step, "group_id": f"{folder_name}:{group}", "eval_dump": folder_name}
    return encoded(board)  # a lone surrogate (half an emoji) escaped, not a whole file lost
