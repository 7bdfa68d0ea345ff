"""The runtime every OpenTinker service stands on.

- `core`: settings, structlog logging, the gRPC server bootstrap (health, reflection, metrics,
  signals), Redis keys and the embedded redis-server, channel pools, memory and torch-thread
  limits.
- `jobplan`: a JobSpec resolved once into a plan of plain values, every default applied (the
  one table of defaults, shown in docs/job_spec.md); the Scheduler checks specs with it, the
  Coordinator drives jobs by it, the Trainer and Rollout read the defaults their APIs share.
- `auth`: API keys (salted hashes in Redis), the API-key interceptor, per-job tokens,
  tenant-confined paths.
- `edge`: the one service edge every servicer stands on: `DomainError`, its mapping onto the
  wire, the servicer base, per-RPC job-token declarations, the lease and its fencing guard.
- `workers`: a worker's registration and heartbeats with the Scheduler, its devices, the
  attempts it follows and the idle state it reaps.
- `ml`: the torch library of the Trainer and Rollout (tokenizer, models, chat rendering,
  logprobs, weight packages, checkpoints); the only part that imports torch.
- `games`: the built-in games and the game registry.

Services import this package and `opentinker_api`/`opentinker_env`; never the SDK (`opentinker`)
and never one another. Nothing here imports a service.
"""

__version__ = "0.1.0"
