"""Which folders under a root are runs (list_runs, rl_board.list_runs, the sidebar's run list): a trainer's output
folder is one run, never its sub-folders (prime-rl's run folder with its token_exports/, rollouts/, logs/, ...;
NeMo-RL's log_dir with its tensorboard/, wandb/; TRL's output folder with completions/, checkpoint-*, runs/), and a
root of several runs lists each once, whatever its format; the same on object storage. The folders are written by
tests/support/prime_rl_nemo_rl.py (the trainers' own writing code) and the other trainers' writers."""

import json
import shutil

import rl_board
from rl_board.formats import FORMATS, TRAINER_OUTPUT, board_jsonl, nemo_rl, openrlhf, prime_rl, trl, wandb_tables
from rl_board.formats.base import RunLayout
from rl_board.reading.store import list_runs
from tests.support import SAMPLES
from tests.support.other_trainers import write_openrlhf_rank_files
from tests.support.prime_rl_nemo_rl import (
    nemo_rl_logger_folders,
    nemo_rl_run,
    prime_rl_run,
    prime_rl_run_folder,
)
from tests.support.runs import sample, write_lines
from tests.support.s3_server import make_bucket, s3_server, upload_folder  # noqa: F401  (s3_server: a fixture)
from tests.support.wandb_runs import write_wandb

PRIME_RL_FOLDERS = {"token_exports", "rollouts", "logs", "configs", "checkpoints", "broadcasts", "evals"}


# A prime-rl run folder (output_dir / run.name) as the trainer, orchestrator and launcher leave it after two steps.
def prime_run(run_dir, tokenizer, seed=0):
    prime_rl_run(run_dir, tokenizer, steps=(1, 2), ranks=1, seed=seed)
    prime_rl_run_folder(run_dir, steps=(1, 2))
    assert {path.name for path in run_dir.iterdir() if path.is_dir()} == PRIME_RL_FOLDERS  # what the listing sees
    return run_dir


# A NeMo-RL log_dir (logs/exp_<NNN>) after two steps, with its loggers' folders.
def nemo_run(log_dir, tokenizer, seed=0):
    nemo_rl_logger_folders(nemo_rl_run(log_dir, tokenizer, steps=2, val_steps=(0,), seed=seed))
    assert {path.name for path in log_dir.iterdir() if path.is_dir()} == {"tensorboard", "wandb", "mlflow"}
    return log_dir


def board_run(run_dir):
    return write_lines(run_dir / "rollout_data_rank_0_20260101T000000Z.jsonl", [sample(1), sample(2)]).parent


def formats(root) -> dict[str, str]:
    return {path: rl_board.open_run(path).format for path in rl_board.list_runs(root)}


# ------------------------------------------------------------------------------------------------------ prime-rl


def test_a_root_holding_one_prime_rl_run_folder_lists_that_folder(tmp_path, tokenizer):
    prime_run(tmp_path / "outputs" / "math--qwen3--1a2b3c4d", tokenizer)
    assert list_runs(str(tmp_path / "outputs")) == ["math--qwen3--1a2b3c4d"]
    assert formats(tmp_path / "outputs") == {str(tmp_path / "outputs" / "math--qwen3--1a2b3c4d"): prime_rl.NAME}


def test_a_prime_rl_run_folder_as_the_root_is_one_run_not_its_sub_folders(tmp_path, tokenizer):
    """The run folder itself is the one run (its token_exports/, rollouts/, logs/, checkpoints/... are not listed),
    with metrics.jsonl beside them or without; its token_exports/ opened as the root is the run too."""
    run_dir = prime_run(tmp_path / "run", tokenizer)
    assert list_runs(str(run_dir)) == ["."]
    assert rl_board.list_runs(run_dir) == [str(run_dir)]
    run = rl_board.open_run(rl_board.list_runs(run_dir)[0])
    assert run.format == prime_rl.NAME and run.steps == [1, 2]
    (run_dir / "metrics.jsonl").unlink()  # no file monitor: nothing but folders in the run folder
    assert list_runs(str(run_dir)) == ["."]
    assert list_runs(str(run_dir / "token_exports")) == ["."]  # not its step_<n>/ folders
    assert formats(run_dir / "token_exports") == {str(run_dir / "token_exports"): prime_rl.NAME}


