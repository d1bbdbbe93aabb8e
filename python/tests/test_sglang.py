"""The SGLang backend (ecstore.sglang) against SGLang 0.5.23's own classes: its
EmbeddingStoreFactory creates it, and its EmbeddingCacheController drives it through prefetch,
insert and exists checks, on CPU tensors here (`make sglang-test`, in the SGLang venv of
scripts/sglang-env.sh) and on CUDA tensors on a GPU machine."""

import asyncio
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import types

import pytest

if os.environ.get("EC_REQUIRE_SGLANG") != "1":
    pytest.importorskip("sglang", reason="SGLang is not installed in this venv; "
                        "`make sglang-test` runs these tests in the SGLang venv")

import torch  # noqa: E402
from sglang.srt.managers.schedule_batch import Modality  # noqa: E402
from sglang.srt.mem_cache import embedding_cache_controller as ecc  # noqa: E402
from sglang.srt.mem_cache.embedding_store import EmbeddingStoreFactory  # noqa: E402
from sglang.srt.runtime_context import get_parallel  # noqa: E402

import ecstore  # noqa: E402
from conftest import start_serve  # noqa: E402
from ecstore.sglang import EcStoreEmbeddingStore  # noqa: E402

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "sglang.md"
DIM = 256  # a small hidden size: a page of the pool is 256 KiB / (DIM * 2) = 512 tokens


@pytest.fixture(params=["tcp", "unix"])
def url(request, daemon):
    return daemon[request.param]


def embedding(seed: int, tokens: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, DIM, generator=g).to(torch.bfloat16)


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def controller(store, pool_gb=0.02):
    """SGLang's controller for one engine with tensor parallelism 1, as its encoder server
    builds it; its pool is pinned only where CUDA is present."""
    pinned = torch.cuda.is_available()
    create = ecc.EmbeddingCacheController._create_pools

    def pools(self, pin_memory):
        return create(self, pin_memory and pinned)

    ecc.EmbeddingCacheController._create_pools = pools
    try:
        with get_parallel().override(tp_size=1, tp_rank=0,
                                     tp_group=types.SimpleNamespace(cpu_group=None)):
            c = ecc.EmbeddingCacheController(store, max_pool_size_gb=pool_gb,
                                             hidden_dims={Modality.IMAGE: DIM},
                                             dtype=torch.bfloat16)
    finally:
        ecc.EmbeddingCacheController._create_pools = create
    return c


def prefetched(c, req, hashes, tokens, deadline=30.0):
    """Prefetches `hashes` into the controller's pool; their pool bytes (None where missing)."""
    c.prefetch(req, hashes, tokens, modality=Modality.IMAGE)
    end = time.monotonic() + deadline
    while not c.check_prefetch_progress(req):
        assert time.monotonic() < end, "the prefetch did not finish"
        time.sleep(0.005)
    views = c.get_pool_views(hashes)
    out = [None if v is None else torch.cat(v).clone() for v in views]
    c.release_pool_views([h for h, v in zip(hashes, views) if v is not None])
    return out


def stop(c):
    c.stop_event.set()
    c.io_thread.join(timeout=5)


def test_sglangs_factory_creates_the_backend_from_the_environment(daemon, monkeypatch):
    monkeypatch.setenv("EC_STORE_URL", daemon["unix"])
    monkeypatch.setenv("EC_STORE_NAMESPACE", "qwen-vl")
    store = EmbeddingStoreFactory.create_backend("ecstore")
    assert isinstance(store, EcStoreEmbeddingStore)
    assert store.namespace == "qwen-vl" and store.cache.transport == "shm"

    monkeypatch.delenv("EC_STORE_URL")
    with pytest.raises(ValueError, match="set EC_STORE_URL"):
        EmbeddingStoreFactory.create_backend("ecstore")


