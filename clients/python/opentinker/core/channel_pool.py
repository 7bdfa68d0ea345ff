"""One shared gRPC channel per remote address, dialled on first use and closed together.

The Rollout's episodes call EnvHosts and Coordinators, the Coordinator's matches call
EnvHosts; every caller that talks to the same address shares one channel.
"""

from __future__ import annotations

import grpc

from opentinker.core.auth_interceptor import authenticated_channel


class ChannelPool:
    """One aio channel per address (sending `api_key` on every call), closed together."""

    def __init__(self, api_key: str = "") -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._api_key = api_key

    def channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = authenticated_channel(address, self._api_key)
        return self._channels[address]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
