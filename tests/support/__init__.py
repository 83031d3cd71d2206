"""What the tests of every layer share; the tests themselves are in folders by layer: reading/ (the engine, rl_board,
without a page), page/ (the page in Streamlit's AppTest), browser/ (the page served by start.sh, in Chromium),
logger/ (rollout_logger in a real GRPOTrainer), project/ (set-up and the import layers).

- runs.py: rollout lines and run folders written for a test (`sample`, `write_lines`), opened as the page opens them.
- page.py: the page in AppTest: start it on a root, Load & View, find a widget, a chart's spec, the batch table.
- browser.py: the board served by start.sh on a free port, Chromium, and what a test reads of a drawn chart.
- s3_server.py: a moto S3 server for the session, and helpers to fill buckets.
- other_trainers.py: byte-exact writers of verl's, OpenRLHF's and a verl fork's files.
- prime_rl_nemo_rl.py: prime-rl's token exports and traces, NeMo-RL's train_data_step files, by their own writing code.
- trl_completions_run.py: TRL's own completion parquet from a tiny offline GRPOTrainer run.
- vision_tool_runs.py: a vision-language run with good and hostile image files, and a tool-use run.
- unprivileged.py: code run as a process that may not read a file made unreadable (root without its override).
- logger_runs.py, logger_tool_runs.py: one tiny model per session, GRPO runs with the logger, exact re-scoring.
- logger_two_ranks.py: one rank of the two-process run (torchrun runs it as a script).
- progress_bars_app.py: a page of progress bars (AppTest runs it as a page).
- worker_faults.py: a worker task that kills its own process once (worker processes import it by name).
- threads.py: a server's turn held by another thread, as another session's work holds it.
"""

from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
ARTIFACTS = PROJECT / "tests" / "artifacts"
FIXTURES = PROJECT / "tests" / "fixtures"
SAMPLES = PROJECT / "rollout_samples"  # the bundled runs