def test_raw_pointer_batches_round_trip_whole_and_in_pieces(url):
    store = EcStoreEmbeddingStore(url)
    a, b, c = embedding(1, 700), embedding(2, 1300), embedding(3, 64)
    assert store.batch_put(["a", "b"], [a.data_ptr(), b.data_ptr()], [nbytes(a), nbytes(b)]) \
        == [True, True]
    # c from three pieces of one buffer, as a fragmented pool's page runs.
    third = nbytes(c) // 4
    cp = c.data_ptr()
    assert store.batch_put_from_multi_buffers(
        ["c"], [[cp, cp + third, cp + 3 * third]], [[third, 2 * third, third]]) == [True]
    assert store.batch_is_exist(["a", "b", "c", "absent"]) == [True, True, True, False]

    ga, gb, gc = torch.empty_like(a), torch.empty_like(b), torch.empty_like(c)
    half = nbytes(b) // 2
    got = store.batch_get_into_multi_buffers(
        ["a", "b", "c", "absent"],
        [[ga.data_ptr()], [gb.data_ptr(), gb.data_ptr() + half], [gc.data_ptr()],
         [ga.data_ptr()]],
        [[nbytes(a)], [half, nbytes(b) - half], [nbytes(c)], [64]])
    assert got == [True, True, True, False]
    assert torch.equal(ga, a) and torch.equal(gb, b) and torch.equal(gc, c)

    # A put of keys the store holds sends nothing; a buffer of the wrong size is a miss for
    # that key alone, and the stored entry is untouched.
    assert store.batch_put(["a"], [a.data_ptr()], [nbytes(a)]) == [True]
    small = torch.empty(100, DIM, dtype=torch.bfloat16)
    assert store.batch_get(["a", "b"], [small.data_ptr(), gb.data_ptr()],
                           [nbytes(small), nbytes(b)]) == [False, True]
    assert store.cache.lookup("sglang", "a").bytes == nbytes(a)
    s = store.stats()
    assert (s["puts"], s["skipped_puts"], s["failures"]) == (3, 1, 1)


def test_pointers_outside_the_registered_pool_are_refused(daemon):
    store = EcStoreEmbeddingStore(daemon["tcp"])
    pool, other = torch.zeros(4096, dtype=torch.uint8), torch.zeros(64, dtype=torch.uint8)
    store.register_buffer(pool)
    assert store.batch_put(["in"], [pool.data_ptr() + 1024], [2048]) == [True]
    with pytest.raises(ValueError, match="outside every buffer"):
        store.batch_get(["in"], [pool.data_ptr() + 3072], [2048])
    with pytest.raises(ValueError, match="outside every buffer"):
        store.batch_put(["x"], [other.data_ptr()], [64])
    assert store.batch_is_exist(["x"]) == [False]


def test_sglangs_controller_prefetches_what_another_engine_put(url):
    """Engine A's store puts entries (as A's controller's insert_batch would); engine B's
    controller finds them with batch_is_exist and loads them into its pool byte-exactly."""
    a = EcStoreEmbeddingStore(url)
    tokens = [700, 1500, 40]
    ts = [embedding(10 + i, n) for i, n in enumerate(tokens)]
    hashes = ["img-0", "img-1", "img-2"]
    assert a.batch_put(hashes, [t.data_ptr() for t in ts], [nbytes(t) for t in ts]) == [True] * 3

    b = controller(EcStoreEmbeddingStore(url))
    try:
        exists = asyncio.run(b.batch_is_exist(hashes + ["never-seen"]))
        assert exists == [True, True, True, False]
        got = prefetched(b, "req-1", hashes + ["never-seen"], tokens + [300])
        for t, g in zip(ts, got):
            assert g is not None and torch.equal(g, t)
        assert got[3] is None, "a miss leaves nothing in the pool"
        assert b.has_local_embedding("img-1") and not b.has_local_embedding("never-seen")
    finally:
        stop(b)


