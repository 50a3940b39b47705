"""A report folder's files: results.jsonl, its lock, the environment block, benchmarks.json, shard merging."""
