"""RPC fuzzing against a live stack: `rpcs` (the runner), `strategies` (what is generated),
`oracle` (what is acceptable), `targets` (the admin pass's fixtures) and `tenant` (the tenant pass)."""