def test_sglangs_controller_inserts_what_its_pool_holds(daemon):
    """A controller's insert_batch puts READY pool entries back to a store that lost them
    (erased here); a third engine then loads them byte-exactly."""
    url = daemon["tcp"]
    seed = EcStoreEmbeddingStore(url)
    tokens = [900, 2000]
    ts = [embedding(20 + i, n) for i, n in enumerate(tokens)]
    hashes = ["ins-0", "ins-1"]
    seed.batch_put(hashes, [t.data_ptr() for t in ts], [nbytes(t) for t in ts])

    a = controller(EcStoreEmbeddingStore(url))
    c = controller(EcStoreEmbeddingStore(url))
    try:
        prefetched(a, "req-a", hashes, tokens)
        assert seed.cache.erase_many("sglang", hashes) == [True, True]
        a.insert_batch(hashes, modality=Modality.IMAGE)
        a.insert_queue.join()
        assert a.embedding_store.stats()["puts"] == 2
        got = prefetched(c, "req-c", hashes, tokens)
        assert all(torch.equal(g, t) for g, t in zip(got, ts))
    finally:
        stop(a)
        stop(c)


def test_a_dead_daemon_costs_misses_within_the_timeout_never_an_exception(tmp_path):
    proc, _, port = start_serve(tmp_path / "d")
    store = EcStoreEmbeddingStore(f"tcp://127.0.0.1:{port}", timeout=0.5)
    t = embedding(30, 128)
    assert store.batch_put(["k"], [t.data_ptr()], [nbytes(t)]) == [True]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    began = time.monotonic()
    assert store.batch_is_exist(["k", "j"]) == [False, False]
    assert store.batch_get(["k"], [t.data_ptr()], [nbytes(t)]) == [False]
    assert store.batch_put(["j"], [t.data_ptr()], [nbytes(t)]) == [False]
    assert time.monotonic() - began < 5.0
    assert store.stats()["failures"] == 4