def test_a_root_of_two_prime_rl_runs_and_a_board_run_lists_each_once(tmp_path, tokenizer):
    root = tmp_path / "outputs"
    prime_run(root / "run-a", tokenizer, seed=0)
    prime_run(root / "run-b", tokenizer, seed=1)
    board_run(root / "logger-run")
    assert list_runs(str(root)) == ["logger-run", "run-a", "run-b"]
    assert formats(root) == {str(root / "run-a"): prime_rl.NAME, str(root / "run-b"): prime_rl.NAME, str(root / "logger-run"): board_jsonl.LOGGER_NAME}


# ------------------------------------------------------------------------------------------------------- NeMo-RL


def test_a_root_holding_one_nemo_rl_log_dir_lists_that_folder(tmp_path, tokenizer):
    nemo_run(tmp_path / "logs" / "exp_001", tokenizer)
    assert list_runs(str(tmp_path / "logs")) == ["exp_001"]
    assert formats(tmp_path / "logs") == {str(tmp_path / "logs" / "exp_001"): nemo_rl.NAME}


def test_a_nemo_rl_log_dir_as_the_root_is_one_run_not_its_loggers_folders(tmp_path, tokenizer):
    """The log_dir is the one run (tensorboard/, wandb/, mlflow/ are not listed), from its first validation file on."""
    log_dir = nemo_run(tmp_path / "exp_001", tokenizer)
    assert list_runs(str(log_dir)) == ["."]
    run = rl_board.open_run(rl_board.list_runs(log_dir)[0])
    assert run.format == nemo_rl.NAME and run.steps == [0, 1, 2]
    for path in log_dir.glob("train_data_step*.jsonl"):  # validation at step 0 comes before the first training step
        path.unlink()
    assert list_runs(str(log_dir)) == ["."]
    assert rl_board.open_run(rl_board.list_runs(log_dir)[0]).steps == [0]


def test_a_root_of_two_nemo_rl_log_dirs_and_a_board_run_lists_each_once(tmp_path, tokenizer):
    root = tmp_path / "logs"
    nemo_run(root / "exp_001", tokenizer, seed=0)
    nemo_run(root / "exp_002", tokenizer, seed=1)
    board_run(root / "logger-run")
    assert list_runs(str(root)) == ["exp_001", "exp_002", "logger-run"]
    assert formats(root) == {str(root / "exp_001"): nemo_rl.NAME, str(root / "exp_002"): nemo_rl.NAME, str(root / "logger-run"): board_jsonl.LOGGER_NAME}


# ------------------------------------------------------------------------------------------ the other trainers


def test_a_trl_output_folder_with_tensorboard_runs_and_checkpoints_is_one_run(tmp_path):
    """TRL's output folder: completions/, checkpoint-* and the Trainer's TensorBoard runs/<date>_<host>/ are the run's;
    a folder with only the Trainer's history (checkpoint-*/trainer_state.json) is one run too."""
    output = shutil.copytree(SAMPLES / "from_trl_log_completions", tmp_path / "trl")
    (output / "runs" / "Jan01_00-00-00_host").mkdir(parents=True)
    (output / "runs" / "Jan01_00-00-00_host" / "events.out.tfevents.1700000000.host").write_bytes(b"")
    assert {path.name for path in output.iterdir() if path.is_dir()} >= {"completions", "runs", "checkpoint-3"}
    assert list_runs(str(output)) == ["."]
    assert formats(output) == {str(output): trl.NAME}
    shutil.rmtree(output / "completions")
    assert list_runs(str(output)) == ["."]  # the history alone


def test_a_trainer_output_folder_lists_the_logger_s_runs_inside_its_rollout_samples(tmp_path):
    """rollout_logger writes to <output_dir>/rollout_samples/<run>: pointed at the output folder, the board lists each
    run inside as rollout_samples/<run>, which opens; beside the Trainer's own history (the output folder, "."). A
    run that is itself named rollout_samples (its rank files inside) stays one run."""
    output = tmp_path / "output"
    board_run(output / "rollout_samples" / "b")
    board_run(output / "rollout_samples" / "a")
    board_run(output / "other")
    assert list_runs(str(output)) == ["other", "rollout_samples/a", "rollout_samples/b"]
    assert len(rl_board.open_run(output / "rollout_samples/a").samples) == len(rl_board.open_run(output / "rollout_samples" / "a").samples) > 0
    shutil.copytree(SAMPLES / "from_trl_log_completions" / "checkpoint-3", output / "checkpoint-3")
    assert list_runs(str(output)) == [".", "other", "rollout_samples/a", "rollout_samples/b"]
    board_run(tmp_path / "root" / "rollout_samples")
    (tmp_path / "root" / "rollout_samples" / "images").mkdir()
    assert list_runs(str(tmp_path / "root")) == ["rollout_samples"]


