"""Sweeps: a grid of children frozen in a folder, run on this machine or as SLURM jobs, resumed, landed on the
parent run as they finish.

- grid: the axes of key=a,b overrides and their combinations, each child validated
- plan: the sweep folder (sweep.json, each child's frozen experiment, log, exit record, checkpoints)
- start: starting and resuming a sweep
- local, slurm: the launchers; drive: running or following children to their end; table: the live table
- status: where each child stands; landing: the grouped result on the parent run; child: a child's own hooks
"""
