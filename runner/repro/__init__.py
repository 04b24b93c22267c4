"""Experiments that travel between machines: read runs back from a store, export and reproduce them,
compare them, sweep a grid of them. The commands are in runner/commands/{reproduce,export,compare,sweep}.py.
"""
