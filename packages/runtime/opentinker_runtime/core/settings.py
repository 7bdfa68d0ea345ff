"""Service settings: one frozen dataclass per service, read once from environment variables.

A service declares `class SchedulerSettings(ServiceSettings)` with `ENV_PREFIX =
"OPENTINKER_SCHEDULER_"`; every field is documented and constrained through `setting(...)`.
`load_settings` reads `ENV_PREFIX + FIELD.upper()` (or a field's shared `env` name), parses it by
the field's type, validates it and rejects unknown variables under the prefix (typo protection).
Tests build settings directly (`SchedulerSettings(port=0)`): the same validation runs.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import os
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, TypeVar
from urllib.parse import urlsplit

from opentinker_runtime.core.errors import SettingsError
from opentinker_runtime.core.redaction import mask_url_credentials
from opentinker_runtime.core.tls_files import TLS_MODES, TlsFiles

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "console")
SHARED_REDIS_URL_ENV = "OPENTINKER_REDIS_URL"
SHARED_AUTH_ENV = "OPENTINKER_AUTH"
SHARED_API_KEY_ENV = "OPENTINKER_API_KEY"
SHARED_REDIS_PASSWORD_FILE_ENV = "OPENTINKER_REDIS_PASSWORD_FILE"
SHARED_TLS_ENV = "OPENTINKER_TLS"
AUTH_MODES = ("api_keys", "disabled")
DEFAULT_REDIS_URL = "redis://127.0.0.1:6390/0"
BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
GRPC_TARGET_SCHEMES = ("dns:", "unix:", "unix-abstract:", "ipv4:", "ipv6:", "vsock:")

Check = Callable[[Any], "str | None"]
S = TypeVar("S", bound="ServiceSettings")


def setting(
    default: Any,
    doc: str,
    *,
    choices: Sequence[str] | None = None,
    min: float | None = None,  # noqa: A002 - reads naturally at the call site
    max: float | None = None,  # noqa: A002
    positive: bool = False,
    env: str | None = None,
    check: Check | None = None,
    type_name: str | None = None,
    secret: bool = False,
    optional: bool = False,
) -> Any:
    """Declare a documented settings field; the keyword arguments become validation rules.

    `env` replaces the prefixed variable name (shared settings); `check` returns a problem
    description or None; `type_name` is what docs/settings.md shows as the type. A `secret`
    may be empty (unset), is left out of repr() and shows as *** in logs and error messages; an
    `optional` string may be empty too (unset).
    """
    metadata = {"doc": doc, "choices": tuple(choices) if choices else None, "min": min,
                "max": max, "positive": positive, "env": env, "check": check,
                "type_name": type_name, "secret": secret, "optional": optional}
    return dataclasses.field(default=default, metadata=metadata, repr=not secret)


def check_address(value: str) -> str | None:
    """Accept a gRPC target: `host:port`, `[v6]:port` or a `dns:`/`unix:`/... URI."""
    if value.startswith(GRPC_TARGET_SCHEMES):
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        return "must be host:port with a port from 1 to 65535 (or a dns:/unix: gRPC target)"
    return None


def check_redis_url(value: str) -> str | None:
    """Accept `redis://[:password@]host[:port][/db]`, `rediss://...` or `unix:///path`."""
    parts = urlsplit(value)
    if parts.scheme == "unix":
        return None if parts.path else "a unix:// URL needs a socket path"
    if parts.scheme not in ("redis", "rediss"):
        return "must start with redis://, rediss:// or unix://"
    try:
        port_ok = parts.port is None or 1 <= parts.port <= 65535
    except ValueError:
        port_ok = False
    if not parts.hostname or not port_ok:
        return "must name a host and an optional port from 1 to 65535, e.g. redis://127.0.0.1:6390/0"
    return None


def check_api_key(value: str) -> str | None:
    """Accept an OpenTinker API key (`otk_<16 hex digits>_<43 characters>`) or nothing."""
    from opentinker_runtime.auth.api_keys import InvalidApiKey, parse_api_key  # auth imports redis; keep settings light

    if not value:
        return None
    try:
        parse_api_key(value)
    except InvalidApiKey as error:
        return f"{error}; create one with `opentinker admin new-key`"
    return None


def check_password_file(value: str) -> str | None:
    """Accept nothing, or a readable file holding a password on its first line."""
    if not value:
        return None
    try:
        password = read_password_file(value)
    except OSError as error:
        return f"cannot read the file: {error.strerror or error}"
    return None if password else "the file is empty; write the password into it"


def read_password_file(path: str) -> str:
    """The password in `path`: its text without the trailing newline(s) an editor or `echo` adds."""
    return Path(path).read_text().rstrip("\r\n")


def check_readable_file(value: str) -> str | None:
    """Accept nothing, or a file this process can read."""
    if not value:
        return None
    try:
        with open(value, "rb"):
            return None
    except OSError as error:
        return f"cannot read the file: {error.strerror or error}"


def tls_file_setting(what: str, env: str) -> Any:
    return setting("", what, env=env, check=check_readable_file, type_name="path", optional=True)


def port_setting(default: int) -> Any:
    """The `port` field with a service-specific default."""
    return setting(default, "TCP port the gRPC server listens on (0 picks a free port).",
                   min=0, max=65535)


def address_setting(default: str, doc: str) -> Any:
    """A peer address field (`host:port` or a gRPC target URI)."""
    return setting(default, doc, check=check_address, type_name="host:port")


def redis_url_setting(doc: str) -> Any:
    """The `redis_url` field, read from the shared OPENTINKER_REDIS_URL."""
    return setting(DEFAULT_REDIS_URL, doc, env=SHARED_REDIS_URL_ENV, check=check_redis_url,
                   type_name="redis URL")


@dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    """Settings every service has. Subclasses set ENV_PREFIX and override `port`."""

    ENV_PREFIX: ClassVar[str] = ""
    IGNORED_ENV_VARS: ClassVar[frozenset[str]] = frozenset()
    """Variables under ENV_PREFIX that belong to someone else (e.g. a client) and are not typos."""

    host: str = setting("127.0.0.1", "Address the gRPC server binds (0.0.0.0 for all interfaces).")
    port: int = port_setting(0)
    log_level: str = setting("info", "Lowest level that is logged.", choices=LOG_LEVELS)
    log_format: str = setting("json", "Log line format: one JSON object per line, or "
                              "human-readable console output.", choices=LOG_FORMATS)
    grace_seconds: float = setting(5.0, "On SIGTERM/SIGINT, seconds in-flight RPCs get to finish "
                                   "before they are cancelled.", positive=True)
    advertise_address: str = setting(
        "auto", "host:port other services use to reach this one (what a worker registers with the "
        "Scheduler); auto = host:port with 0.0.0.0 replaced by 127.0.0.1.")
    redis_url: str = redis_url_setting(
        "Redis holding the API keys every call is checked against (and, for the Scheduler, all "
        "state), e.g. redis://:password@host:6379/0.")
    redis_password_file: str = setting(
        "", "File holding the Redis password (e.g. the Docker secret /run/secrets/redis_password), "
        "sent when connecting to OPENTINKER_REDIS_URL unless that URL carries a password itself; "
        "read at start, never logged. Empty: no password (or the URL's).",
        env=SHARED_REDIS_PASSWORD_FILE_ENV, check=check_password_file, type_name="path",
        optional=True)
    auth: str = setting(
        "api_keys", "How callers authenticate: api_keys (every call carries 'authorization: Bearer "
        "<api key>') or disabled (anyone who reaches the port may call: for a local machine only).",
        choices=AUTH_MODES, env=SHARED_AUTH_ENV)
    api_key: str = setting(
        "", "This process's admin (service) key, sent on its calls to other OpenTinker services; the "
        "Scheduler installs it (salted and hashed) at start. Create one with `opentinker admin "
        "new-key`. Required while OPENTINKER_AUTH=api_keys.", env=SHARED_API_KEY_ENV,
        check=check_api_key, type_name="API key", secret=True)
    auth_cache_seconds: float = setting(
        5.0, "How long a verified API key is trusted without asking Redis again; a revoked key stops "
        "working within this time.", min=0, env="OPENTINKER_AUTH_CACHE_SECONDS")
    metrics_port: int = setting(
        0, "TCP port of the Prometheus endpoint (GET /metrics, plain HTTP) on the same host as "
        "gRPC; 0 = no endpoint. docs/metrics.md lists the metrics.", min=0, max=65535)
    tls: str = setting(
        "off", "TLS on this service's gRPC port and on its calls to the others: off (plaintext), "
        "on (the server presents OPENTINKER_TLS_CERT_FILE, callers check it against "
        "OPENTINKER_TLS_CA_FILE) or mutual (callers must present a certificate the CA signed "
        "too). Every service of a stack needs the same mode.", choices=TLS_MODES, env=SHARED_TLS_ENV)
    tls_cert_file: str = tls_file_setting(
        "PEM certificate chain this service presents (as a server; as a client too when "
        "OPENTINKER_TLS=mutual); its subjectAltName names the addresses others dial it at.",
        "OPENTINKER_TLS_CERT_FILE")
    tls_key_file: str = tls_file_setting("PEM private key of OPENTINKER_TLS_CERT_FILE.", "OPENTINKER_TLS_KEY_FILE")
    tls_ca_file: str = tls_file_setting(
        "PEM certificate(s) of the CA that signs the stack's certificates: what servers (and, "
        "when mutual, clients) are checked against.", "OPENTINKER_TLS_CA_FILE")

    @property
    def tls_files(self) -> TlsFiles:
        return TlsFiles(mode=self.tls, cert_file=self.tls_cert_file, key_file=self.tls_key_file,
                        ca_file=self.tls_ca_file)

    @property
    def reachable_address(self) -> str:
        """The advertised address, resolving `auto`."""
        if self.advertise_address != "auto":
            return self.advertise_address
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::", "[::]") else self.host
        return f"{host}:{self.port}"

    @property
    def redis_password(self) -> str | None:
        """The password in OPENTINKER_REDIS_PASSWORD_FILE, or None when no file is set."""
        return read_password_file(self.redis_password_file) if self.redis_password_file else None

    @property
    def auth_enabled(self) -> bool:
        return self.auth == "api_keys"

    def loggable(self) -> dict[str, Any]:
        """The settings for a log line: secrets as ***, URL passwords masked."""
        values = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("secret"):
                value = "***" if value else ""
            elif isinstance(value, str):
                value = mask_url_credentials(value)
            values[f.name] = value
        return values

    def __post_init__(self) -> None:
        problems = [_problem_line(type(self), f, getattr(self, f.name))
                    for f in dataclasses.fields(self)]
        if self.auth == "api_keys" and not self.api_key:
            problems.append(f"{SHARED_API_KEY_ENV} is required while {SHARED_AUTH_ENV}=api_keys: set it "
                            "to the cluster's admin key (create one with `opentinker admin new-key`), "
                            f"or set {SHARED_AUTH_ENV}=disabled on a machine only you can reach")
        missing = self.tls_files.missing()
        if missing:
            names = ", ".join(f"OPENTINKER_TLS_{name.removesuffix('_file').upper()}_FILE" for name in missing)
            problems.append(f"{SHARED_TLS_ENV}={self.tls} needs {names}: the PEM files of this service's "
                            "certificate, its key and the stack's CA (`opentinker up --tls` makes a local CA)")
        _raise_if_any(type(self), [p for p in problems if p])


class SettingDescription(NamedTuple):
    """One row of the settings reference (docs/settings.md)."""

    env_var: str
    type: str
    default: str
    doc: str


def load_settings(cls: type[S], environ: Mapping[str, str] | None = None) -> S:
    """Read, parse and validate `cls` from `environ` (default: os.environ); all problems at once."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    problems = _unknown_variable_problems(cls, environ)
    for f in dataclasses.fields(cls):
        name = env_var_name(cls, f)
        if name in environ:
            value, problem = _read_field(cls, f, environ[name])
            problems.extend([problem] if problem else [])
            values[f.name] = value
    _raise_if_any(cls, problems)
    return cls(**values)


