"""Who may call what: API keys and their store (`api_keys`), the interceptor that checks them on
every RPC (`interceptor`), per-job tokens (`job_tokens`, `job_credentials`, `job_token_guard`) and
paths confined to one tenant (`tenant_paths`). Import the modules directly.
"""
