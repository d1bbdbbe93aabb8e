"""A TLS daemon with principals, through the package and the vLLM connector (conftest's
tls_daemon: certificates made with openssl, an ACL scoping each principal)."""

import numpy as np
import pytest

import ecstore


def tls_opts(d, name=None):
    pki = d["pki"]
    opts = {"ca": str(pki / "ca.crt")}
    if name:
        opts.update(cert=str(pki / f"{name}.crt"), key=str(pki / f"{name}.key"))
    return opts


def test_tls_puts_and_gets_are_byte_exact_and_each_principal_keeps_to_its_grants(tls_daemon):
    enc = ecstore.connect(tls_daemon["tls"], tls=tls_opts(tls_daemon, "encoder"))
    pre = ecstore.connect(tls_daemon["tls"], tls=tls_opts(tls_daemon, "prefill"))
    x = np.arange(3 << 20, dtype=np.uint8)
    enc.put("test.model", "img", x)
    assert np.array_equal(pre.get("test.model", "img"), x)
    with pytest.raises(ecstore.PermissionDenied, match="may not write namespace 'test.model'"):
        pre.put("test.model", "other", x)
    with pytest.raises(ecstore.PermissionDenied):
        pre.erase("test.model", "img")
    with pytest.raises(ecstore.PermissionDenied, match="namespace 'b.model'"):
        enc.get("b.model", "img")
    bob = ecstore.connect(tls_daemon["tls"], token="bob-secret", tls=tls_opts(tls_daemon))
    bob.put("b.model", "img", x[:10])
    assert [e.namespace for e in bob.list()] == ["b.model"]  # lists only what it may see
    with pytest.raises(ecstore.PermissionDenied):
        bob.stats()
    assert ecstore.connect(tls_daemon["tls"], tls=tls_opts(tls_daemon, "ops")).stats()


def test_a_same_host_user_is_the_principal_its_uid_names(tls_daemon):
    enc = ecstore.connect(tls_daemon["tls"], tls=tls_opts(tls_daemon, "encoder"))
    x = np.arange(1000, dtype=np.uint8)
    enc.put("test.model", "img", x)
    local = ecstore.connect(tls_daemon["unix"])
    # Its grant is test* alone: no mapping of the pool (it would show every namespace), and
    # its reads are copies over the same socket.
    assert local.transport == "tcp"
    assert np.array_equal(local.get("test.model", "img"), x)
    with pytest.raises(ecstore.PermissionDenied, match="principal 'local' may not write"):
        local.put("test.model", "mine", x)


def test_refused_clients_are_told_why(tls_daemon):
    with pytest.raises(ecstore.InvalidArgument, match="requires TLS"):
        ecstore.connect(tls_daemon["tcp"], retries=0)
    with pytest.raises(ecstore.PermissionDenied, match="no principal"):
        ecstore.connect(tls_daemon["tls"], tls=tls_opts(tls_daemon, "stranger"), retries=0)
    with pytest.raises(ecstore.PermissionDenied, match="hostname mismatch: it names none of node-2"):
        ecstore.connect(tls_daemon["tls"], retries=0,
                        tls=dict(tls_opts(tls_daemon, "encoder"), server_name="node-2"))
    with pytest.raises(ecstore.InvalidArgument, match="unknown keys"):
        ecstore.connect(tls_daemon["tls"], tls={"cafile": "x"})


def test_the_vllm_connector_over_tls_with_scoped_principals(tls_daemon):
    pytest.importorskip("vllm", reason="vLLM is not installed (make python-test installs it)")
    import torch
    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole

    from ecstore.vllm import EcStoreConnector
    from test_vllm_connector import MockRequest, make_config

    pki = tls_daemon["pki"]

    def extra(name):
        return {"store": tls_daemon["tls"], "namespace": "test", "tls_ca": str(pki / "ca.crt"),
                "tls_cert": str(pki / f"{name}.crt"), "tls_key": str(pki / f"{name}.key"),
                "fail_open": False, "claim_ms": 0}

    producer = EcStoreConnector(make_config("ecstore", "", True, False, extra("encoder")),
                                ECConnectorRole.WORKER)
    sched = EcStoreConnector(make_config("ecstore", "", False, True, extra("prefill")),
                             ECConnectorRole.SCHEDULER)
    worker = EcStoreConnector(make_config("ecstore", "", False, True, extra("prefill")),
                              ECConnectorRole.WORKER)
    try:
        image = torch.randn(200, 64, dtype=torch.bfloat16)
        producer.save_caches(encoder_cache={"h1": image}, mm_hash="h1")
        producer.wait_for_saves()
        from test_vllm_connector import ask_until_ready
        from types import SimpleNamespace
        req = MockRequest("r1", ["h1"], [200])
        assert ask_until_ready(sched, req)
        assert sched.has_cache_item("h1")
        sched.update_state_after_alloc(req, 0)
        worker.bind_connector_metadata(sched.build_connector_meta(SimpleNamespace()))
        cache = {}
        worker.start_load_caches(encoder_cache=cache)
        assert torch.equal(cache["h1"], image)
    finally:
        for c in (producer, sched, worker):
            c.shutdown()


def test_tls_keys_are_refused_for_a_unix_store():
    from ecstore.config import parse_store, tls_options
    with pytest.raises(ValueError, match="tls_"):
        tls_options({"tls_ca": "/x"}, parse_store("unix:/run/x.sock"))
    assert tls_options({}, parse_store("tls://h:1")) == {}
    assert tls_options({}, parse_store("tcp://h:1")) is None
