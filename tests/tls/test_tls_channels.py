"""OPENTINKER_TLS: a service's port over TLS (and mutual TLS), its calls to its peers over TLS,
and the clients (SDK, health probe) dialling it with the stack's CA; plaintext and certificates
of another CA are refused. Real gRPC over real sockets, certificates made by openssl."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from opentinker.cli.health_probe import check_health
from opentinker.client import SchedulerClient
from opentinker.client.errors import Unimplemented
from opentinker.client.tls import CA_ENV, CERT_ENV, KEY_ENV, ClientTls
from opentinker_runtime.auth import tls as runtime_tls
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.core.errors import SettingsError
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_runtime.core.settings import ServiceSettings, load_settings, port_setting, setting
from opentinker_runtime.core.tls_files import TlsFiles
from tests.tls._certs import Certs, make_certs

pytestmark = pytest.mark.timeout(60)


@dataclass(frozen=True, kw_only=True)
class TlsSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_TLSTEST_"
    port: int = port_setting(0)
    auth: str = setting("disabled", "Off: these tests are about TLS.", choices=("api_keys", "disabled"),
                        env="OPENTINKER_AUTH")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(autouse=True)
def plaintext_afterwards(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A server start sets how the process dials its peers; the next test starts from plaintext."""
    for name in (CA_ENV, CERT_ENV, KEY_ENV):
        monkeypatch.delenv(name, raising=False)
    yield
    runtime_tls.use_for_channels(TlsFiles())


def settings(certs: Certs, mode: str) -> TlsSettings:
    return TlsSettings(tls=mode, tls_cert_file=str(certs.server_cert), tls_key_file=str(certs.server_key),
                       tls_ca_file=str(certs.ca))


async def health(channel: grpc.aio.Channel) -> str:
    async with channel:
        response = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


async def refused(channel: grpc.aio.Channel) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await health(channel)
    return caught.value.code()


def tls_channel(address: str, ca: Path, cert: Path | None = None, key: Path | None = None) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(), private_key=key.read_bytes() if key else None,
        certificate_chain=cert.read_bytes() if cert else None)
    return grpc.aio.secure_channel(address, credentials)


def test_a_tls_port_serves_callers_with_the_stacks_ca_and_refuses_plaintext_and_other_cas(
        certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        started = await start_server(settings(certs, "on"), ServerPlan(services=[]))
        address = f"127.0.0.1:{started.port}"
        try:
            assert await health(tls_channel(address, certs.ca)) == "SERVING"
            assert await refused(grpc.aio.insecure_channel(address)) == grpc.StatusCode.UNAVAILABLE
            rogue_ca = certs.rogue_cert.parent / "rogue-ca.pem"
            assert await refused(tls_channel(address, rogue_ca)) == grpc.StatusCode.UNAVAILABLE
            # the service's own calls to its peers go over TLS with the same CA
            assert runtime_tls.channels_tls().mode == "on"
            assert await health(authenticated_channel(address)) == "SERVING"
            # the clients: the health probe and the SDK read the CA from the environment or an argument
            monkeypatch.setenv(CA_ENV, str(certs.ca))
            assert await asyncio.to_thread(check_health, address) == "SERVING"
            monkeypatch.delenv(CA_ENV)
            assert await asyncio.to_thread(check_health, address) == "UNREACHABLE"
            with SchedulerClient(address, api_key="", tls=ClientTls(ca_file=str(certs.ca)), timeout=5) as client:
                with pytest.raises(Unimplemented):  # the handshake worked: there is no Scheduler here
                    await asyncio.to_thread(client.get_job, "job-x")
        finally:
            await stop_server(started, grace_seconds=1)

    asyncio.run(scenario())


def test_mutual_tls_wants_a_client_certificate_the_stacks_ca_signed(certs: Certs) -> None:
    async def scenario() -> None:
        started = await start_server(settings(certs, "mutual"), ServerPlan(services=[]))
        address = f"127.0.0.1:{started.port}"
        try:
            assert await refused(tls_channel(address, certs.ca)) == grpc.StatusCode.UNAVAILABLE  # no certificate
            assert await refused(tls_channel(address, certs.ca, certs.rogue_cert, certs.rogue_key)) == \
                grpc.StatusCode.UNAVAILABLE                                                       # another CA's
            assert await health(tls_channel(address, certs.ca, certs.client_cert, certs.client_key)) == "SERVING"
            assert await health(authenticated_channel(address)) == "SERVING"  # a service presents its own
        finally:
            await stop_server(started, grace_seconds=1)

    asyncio.run(scenario())


def test_tls_settings_name_what_is_missing_or_unreadable(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(TlsSettings, {"OPENTINKER_TLS": "on", "OPENTINKER_TLS_CA_FILE": str(certs.ca)})
    assert "OPENTINKER_TLS_CERT_FILE" in str(caught.value) and "OPENTINKER_TLS_KEY_FILE" in str(caught.value)
    with pytest.raises(SettingsError) as caught:
        load_settings(TlsSettings, {"OPENTINKER_TLS": "mutual", "OPENTINKER_TLS_CA_FILE": str(tmp_path / "nope.pem"),
                                    "OPENTINKER_TLS_CERT_FILE": str(certs.server_cert),
                                    "OPENTINKER_TLS_KEY_FILE": str(certs.server_key)})
    assert "OPENTINKER_TLS_CA_FILE" in str(caught.value) and "cannot read" in str(caught.value)
    with pytest.raises(SettingsError):
        load_settings(TlsSettings, {"OPENTINKER_TLS": "yes"})
    assert load_settings(TlsSettings, {}).tls == "off"  # plaintext unless asked
    with pytest.raises(ValueError, match="key"):
        ClientTls(ca_file=str(certs.ca), cert_file=str(certs.client_cert))
