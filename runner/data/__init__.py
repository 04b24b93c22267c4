"""Dataset tools: a synthetic ImageFolder set, the layout DALI's file reader sees, decode checks, caches and
shards."""
