"""Who may call what: API keys and their store (`api_keys`), the interceptor that checks them on
every RPC (`interceptor`), per-job tokens (`job_tokens`, `job_credentials`; each RPC's check is
`opentinker_runtime.edge.job_token`) and paths confined to one tenant (`tenant_paths`). Import
the modules directly.
"""
