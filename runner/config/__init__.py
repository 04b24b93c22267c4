"""Experiment configuration: typed sections (sections), the YAML loader that fills them (load), the file
reader that maps key paths to lines (yamlfile), recipes' includes, what a run logs of its config (frozen)."""
