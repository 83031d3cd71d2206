"""The reading layer: from a run folder's files to the snapshot the page draws (see rl_board's map)."""