def test_a_daemon_not_up_yet_costs_misses_and_is_used_once_it_answers(tmp_path):
    """As the vLLM connector: an engine started before its daemon starts, misses, and hits
    once the daemon answers (EC_STORE_TIMEOUT given as the CLI takes it)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["EC_STORE_TIMEOUT"] = "500ms"
    try:
        store = EcStoreEmbeddingStore(f"tcp://127.0.0.1:{port}")
    finally:
        del os.environ["EC_STORE_TIMEOUT"]
    t = embedding(31, 128)
    assert store.batch_put(["k"], [t.data_ptr()], [nbytes(t)]) == [False]
    assert store.batch_is_exist(["k"]) == [False]
    proc, _, _ = start_serve(tmp_path / "late", port=port)
    try:
        deadline = time.monotonic() + 10
        while store.batch_put(["k"], [t.data_ptr()], [nbytes(t)]) != [True]:
            assert time.monotonic() < deadline, "the backend never used the daemon"
            time.sleep(0.2)
        assert store.batch_is_exist(["k"]) == [True]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make test-gpu)")
def test_on_a_gpu_an_encoder_output_saved_by_one_engine_loads_into_anothers_gpu(daemon):
    """The controller's whole GPU path: an encoder output (CUDA) stored to the pinned pool,
    inserted into ec-store, prefetched by another engine and copied to its GPU."""
    url = daemon["unix"]
    a, b = controller(EcStoreEmbeddingStore(url)), controller(EcStoreEmbeddingStore(url))
    try:
        out = embedding(40, 3000).cuda()
        handles = a.store_to_pool_async(["gpu-0"], [out], modality=Modality.IMAGE)
        a.wait_store_to_pool(handles)
        a.insert_batch(["gpu-0"], modality=Modality.IMAGE)
        a.insert_queue.join()
        assert prefetched(b, "req-g", ["gpu-0"], [3000])[0] is not None
        dst = torch.empty_like(out)
        b.wait_load_to_device([b.load_to_device_async("gpu-0", dst, 0)])
        assert torch.equal(dst, out)
    finally:
        stop(a)
        stop(b)


def doc_block(lang: str) -> str:
    m = re.search(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)
    assert m, f"docs/sglang.md has no {lang} block"
    return m.group(1)


def test_the_documented_upstream_change_applies_to_the_installed_sglang(tmp_path):
    import sglang

    site = pathlib.Path(sglang.__file__).parents[1]
    diff = tmp_path / "ecstore.diff"
    diff.write_text(doc_block("diff"))
    r = subprocess.run(["patch", "-p1", "--dry-run", "-d", str(site), "-i", str(diff)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAILED" not in r.stdout and "offset" not in r.stdout, r.stdout


def test_the_documented_sitecustomize_makes_the_mooncake_name_ec_store(tmp_path, daemon):
    (tmp_path / "sitecustomize.py").write_text(doc_block("python"))
    env = dict(os.environ, EC_STORE_URL=daemon["unix"],
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    code = ("from sglang.srt.mem_cache.embedding_store import EmbeddingStoreFactory as F\n"
            "s = F.create_backend('mooncake')\n"
            "print(type(s).__module__, type(s).__name__, s.batch_is_exist(['none']))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["ecstore.sglang", "EcStoreEmbeddingStore", "[False]"], r.stdout


# Run in its own process: SGLang's publish() sets process-wide state. It parses the
# documented encoder-only command line with SGLang's parser, then runs the block of SGLang's
# own MMEncoder.__init__ that builds the global cache (MMEncoder itself also loads the model
# and joins a process group, which a test cannot do without weights and a GPU).
LAUNCH_PROBE = r'''
import inspect, json, re, shlex, sys, textwrap, types
import numpy, torch
import ecstore.sglang
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.disaggregation.encoder.server import MMEncoder
from sglang.srt.mem_cache import embedding_cache_controller as ecc
from sglang.srt.runtime_context import get_mm, get_parallel, publish
from sglang.srt.server_args import prepare_server_args

exec(sys.argv[2])  # the documented sitecustomize.py
argv = shlex.split(sys.argv[1])
args = prepare_server_args(argv[argv.index("sglang.launch_server") + 1:])
args.resolve_once()
publish(args, role="encoder")
src = textwrap.dedent(inspect.getsource(MMEncoder.__init__))
block = re.search(r"^    if get_mm\(\)\.enable_mm_global_cache:\n.*?"
                  r"^    else:\n        self\.mm_global_cache = None\n", src, re.M | re.S)
assert block, "MMEncoder.__init__ no longer builds its global cache as this probe expects"
create = ecc.EmbeddingCacheController._create_pools
ecc.EmbeddingCacheController._create_pools = lambda self, pin_memory: create(self, False)
encoder = types.SimpleNamespace(model_config=ModelConfig.from_server_args(args),
                                _embedding_dtype=torch.bfloat16)
encoder._embedding_dims = MMEncoder._infer_embedding_dims(encoder)
with get_parallel().override(tp_size=1, tp_rank=0,
                             tp_group=types.SimpleNamespace(cpu_group=None)):
    exec(textwrap.dedent(block.group(0)), {"get_mm": get_mm, "self": encoder})
store = encoder.mm_global_cache.embedding_store
store.cache.put(store.namespace, "seen", numpy.zeros(8, "uint8"))
lang = shlex.split(sys.argv[3])
lang_args = prepare_server_args(lang[lang.index("sglang.launch_server") + 1:])
print(json.dumps({"language": [lang_args.language_only, lang_args.encoder_urls],
                  "encoder_only": args.encoder_only, "backend": type(store).__name__,
                  "exists": store.batch_is_exist(["seen", "unseen"])}))
encoder.mm_global_cache.stop_event.set()
'''


def launch_lines() -> list[str]:
    """The documented launch: each command of the sh block, its continuations joined."""
    text = re.sub(r"\\\n\s*", " ", doc_block("sh"))
    return [ln for ln in text.splitlines() if "sglang.launch_server" in ln]


def tiny_model(tmp_path) -> pathlib.Path:
    """A Qwen2.5-VL config without weights: enough for SGLang's argument resolution."""
    d = tmp_path / "model"
    d.mkdir()
    vision = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
              "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2,
              "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [0]}
    cfg = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
           "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
           "num_hidden_layers": 1, "num_key_value_heads": 2, "vocab_size": 1000,
           "max_position_embeddings": 1024, "torch_dtype": "bfloat16", "vision_config": vision,
           "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
           "image_token_id": 999, "video_token_id": 998, "vision_start_token_id": 997}
    (d / "config.json").write_text(__import__("json").dumps(cfg))
    return d