def test_openrlhf_rank_file_folders_are_runs_of_their_own(tmp_path):
    write_openrlhf_rank_files(tmp_path / "a", steps=1)
    write_openrlhf_rank_files(tmp_path / "b", steps=1)
    assert list_runs(str(tmp_path)) == ["a", "b"] and list_runs(str(tmp_path / "a")) == ["."]
    assert set(formats(tmp_path).values()) == {openrlhf.NAME}


def test_a_root_of_runs_named_like_a_trainer_s_folders_lists_them_all(tmp_path):
    """The names a layout leaves out are left out only inside a run: a root that is not a run lists every sub-folder
    (but for the names that make a folder a run: token_exports/, completions/), and a board run in the root keeps its
    other sub-folders listed."""
    names = ["checkpoint-1", "checkpoints", "logs", "rollouts", "runs", "tensorboard", "token_exports_old", "wandb"]
    for name in names:
        board_run(tmp_path / "root" / name)
    assert list_runs(str(tmp_path / "root")) == names
    write_lines(tmp_path / "root" / "rollout_data_rank_0.jsonl", [sample(1)])  # the root is a run now
    assert list_runs(str(tmp_path / "root")) == ["."] + [name for name in names if name not in ("checkpoint-1", "runs")]


def test_a_wandb_folder_lists_each_run_folder_with_its_format(tmp_path):
    """W&B's wandb/ folder: each offline-run-* (or synced run-*) folder is a run of its own, latest-run (W&B's link to
    the newest) too; a run folder's files/, logs/ and tmp/ are its own, never runs."""
    run_folder = write_wandb(tmp_path / "out", "write_bare")
    board_run(run_folder.parent / "logger-run")
    assert list_runs(str(run_folder.parent)) == ["latest-run", "logger-run", run_folder.name]
    assert list_runs(str(run_folder)) == ["."]
    assert formats(run_folder.parent) == {
        str(run_folder.parent / "latest-run"): wandb_tables.NAME,
        str(run_folder.parent / "logger-run"): board_jsonl.LOGGER_NAME,
        str(run_folder): wandb_tables.NAME,
    }


def test_every_format_says_which_folders_are_its_runs():
    """The registry's formats each have a layout, and the registry's answer is theirs: a prime-rl layout takes a folder
    holding token_exports/ and leaves every sub-folder to it."""
    assert all(isinstance(module.LAYOUT, RunLayout) for module in FORMATS)
    assert prime_rl.LAYOUT.holds("logs") and nemo_rl.LAYOUT.holds("wandb") and trl.LAYOUT.holds("completions")
    assert TRAINER_OUTPUT.holds("checkpoint-12") and not board_jsonl.LAYOUT.holds("nested")
    assert wandb_tables.LAYOUT.holds("files") and not wandb_tables.LAYOUT.holds("media")


# -------------------------------------------------------------------------------------------- object storage


def test_runs_on_object_storage_are_listed_as_on_disk(tmp_path, tokenizer, s3_server):  # noqa: F811
    """On S3 (one listing of the root, nothing read): a root of two prime-rl runs, a NeMo-RL log_dir and a board run
    lists each once; a prime-rl run folder, its token_exports/ and a NeMo-RL log_dir are each one run."""
    root = tmp_path / "outputs"
    prime_run(root / "run-a", tokenizer, seed=0)
    prime_run(root / "run-b", tokenizer, seed=1)
    nemo_run(root / "exp_001", tokenizer)
    board_run(root / "logger-run")
    bucket = make_bucket(s3_server.endpoint_url, "run-discovery")
    upload_folder(s3_server.endpoint_url, root, f"s3://{bucket}/outputs")
    url = f"s3://{bucket}/outputs"
    assert list_runs(url) == list_runs(str(root)) == ["exp_001", "logger-run", "run-a", "run-b"]
    for run in ("run-a", "run-a/token_exports", "exp_001", "logger-run"):
        assert list_runs(f"{url}/{run}") == list_runs(str(root / run)) == ["."], run
    assert rl_board.list_runs(f"{url}/run-a") == [f"{url}/run-a"]
    remote, local = rl_board.open_run(f"{url}/run-a"), rl_board.open_run(root / "run-a")
    assert remote.format == prime_rl.NAME and remote.steps == local.steps == [1, 2]
    assert json.loads((root / "run-a" / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1  # beside token_exports/, not read
