"""A worker process's life with the Scheduler: registration and heartbeats (`registration`), the
agent a driver uses to hold leases (`agent`), device detection (`devices`) and the upkeep of idle
state and attempts (`reaping`). Import the modules directly.
"""
