"""The messages rank 0 broadcasts to a learner group's followers (the first item of each)."""

STEP, STOP, SAVE_SHARDS, LOAD_SHARDS = "step", "stop", "save_shards", "load_shards"
