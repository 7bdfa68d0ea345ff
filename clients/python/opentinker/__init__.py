"""OpenTinker: agentic reinforcement learning as a service.

The package holds the generated gRPC API (`opentinker.api`), the core shared by
every service (`opentinker.core`) and the `opentinker` CLI. It never imports
torch, so a laptop without it can submit and watch jobs.
"""

__version__ = "0.1.0"
