"""What checking a job token costs a worker: per call, with the in-process cache and without.

    python bench/job_tokens.py [--calls 20000] [--jobs 8]

Starts a private redis-server, writes `--jobs` job records the way the Scheduler's START script
does (nonce, SHA-256 of the token, the attempt's fencing tokens), then times
`JobTokenVerifier.verify` for the calls a worker serves during training (the same job, token and
fencing token every step): once with the default cache (a Redis read only when an entry is new
or expired) and once with the cache off (a Redis read per call), plus a bare Redis PING for
scale. Prints a summary table; no absolute time is asserted anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from opentinker_runtime.core.embedded_redis import EmbeddedRedis
from opentinker_runtime.auth.job_tokens import (FENCING_FIELD, HASH_FIELD, NONCE_FIELD, JobTokenVerifier, derive_job_token,
                                        hash_job_token, job_token_key, new_nonce)
from opentinker_runtime.core.redis_store import Keys, connect


async def write_jobs(client, count: int) -> list[tuple[str, str, int]]:  # noqa: ANN001 - a redis client
    """(job_id, token, fencing token) of `count` RUNNING jobs stored as START stores them."""
    key, jobs = job_token_key("otk_bench"), []
    for index in range(count):
        job_id, nonce, fencing = f"job-bench-{index}", new_nonce(), 100 + index
        token = derive_job_token(key, job_id, nonce)
        await client.hset(Keys().job(job_id), mapping={"state": "RUNNING", NONCE_FIELD: nonce,
                                                       HASH_FIELD: hash_job_token(token), FENCING_FIELD: str(fencing)})
        jobs.append((job_id, token, fencing))
    return jobs


async def time_calls(verify, jobs: list[tuple[str, str, int]], calls: int) -> list[float]:  # noqa: ANN001
    """Microseconds per verification, round-robin over the jobs."""
    samples = []
    for index in range(calls):
        job_id, token, fencing = jobs[index % len(jobs)]
        start = time.perf_counter()
        verdict = await verify(job_id, token, fencing)
        samples.append((time.perf_counter() - start) * 1e6)
        assert verdict.allowed
    return samples


async def time_pings(client, calls: int) -> list[float]:  # noqa: ANN001
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await client.ping()
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def row(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    return f"| {name} | {len(samples)} | {statistics.median(samples):.1f} | {p99:.1f} |"


async def main(calls: int, jobs: int) -> None:
    with EmbeddedRedis(port=0, appendonly=False) as server:
        client = connect(server.url)
        try:
            records = await write_jobs(client, jobs)
            cached = await time_calls(JobTokenVerifier(client).verify, records, calls)
            uncached = await time_calls(JobTokenVerifier(client, ttl_seconds=0).verify, records, calls)
            pings = await time_pings(client, calls)
        finally:
            await client.aclose()
    print(f"job token verification, {jobs} jobs, {calls} calls each (microseconds per call)\n")
    print("| what | calls | median us | p99 us |\n|---|---:|---:|---:|")
    for name, samples in (("verify, cached (default, 5 s)", cached), ("verify, cache off (one HMGET)", uncached),
                          ("Redis PING round trip", pings)):
        print(row(name, samples))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=8)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.calls, arguments.jobs))
