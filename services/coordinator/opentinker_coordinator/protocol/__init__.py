"""The Agent Protocol server: the matches this Coordinator hosts for multi-agent jobs, their
seats, turns and barriers, and the environments they are played in.
"""
