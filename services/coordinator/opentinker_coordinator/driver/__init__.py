"""The job driver: plans read from a job's spec, the agent pipeline that runs RL steps (a
single-agent job is a league of one agent), SFT and inference drivers, and the domain ports they
drive the other services through.
"""