def describe_settings(cls: type[ServiceSettings]) -> list[SettingDescription]:
    """Every setting of `cls` as (env_var, type, default, doc), in declaration order."""
    return [SettingDescription(env_var=env_var_name(cls, f), type=allowed_values(cls, f),
                               default=format_value(f.default), doc=f.metadata["doc"])
            for f in dataclasses.fields(cls)]


def env_var_name(cls: type[ServiceSettings], f: dataclasses.Field[Any]) -> str:
    """The environment variable that sets field `f` of `cls`."""
    if not cls.ENV_PREFIX:
        raise TypeError(f"{cls.__name__} must set ENV_PREFIX, e.g. 'OPENTINKER_SCHEDULER_'")
    if "doc" not in f.metadata:
        raise TypeError(f"{cls.__name__}.{f.name} has no doc; declare it with setting(...)")
    return f.metadata.get("env") or cls.ENV_PREFIX + f.name.upper()


def field_type(cls: type[ServiceSettings], f: dataclasses.Field[Any]) -> type:
    """The resolved annotation of field `f` (annotations may be strings)."""
    return typing.get_type_hints(cls)[f.name]


def parse_value(kind: type, raw: str, f: dataclasses.Field[Any]) -> Any:
    """Parse one environment string into `kind`; ValueError says what is allowed."""
    text = raw.strip()
    if kind is bool:
        if text.lower() not in BOOL_WORDS:
            raise ValueError(f"expected one of: {', '.join(BOOL_WORDS)}")
        return BOOL_WORDS[text.lower()]
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _parse_enum(kind, text)
    if kind in (int, float):
        return _parse_number(kind, text, f)
    if f.metadata.get("choices"):
        return _parse_choice(f.metadata["choices"], text)
    if kind in (str, Path):
        return kind(text)
    raise TypeError(f"settings field {f.name!r} has unsupported type {kind!r}")