def test_the_documented_encoder_launch_creates_the_ecstore_backend(tmp_path, daemon):
    import json

    encoder, language = launch_lines()
    assert "--encoder-only" in encoder and "--language-only" in language
    model = tiny_model(tmp_path)
    env_part, _, command = encoder.partition(" python ")
    assert "EC_STORE_URL=" in env_part and "PYTHONPATH=" in env_part  # given here instead
    env = dict(os.environ, EC_STORE_URL=daemon["unix"], HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    command = (command.replace("Qwen/Qwen2.5-VL-7B-Instruct", str(model))
               + " --device cpu")  # no accelerator here
    language = language.replace("Qwen/Qwen2.5-VL-7B-Instruct", str(model)) + " --device cpu"
    r = subprocess.run([sys.executable, "-c", LAUNCH_PROBE, command, doc_block("python"),
                        language],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"language": [True, ["http://ENCODER_HOST:30001"]], "encoder_only": True, "backend": "EcStoreEmbeddingStore",
                   "exists": [True, False]}, got


def test_only_sglangs_encoder_server_creates_a_global_cache_backend():
    """Why docs/sglang.md gives the encoder-only launch: the plain server never creates one."""
    import sglang

    root = pathlib.Path(sglang.__file__).parent
    callers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                     if "EmbeddingStoreFactory.create_backend(" in p.read_text(errors="replace"))
    assert callers == ["srt/disaggregation/encoder/server.py"], callers


def test_a_tls_daemon_with_scoped_principals_serves_sglang(tls_daemon, monkeypatch):
    """EC_STORE_URL=tls://... with EC_STORE_TLS_*: the encoder's certificate writes the
    test* namespaces; a certificate that may only read gets misses, never an exception."""
    pki = tls_daemon["pki"]
    monkeypatch.setenv("EC_STORE_URL", tls_daemon["tls"])
    monkeypatch.setenv("EC_STORE_NAMESPACE", "test-sglang")
    monkeypatch.setenv("EC_STORE_TLS_CA", str(pki / "ca.crt"))
    monkeypatch.setenv("EC_STORE_TLS_CERT", str(pki / "encoder.crt"))
    monkeypatch.setenv("EC_STORE_TLS_KEY", str(pki / "encoder.key"))
    enc = EmbeddingStoreFactory.create_backend("ecstore")
    a = embedding(5, 300)
    assert enc.batch_put(["a"], [a.data_ptr()], [nbytes(a)]) == [True]
    monkeypatch.setenv("EC_STORE_TLS_CERT", str(pki / "prefill.crt"))
    monkeypatch.setenv("EC_STORE_TLS_KEY", str(pki / "prefill.key"))
    pre = EmbeddingStoreFactory.create_backend("ecstore")
    got = torch.empty_like(a)
    assert pre.batch_get(["a"], [got.data_ptr()], [nbytes(a)]) == [True]
    assert torch.equal(got, a)
    b = embedding(6, 300)
    assert pre.batch_put(["b"], [b.data_ptr()], [nbytes(b)]) == [False]  # read-only: refused
    assert not enc.batch_is_exist(["b"])[0]
