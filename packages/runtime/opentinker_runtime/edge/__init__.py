"""The service edge: the one way a servicer meets the wire.

- `errors`: `DomainError`, the one base of every error a service answers a call with (a status
  code name, an ErrorReason name, a field path, a message). No grpc: domain code raises it.
- `lease`: `LeaseContext` (the lease a call presents) and `FencingGuard` (a lower fencing token
  than a job's highest is stale). No grpc.
- `status`: the one mapping of a DomainError onto the wire (status, trailing metadata, the
  in-stream ErrorDetail).
- `job_token`: the per-RPC declaration of which job a call acts on, and the check of its token.
- `handlers`: `servicer_base`, the one base of every servicer: each RPC it defines runs
  declaration -> job-token check -> method, its DomainErrors mapped, unary or streaming alike.
- `convert`: protobuf <-> LeaseContext.

A servicer method is convert -> call the domain -> convert; nothing in it catches or aborts.
Import the modules directly (this package imports nothing, so domain code stays grpc-free).
"""
