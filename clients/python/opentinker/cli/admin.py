"""`opentinker admin ...`: mint the service key, manage tenants, quotas and API keys.

    opentinker admin new-key                       # a fresh key (offline), e.g. for OPENTINKER_API_KEY
    opentinker admin tenants create acme --max-devices 4 --max-concurrent-jobs 2
    opentinker admin tenants list
    opentinker admin quota acme --max-queued-jobs 100
    opentinker admin keys create acme [--admin] [--description ci]
    opentinker admin keys list acme
    opentinker admin keys revoke <key id>

Calls carry the caller's key (OPENTINKER_API_KEY, OPENTINKER_API_KEY_FILE, or the local stack's
.opentinker/admin.key). A new key's secret is printed once, on stdout, and stored nowhere else.
"""

from __future__ import annotations

import argparse
import json
import sys

import grpc
from google.protobuf import json_format

from opentinker.api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker.api.scheduler.v1 import tenant_pb2
from opentinker.client.channels import keyed_channel
from opentinker.client.credentials import resolve_api_key
from opentinker.core.auth import new_api_key

EXIT_REFUSED = 4


def register(commands: argparse._SubParsersAction) -> None:
    admin = commands.add_parser("admin", help="service key, tenants, quotas and API keys")
    actions = admin.add_subparsers(dest="admin_action", required=True, metavar="ACTION")
    actions.add_parser("new-key", help="print a fresh API key (offline)").set_defaults(handler=cmd_new_key)

    tenants = actions.add_parser("tenants", help="create or list tenants").add_subparsers(
        dest="tenants_action", required=True, metavar="ACTION")
    create = tenants.add_parser("create", help="create a tenant and print its first key")
    create.add_argument("tenant_id")
    create.add_argument("--display-name", default="")
    _add_quota_flags(create)
    create.set_defaults(handler=cmd_tenant_create)
    tenants.add_parser("list", help="every tenant with its quota and usage").set_defaults(handler=cmd_tenant_list)

    quota = actions.add_parser("quota", help="set a tenant's quota (0 = unlimited)")
    quota.add_argument("tenant_id")
    _add_quota_flags(quota)
    quota.set_defaults(handler=cmd_quota)

    keys = actions.add_parser("keys", help="create, list or revoke API keys").add_subparsers(
        dest="keys_action", required=True, metavar="ACTION")
    key_create = keys.add_parser("create", help="mint a key for a tenant and print it once")
    key_create.add_argument("tenant_id")
    key_create.add_argument("--admin", action="store_true", help="an admin key (manages tenants, runs workers)")
    key_create.add_argument("--description", default="")
    key_create.set_defaults(handler=cmd_key_create)
    key_list = keys.add_parser("list", help="a tenant's keys (public parts)")
    key_list.add_argument("tenant_id")
    key_list.set_defaults(handler=cmd_key_list)
    revoke = keys.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")
    revoke.set_defaults(handler=cmd_key_revoke)
    for parser in (create, tenants.choices["list"], quota, key_create, key_list, revoke):
        parser.add_argument("--scheduler", default="127.0.0.1:50051", help="scheduler address (default %(default)s)")


def _add_quota_flags(parser: argparse.ArgumentParser) -> None:
    for name in ("max-devices", "max-concurrent-jobs", "max-queued-jobs"):
        parser.add_argument(f"--{name}", type=int, default=0, metavar="N", help="0 = unlimited (default)")


def _quota(args: argparse.Namespace) -> tenant_pb2.Quota:
    return tenant_pb2.Quota(max_devices=args.max_devices, max_concurrent_jobs=args.max_concurrent_jobs,
                            max_queued_jobs=args.max_queued_jobs)


def _call(args: argparse.Namespace, method: str, request):  # noqa: ANN001, ANN202
    with keyed_channel(args.scheduler, resolve_api_key()) as channel:
        return getattr(pb_grpc.SchedulerServiceStub(channel), method)(request, timeout=30)


def _print(message) -> None:  # noqa: ANN001
    print(json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True), indent=2))


def handle(args: argparse.Namespace) -> int:
    try:
        return args.handler(args)
    except grpc.RpcError as error:
        print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
        return EXIT_REFUSED


def cmd_new_key(args: argparse.Namespace) -> int:
    print(new_api_key())
    return 0


def cmd_tenant_create(args: argparse.Namespace) -> int:
    response = _call(args, "CreateTenant", pb.CreateTenantRequest(
        tenant_id=args.tenant_id, display_name=args.display_name, quota=_quota(args)))
    print(f"tenant {response.tenant.tenant_id} created; its API key (shown only now):", file=sys.stderr)
    print(response.api_key_secret)
    return 0


def cmd_tenant_list(args: argparse.Namespace) -> int:
    _print(_call(args, "ListTenants", pb.ListTenantsRequest(page_size=1000)))
    return 0


def cmd_quota(args: argparse.Namespace) -> int:
    _print(_call(args, "UpdateTenantQuota", pb.UpdateTenantQuotaRequest(tenant_id=args.tenant_id,
                                                                         quota=_quota(args))).tenant)
    return 0


def cmd_key_create(args: argparse.Namespace) -> int:
    response = _call(args, "CreateApiKey", pb.CreateApiKeyRequest(
        tenant_id=args.tenant_id, admin=args.admin, description=args.description))
    print(f"key {response.api_key.key_id} for tenant {args.tenant_id} (shown only now):", file=sys.stderr)
    print(response.secret)
    return 0


def cmd_key_list(args: argparse.Namespace) -> int:
    _print(_call(args, "ListApiKeys", pb.ListApiKeysRequest(tenant_id=args.tenant_id, page_size=1000)))
    return 0


def cmd_key_revoke(args: argparse.Namespace) -> int:
    _print(_call(args, "RevokeApiKey", pb.RevokeApiKeyRequest(key_id=args.key_id)).api_key)
    return 0