def allowed_values(cls: type[ServiceSettings], f: dataclasses.Field[Any]) -> str:
    """Human description of what field `f` accepts, e.g. 'int from 0 to 65535'."""
    kind = field_type(cls, f)
    meta = f.metadata
    if meta.get("type_name"):
        return meta["type_name"]
    if meta.get("choices"):
        return "one of: " + ", ".join(meta["choices"])
    if kind is bool:
        return "bool (" + "/".join(BOOL_WORDS) + ")"
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "one of: " + ", ".join(str(m.value) for m in kind)
    return kind.__name__ + _range_text(meta)


def format_value(value: Any) -> str:
    """Render a value the way it would be written in an environment variable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def _read_field(cls: type[ServiceSettings], f: dataclasses.Field[Any], raw: str) -> tuple[Any, str | None]:
    """Parse and validate one variable: (value, None) or (None, a line naming var and problem)."""
    try:
        value = parse_value(field_type(cls, f), raw, f)
    except ValueError as error:
        return None, _invalid_line(cls, f, raw, str(error))
    problem = _value_problem(field_type(cls, f), f, value)
    return value, _invalid_line(cls, f, raw, problem) if problem else None


def _parse_choice(choices: Sequence[str], text: str) -> str:
    matches = [choice for choice in choices if choice.lower() == text.lower()]
    if not matches:
        raise ValueError("expected one of: " + ", ".join(choices))
    return matches[0]


def _parse_enum(kind: type[enum.Enum], text: str) -> enum.Enum:
    for member in kind:
        if text.lower() in (str(member.value).lower(), member.name.lower()):
            return member
    raise ValueError("expected one of: " + ", ".join(str(m.value) for m in kind))


def _parse_number(kind: type, text: str, f: dataclasses.Field[Any]) -> int | float:
    try:
        return kind(text)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise ValueError(f"expected {noun}{_range_text(f.metadata)}") from None


def _range_text(meta: Mapping[str, Any]) -> str:
    low, high = meta.get("min"), meta.get("max")
    if low is not None and high is not None:
        return f" from {format_value(low)} to {format_value(high)}"
    if low is not None:
        return f" >= {format_value(low)}"
    if high is not None:
        return f" <= {format_value(high)}"
    return " > 0" if meta.get("positive") else ""


def _problem_line(cls: type[ServiceSettings], f: dataclasses.Field[Any], value: Any) -> str | None:
    problem = _value_problem(field_type(cls, f), f, value)
    return _invalid_line(cls, f, format_value(value), problem) if problem else None


def _invalid_line(cls: type[ServiceSettings], f: dataclasses.Field[Any], shown: str, problem: str) -> str:
    """`VAR='value' is invalid: problem`, with any URL password (and any secret) masked."""
    shown = "***" if f.metadata.get("secret") else mask_url_credentials(shown)
    return f"{env_var_name(cls, f)}={shown!r} is invalid: {problem}"


def _value_problem(kind: type, f: dataclasses.Field[Any], value: Any) -> str | None:
    type_problem = _type_problem(kind, value)
    if type_problem:
        return type_problem
    meta = f.metadata
    if isinstance(value, str) and not value.strip():
        return None if meta.get("secret") or meta.get("optional") else "must not be empty"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if meta.get("choices") and value not in meta["choices"]:
        return "expected one of: " + ", ".join(meta["choices"])
    if _out_of_range(meta, value):
        return "expected a value" + _range_text(meta)
    return meta["check"](value) if meta.get("check") else None


def _type_problem(kind: type, value: Any) -> str | None:
    accepted: tuple[type, ...] = (int, float) if kind is float else (kind,)
    is_bool_mixup = isinstance(value, bool) and kind is not bool
    if is_bool_mixup or not isinstance(value, accepted):
        return f"expected a value of type {kind.__name__}, got {type(value).__name__}"
    return None


def _out_of_range(meta: Mapping[str, Any], value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    too_low = meta.get("min") is not None and value < meta["min"]
    too_high = meta.get("max") is not None and value > meta["max"]
    return too_low or too_high or (bool(meta.get("positive")) and value <= 0)


def _unknown_variable_problems(cls: type[ServiceSettings], environ: Mapping[str, str]) -> list[str]:
    env_by_field = {f.name.upper(): env_var_name(cls, f) for f in dataclasses.fields(cls)}
    known = list(env_by_field.values())
    unknown = sorted(name for name in environ if name.startswith(cls.ENV_PREFIX)
                     and name not in known and name not in cls.IGNORED_ENV_VARS)
    return [_unknown_variable_line(cls, name, env_by_field) for name in unknown]


def _unknown_variable_line(cls: type[ServiceSettings], name: str, env_by_field: dict[str, str]) -> str:
    """Suggest by the part after the prefix, so the shared prefix does not make all names close."""
    suffix = name.removeprefix(cls.ENV_PREFIX)
    close = difflib.get_close_matches(suffix, list(env_by_field), n=1, cutoff=0.6)
    hint = f"did you mean {env_by_field[close[0]]}? " if close else ""
    return f"{name} is not a known setting; {hint}known settings: {', '.join(env_by_field.values())}"


def _raise_if_any(cls: type[ServiceSettings], problems: list[str]) -> None:
    if problems:
        header = f"invalid {cls.__name__} ({len(problems)} problem{'s' * (len(problems) > 1)}):"
        raise SettingsError("\n  ".join([header, *problems]))
