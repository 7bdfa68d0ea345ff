"""Shared gRPC channels per remote address, dialled on first use and closed together.

The Rollout's episodes call EnvHosts and Coordinators, the Coordinator's matches call EnvHosts;
every caller that talks to the same address shares one channel. Two kinds per address:
`channel` sends the service's own key with every call (for the stack's own peers, and calls no
job makes: an admin chose the address), `job_channel` sends no key at all: a job's calls add the
job's token and id themselves (`job_tokens.job_call_metadata`), so an address a tenant chose (its
own EnvHost) never receives more than the job's own credential.
"""

from __future__ import annotations

import grpc

from opentinker_runtime.auth.channels import authenticated_channel


class ChannelPool:
    """One aio channel per (address, kind), closed together."""

    def __init__(self, api_key: str = "") -> None:
        self._channels: dict[tuple[str, bool], grpc.aio.Channel] = {}
        self._api_key = api_key

    def channel(self, address: str) -> grpc.aio.Channel:
        """A channel sending the service's key on every call."""
        return self._get(address, with_key=True)

    def job_channel(self, address: str) -> grpc.aio.Channel:
        """A channel sending no key: for a job's calls, which carry only the job's token."""
        return self._get(address, with_key=False)

    def _get(self, address: str, *, with_key: bool) -> grpc.aio.Channel:
        if (address, with_key) not in self._channels:
            self._channels[(address, with_key)] = authenticated_channel(address, self._api_key if with_key else "")
        return self._channels[(address, with_key)]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
