"""The vLLM connector's configuration, checked before anything is opened: the store's address
in one of its explicit forms, and only the extra-config keys the connector knows. A wrong
value fails the engine's start with what was wrong and how to write it, never a store
opened somewhere unexpected or a setting silently ignored."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass

# ec_connector_extra_config keys, each with what it sets.
KNOWN_KEYS = {
    "store": "where the store is: tcp://HOST:PORT, tls://HOST:PORT, unix:/PATH, "
             "etcd://HOST:PORT/NAME, etcds://HOST:PORT/NAME or dir:/ABSOLUTE/PATH",
    "etcd_ca": "a cluster's etcd over TLS (etcds://): the CA its certificate is checked against",
    "etcd_cert": "etcd's client certificate (PEM), for an etcd run with --client-cert-auth",
    "etcd_key": "the private key of etcd_cert (PEM)",
    "etcd_user": "etcd's user, for an etcd with auth enabled",
    "etcd_password_file": "a file holding etcd_user's password",
    "namespace": "the entries' namespace (default: derived from the model)",
    "pool_size": "an embedded store's pool (dir:; default 256MiB), e.g. 8GiB",
    "disk_quota": "an embedded store's disk quota (dir:; default 16GiB), e.g. 64GiB",
    "token_file": "a file holding the daemon's shared secret",
    "token": "the daemon's shared secret itself (prefer token_file or EC_STORE_TOKEN)",
    "fail_open": "true (default): a store that cannot be reached is a miss",
    "tls_ca": "TLS to the daemon (or every node of a cluster): the CA certificate to trust "
              "(PEM; default: the system's)",
    "tls_cert": "TLS: this engine's client certificate (PEM), for a daemon that requires one",
    "tls_key": "TLS: the private key of tls_cert (PEM)",
    "tls_server_name": "TLS: the name the daemon's certificate must carry (default: its host)",
    "tenant_salt": "true (default): a request's cache_salt scopes its items' entries, so two "
                   "tenants' identical images are two entries and neither hits the other's",
    "timeout_ms": "a daemon's bound on each call, in ms (default 2000)",
    "connect_timeout_ms": "a daemon's bound on setting up a TCP connection, in ms (default 500)",
    "transport": "how a daemon is reached: auto (default: shared memory on the same host, "
                 "else TCP or RDMA), tcp, shm or rdma",
    "retries": "how often a failed daemon call is tried again on a new connection (default 1)",
    "lookup_budget_ms": "how long a request may wait for the store's answer before its items "
                        "are computed, in ms (default 50); the scheduler thread never waits",
    "saved_wait_ms": "how long a request waits for an item its producer reported saved "
                     "(its ec_transfer_params) to land, in ms (default 5000)",
    "claim_ms": "a producer that misses an item claims it at the daemon for this long, in ms "
                "(default 2000; 0: no claims): of engines that miss one new image at once, "
                "one computes it and the others wait for its save",
}

# key -> (default, kind); a value of the wrong kind fails the start naming the key
DEFAULTS = {
    "timeout_ms": (2000, "ms"), "connect_timeout_ms": (500, "ms"), "retries": (1, "count"),
    "lookup_budget_ms": (50, "ms"), "saved_wait_ms": (5000, "ms"), "claim_ms": (2000, "ms"),
    "fail_open": (True, "bool"), "tenant_salt": (True, "bool"), "transport": ("auto", "transport"),
}

FORMS = ("tcp://HOST:PORT (a daemon over TCP), tls://HOST:PORT (over TLS), unix:/PATH (a same-host daemon's socket, "
         "e.g. unix:/var/cache/ec-store/serve.sock), etcd://HOST:PORT/NAME (a cluster of daemons "
         "registered in etcd) or dir:/ABSOLUTE/PATH (a store embedded in this engine process)")


@dataclass(frozen=True)
class StoreSpec:
    kind: str    # "tcp", "tls", "unix", "etcd" or "dir"
    target: str  # what ecstore.connect (tcp, unix, etcd) or ecstore.open (dir) takes

    @property
    def remote(self) -> bool:
        return self.kind != "dir"


def check_keys(extra: dict) -> None:
    """Refuses an extra-config key the connector does not know, naming the close ones, and
    a value of the wrong kind."""
    for key in extra:
        if key in DEFAULTS:
            setting(extra, key)
        if key in KNOWN_KEYS:
            continue
        near = difflib.get_close_matches(str(key).replace("-", "_"), list(KNOWN_KEYS), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"ec_connector_extra_config has an unknown key {key!r}{hint}; the "
                         f"known keys are: {', '.join(sorted(KNOWN_KEYS))}")


def setting(extra: dict, key: str):
    """The extra config's value for `key`, or its default; a value that is not a number of
    milliseconds, a count or a boolean, as the key takes, is refused naming the key."""
    default, kind = DEFAULTS[key]
    value = extra.get(key, default)
    if kind == "transport":  # checked by the library itself, as connect checks it
        from . import _ecstore
        try:
            return _ecstore.parse_transport(str(value))
        except Exception as e:
            raise ValueError(f"ec_connector_extra_config {key}={value!r}: {e} "
                             f"(default {default})") from None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
        raise ValueError(f"ec_connector_extra_config {key}={value!r}: write true or false")
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if number < 0 or (kind == "count" and number != int(number)) or isinstance(value, bool):
        what = "a whole number, 0 or more" if kind == "count" else "milliseconds, 0 or more"
        raise ValueError(f"ec_connector_extra_config {key}={value!r}: write {what} "
                         f"(default {default})")
    return int(number) if kind == "count" else number / 1000  # ms -> s


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_seconds(text: object, what: str = "EC_STORE_TIMEOUT") -> float:
    """A duration as the CLI writes it ("5s", "500ms", "2m"; a bare number is seconds), in
    seconds; ValueError saying the forms otherwise."""
    t = str(text).strip()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if t.endswith(unit):
            number, scale = t[:-len(unit)], _UNITS[unit]
            break
    else:
        number, scale = t, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"{what}={text!r}: give a duration such as 5s, 500ms or 2m "
                         "(a bare number is seconds)")
    return value


def parse_store(spec: object) -> StoreSpec:
    """The store address, in one of the explicit forms; anything else is refused, saying
    which forms there are."""
    text = str(spec or "").strip()
    example = 'e.g. {"store": "unix:/var/cache/ec-store/serve.sock"}'
    if not text:
        raise ValueError(f'EcStoreConnector needs ec_connector_extra_config["store"]: '
                         f"{FORMS}; {example}")
    for scheme in ("tcp", "tls"):
        if not text.startswith(scheme + "://"):
            continue
        hostport = text[len(scheme) + 3:]
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"store {text!r}: write {scheme}://HOST:PORT with a port number, "
                             f"e.g. {scheme}://10.0.0.5:7070")
        return StoreSpec(scheme, text)
    if text.startswith("unix:"):
        path = text[len("unix:"):]
        if not path.startswith("/"):
            raise ValueError(f"store {text!r}: a unix socket's path must be absolute, "
                             "e.g. unix:/var/cache/ec-store/serve.sock")
        if os.path.isdir(path):
            sock = os.path.join(path, "serve.sock")
            there = (f"; the daemon serving it listens on unix:{sock}"
                     if os.path.exists(sock) else
                     "; no daemon socket (serve.sock) is there: start `ec-store serve` on it, "
                     f"or embed it with dir:{path}")
            raise ValueError(f"store {text!r} names a directory, not a socket{there}")
        return StoreSpec("unix", text)
    if text.startswith("dir:"):
        path = text[len("dir:"):]
        if not os.path.isabs(path):
            raise ValueError(f"store {text!r}: an embedded store's directory must be an "
                             f"absolute path, e.g. dir:{os.path.abspath(path or '.ec-store')}")
        return StoreSpec("dir", path)
    for scheme in ("etcd", "etcds"):  # etcds: etcd over TLS (etcd_ca, etcd_cert, ...)
        if not text.startswith(scheme + "://"):
            continue
        hosts, _, name = text[len(scheme) + 3:].partition("/")
        if not name or "/" in name or not all(
                h.rpartition(":")[0] and h.rpartition(":")[2].isdigit() for h in hosts.split(",")):
            raise ValueError(f"store {text!r}: write {scheme}://HOST:PORT[,HOST:PORT...]/NAME, "
                             f"e.g. {scheme}://10.0.0.2:2379/prod (the name `ec-store serve "
                             "--cluster` was given)")
        return StoreSpec("etcd", text)
    raise ValueError(f"store {text!r} is not a store address: use {FORMS}; {example}")


def etcd_options(extra: dict, spec: StoreSpec) -> dict | None:
    """ecstore.connect's etcd= from the etcd_* keys (None where none is given); a key given
    for a store that is not a cluster is refused."""
    given = {k[len("etcd_"):]: str(extra[k]) for k in
             ("etcd_ca", "etcd_cert", "etcd_key", "etcd_user") if extra.get(k)}
    if extra.get("etcd_password_file"):
        path = str(extra["etcd_password_file"])
        try:
            with open(path) as f:
                given["password"] = f.readline().rstrip("\r\n")
        except OSError as e:
            raise ValueError(f"ec_connector_extra_config etcd_password_file {path!r} cannot be "
                             f"read: {e.strerror}") from None
    if given and spec.kind != "etcd":
        raise ValueError(f"ec_connector_extra_config {', '.join('etcd_' + k for k in given)}: "
                         "for a cluster's store (etcd:// or etcds://) only")
    return given or None


def tls_options(extra: dict, spec: StoreSpec) -> dict | None:
    """ecstore.connect's tls= from the tls_* keys: None (plain) unless the store is tls://
    or a key is given."""
    given = {k[len("tls_"):]: str(extra[k]) for k in
             ("tls_ca", "tls_cert", "tls_key", "tls_server_name") if extra.get(k)}
    if spec.kind == "tls" or given:
        if spec.kind in ("unix", "dir"):
            raise ValueError(f"ec_connector_extra_config tls_* keys are for a daemon over TCP "
                             f"(tls://HOST:PORT) or a cluster; store is {spec.kind}:")
        return given
    return None
