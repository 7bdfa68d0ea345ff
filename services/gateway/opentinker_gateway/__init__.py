"""OpenTinker Gateway: the Tinker REST API over our services.

The real `tinker` SDK (and tinker-cookbook on top of it) speaks HTTP under `/api/v1/*`: a request
that does work answers at once with a future id, and the client long-polls `retrieve_future`.
The gateway turns those calls into gRPC calls on the Trainer and the Rollout:

- a training client (`create_model`) is a SESSION job of the caller's tenant, leased through the
  Scheduler (quotas, fair queue, job tokens and fencing apply); its model id is the job id;
- `forward_backward`/`forward`/`optim_step` run on that job's Trainer session in `seq_id` order;
- `save_weights_for_sampler` and sampling sessions are policies on the job's Rollout;
- checkpoints are named `tinker://<model id>/weights/<name>` (and `/sampler_weights/<name>`).

Layers: `http_app` (aiohttp, the wire format) -> domain (`runs`, `futures`, `sessions`, `losses`,
`datums`, `samplers`) -> adapters (`backend`: gRPC calls; `session_jobs`: the Scheduler).
"""
