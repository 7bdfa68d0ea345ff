"""`opentinker admin ...`: mint the service key, manage tenants, quotas and API keys.

    opentinker admin new-key                       # a fresh key (offline), e.g. for OPENTINKER_API_KEY
    opentinker admin tenants create acme --max-devices 4 --max-concurrent-jobs 2
    opentinker admin tenants list [--json]
    opentinker admin tenants get acme
    opentinker admin quota acme --max-queued-jobs 100
    opentinker admin keys create acme [--admin] [--description ci]
    opentinker admin keys list acme
    opentinker admin keys revoke <key id>

Calls carry the caller's key (OPENTINKER_API_KEY, OPENTINKER_API_KEY_FILE, or the local stack's
.opentinker/admin.key). A new key's secret is printed once, on stdout, and stored nowhere else.
"""

from __future__ import annotations

import argparse
import sys

from opentinker_api.scheduler.v1 import tenant_pb2
from opentinker.cli import exit_codes
from opentinker.cli.api import add_api_flags, message_json, print_json, scheduler_client
from opentinker.cli.table import format_table
from opentinker_api.conventions import new_api_key


def register(commands: argparse._SubParsersAction) -> None:
    admin = commands.add_parser("admin", help="service key, tenants, quotas and API keys")
    actions = admin.add_subparsers(dest="admin_action", required=True, metavar="ACTION")
    actions.add_parser("new-key", help="print a fresh API key (offline)").set_defaults(handler=cmd_new_key)

    tenants = actions.add_parser("tenants", help="create, list or show tenants").add_subparsers(
        dest="tenants_action", required=True, metavar="ACTION")
    create = tenants.add_parser("create", help="create a tenant and print its first key")
    create.add_argument("tenant_id")
    create.add_argument("--display-name", default="")
    _add_quota_flags(create)
    create.set_defaults(handler=cmd_tenant_create)
    tenants.add_parser("list", help="every tenant with its quota and usage").set_defaults(handler=cmd_tenant_list)
    get = tenants.add_parser("get", help="one tenant with its quota and usage")
    get.add_argument("tenant_id")
    get.set_defaults(handler=cmd_tenant_get)

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
    for parser in (create, key_create):
        add_api_flags(parser, json_output=False)
    for parser in (tenants.choices["list"], get, quota, key_list, revoke):
        add_api_flags(parser)


def _add_quota_flags(parser: argparse.ArgumentParser) -> None:
    for name in ("max-devices", "max-concurrent-jobs", "max-queued-jobs"):
        parser.add_argument(f"--{name}", type=int, default=0, metavar="N", help="0 = unlimited (default)")


def _quota(args: argparse.Namespace) -> dict[str, int]:
    return {"max_devices": args.max_devices, "max_concurrent_jobs": args.max_concurrent_jobs,
            "max_queued_jobs": args.max_queued_jobs}


def _limit(value: int) -> str:
    return str(value) if value else "-"


def _print_tenants(tenants: list[tenant_pb2.Tenant], as_json: bool) -> None:
    if as_json:
        print_json([message_json(tenant) for tenant in tenants])
        return
    rows = [(t.tenant_id, t.display_name, f"{t.usage.devices}/{_limit(t.quota.max_devices)}",
             f"{t.usage.running_jobs}/{_limit(t.quota.max_concurrent_jobs)}",
             f"{t.usage.queued_jobs}/{_limit(t.quota.max_queued_jobs)}") for t in tenants]
    print(format_table(("TENANT", "NAME", "DEVICES", "RUNNING JOBS", "QUEUED JOBS"), rows))


def _print_keys(keys: list[tenant_pb2.ApiKey], as_json: bool) -> None:
    if as_json:
        print_json([message_json(key) for key in keys])
        return
    rows = [(k.key_id, k.tenant_id, "yes" if k.admin else "no", "revoked" if k.HasField("revoke_time") else "active",
             k.description) for k in keys]
    print(format_table(("KEY", "TENANT", "ADMIN", "STATE", "DESCRIPTION"), rows))


def cmd_new_key(args: argparse.Namespace) -> int:
    print(new_api_key())
    return exit_codes.OK


def cmd_tenant_create(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        response = client.create_tenant(args.tenant_id, display_name=args.display_name, **_quota(args))
    print(f"tenant {response.tenant.tenant_id} created; its API key (shown only now):", file=sys.stderr)
    print(response.api_key_secret)
    return exit_codes.OK


def cmd_tenant_list(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        _print_tenants(list(client.list_tenants()), args.json)
    return exit_codes.OK


def cmd_tenant_get(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        _print_tenants([client.get_tenant(args.tenant_id)], args.json)
    return exit_codes.OK


def cmd_quota(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        _print_tenants([client.update_quota(args.tenant_id, **_quota(args))], args.json)
    return exit_codes.OK


def cmd_key_create(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        response = client.create_api_key(args.tenant_id, admin=args.admin, description=args.description)
    print(f"key {response.api_key.key_id} for tenant {args.tenant_id} (shown only now):", file=sys.stderr)
    print(response.secret)
    return exit_codes.OK


def cmd_key_list(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        _print_keys(list(client.list_api_keys(args.tenant_id)), args.json)
    return exit_codes.OK


def cmd_key_revoke(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        _print_keys([client.revoke_api_key(args.key_id)], args.json)
    return exit_codes.OK
