"""vLLM's real v1 Scheduler driving EcStoreConnector on the CPU: what a producer engine
saves becomes a consumer engine's hits, loads and byte-exact tensors, and an eviction
racing between the hit and the load never produces vLLM's fatal "Encoder cache miss".

The model is a tiny LLaVA written here (config, tokenizer and image processor; no weights:
the scheduler needs no weights); the model runner's part -- running the encoder, calling the worker connector --
is played by the test.
"""

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (make python-test installs it)")

from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig  # noqa: E402
from vllm.config import (CacheConfig, ECTransferConfig, ModelConfig,  # noqa: E402
                         SchedulerConfig, VllmConfig)
from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole  # noqa: E402
from vllm.multimodal.inputs import (MultiModalFeatureSpec, MultiModalKwargsItem,  # noqa: E402
                                    PlaceholderRange)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs  # noqa: E402
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,  # noqa: E402
                                        KVCacheGroupSpec)
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from ecstore.vllm import EcStoreConnector  # noqa: E402

BLOCK = 16
init_none_hash(sha256)


@pytest.fixture(scope="module")
def tiny_llava(tmp_path_factory):
    """A LLaVA config, word-level tokenizer and CLIP image processor, made here: the
    scheduler sizes its encoder budget through the model's processor."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import CLIPImageProcessor, LlavaProcessor, PreTrainedTokenizerFast

    d = str(tmp_path_factory.mktemp("tiny-llava"))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3, "<image>": 4}
    vocab.update({f"w{i}": i for i in range(5, 1000)})
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", pad_token="<pad>",
                                        additional_special_tokens=["<image>"])
    images = CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=14,
                   vision_feature_select_strategy="default", image_token="<image>",
                   num_additional_image_tokens=1).save_pretrained(d)
    cfg = LlavaConfig(
        text_config=LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=1, vocab_size=1000,
                                max_position_embeddings=8192),
        vision_config=CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=2, image_size=28, patch_size=14,
                                       projection_dim=32),
        image_token_index=4)
    cfg.architectures = ["LlavaForConditionalGeneration"]
    cfg.save_pretrained(d)
    return d


def schedule_until(sched, req_id, steps=500):
    """Scheduler steps until `req_id` is scheduled: a consumer's request waits a step or two
    while the connector looks its items up off the scheduler thread."""
    import time

    for _ in range(steps):
        out = sched.schedule()
        if req_id in out.num_scheduled_tokens:
            return out
        time.sleep(0.002)
    raise AssertionError(f"{req_id} was never scheduled")


def make_scheduler(model_dir, role, store, extra=None):
    model = ModelConfig(model=model_dir, dtype="float16", seed=42, max_model_len=8192)
    ec = ECTransferConfig(ec_connector="EcStoreConnector", ec_connector_module_path="ecstore.vllm",
                          ec_role=role,
                          ec_connector_extra_config={"store": store, "namespace": "llava",
                                                     "lookup_budget_ms": 10000,
                                                     **(extra or {})})
    cache = CacheConfig(block_size=BLOCK, gpu_memory_utilization=0.9, cache_dtype="auto")
    config = VllmConfig(
        scheduler_config=SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=8192,
                                         max_model_len=8192, enable_chunked_prefill=True,
                                         is_encoder_decoder=False, watermark=0.0),
        model_config=model, cache_config=cache, ec_transfer_config=ec)
    kv = KVCacheConfig(num_blocks=10000, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=BLOCK, num_kv_heads=1,
                                                      head_size=1, dtype=torch.float32))])
    cache.num_gpu_blocks = 10000
    register_all_kvcache_specs(config)
    sched = Scheduler(vllm_config=config, kv_cache_config=kv, block_size=BLOCK, log_stats=True,
                      structured_output_manager=StructuredOutputManager(config))
    worker = EcStoreConnector(config, ECConnectorRole.WORKER)
    return sched, worker


def request(req_id, hashes, n_embeds=100, n_tokens=400):
    params = SamplingParams(max_tokens=4)
    params.update_from_generation_config({}, 2)
    feats = [MultiModalFeatureSpec(data=MultiModalKwargsItem.dummy(), modality="image",
                                   identifier=h,
                                   mm_position=PlaceholderRange(offset=10 + 120 * i,
                                                                length=n_embeds))
             for i, h in enumerate(hashes)]
    return Request(request_id=req_id, prompt_token_ids=[7] * n_tokens, sampling_params=params,
                   pooling_params=None, mm_features=feats,
                   block_hasher=get_request_block_hasher(BLOCK, sha256))


def encoder_output(h):  # what "the encoder" computes for an item: distinct per hash
    g = torch.Generator().manual_seed(abs(hash(h)) % (1 << 31))
    return torch.randn(100, 256, generator=g).to(torch.bfloat16)


@pytest.fixture(params=["embedded", "daemon"])
def store(request, tmp_path):
    return f"dir:{tmp_path / 'store'}" if request.param == "embedded" else \
        request.getfixturevalue("daemon")["unix"]


def test_producer_saves_become_consumer_hits_and_loads(tiny_llava, store):
    prod_sched, prod_worker = make_scheduler(tiny_llava, "ec_producer", store)
    cons_sched, cons_worker = make_scheduler(tiny_llava, "ec_consumer", store)
    hashes = ["a" * 64, "b" * 64]

    # Producer engine: the scheduler schedules the encoder for both items; the "model
    # runner" computes them and saves through the producer's worker connector.
    prod_sched.add_request(request("p1", hashes))
    out = prod_sched.schedule()
    assert out.scheduled_encoder_inputs["p1"] == [0, 1]
    computed = {h: encoder_output(h) for h in hashes}
    for h in hashes:
        prod_worker.save_caches(encoder_cache=computed, mm_hash=h)
    prod_worker.wait_for_saves()
    _, params = prod_sched.ec_connector.request_finished(prod_sched.requests["p1"])
    assert set(params) == set(hashes) and params[hashes[0]]["ec_store"]["store"] == store

    # Consumer engine: both items are hits, nothing is encoded, the worker loads them.
    req = request("c1", hashes)
    cons_sched.add_request(req)
    out = schedule_until(cons_sched, "c1")
    assert "c1" not in out.scheduled_encoder_inputs, "a hit was scheduled for encoding"
    assert out.num_scheduled_tokens["c1"] == 400
    meta = out.ec_connector_metadata
    assert set(meta.loads) == set(hashes)
    encoder_cache = {}
    cons_worker.bind_connector_metadata(meta)
    cons_worker.start_load_caches(encoder_cache=encoder_cache)
    for h in hashes:
        assert torch.equal(encoder_cache[h].view(torch.int16), computed[h].view(torch.int16))
    cons_sched.finish_requests("c1", RequestStatus.FINISHED_ABORTED)
    assert not cons_sched.ec_connector.has_cache_item(hashes[0])  # pins ended
    for c in (prod_worker, cons_worker, prod_sched.ec_connector, cons_sched.ec_connector):
        c.shutdown()


def test_eviction_between_hit_and_load_never_misses(tiny_llava, tmp_path):
    store = f"dir:{tmp_path / 'small'}"
    small = {"pool_size": "8MiB", "disk_quota": "12MiB"}
    prod_sched, prod_worker = make_scheduler(tiny_llava, "ec_producer", store, small)
    cons_sched, cons_worker = make_scheduler(tiny_llava, "ec_consumer", store, small)
    hit = "c" * 64
    computed = {hit: encoder_output(hit)}
    prod_worker.save_caches(encoder_cache=computed, mm_hash=hit)
    prod_worker.wait_for_saves()
    cons_sched.add_request(request("c1", [hit]))
    out = schedule_until(cons_sched, "c1")
    assert hit in out.ec_connector_metadata.loads
    # Between the scheduler's "hit" and the worker's load, 40 MiB churn through an 8 MiB
    # pool and a 12 MiB disk quota: unpinned, the entry would be gone.
    for i in range(10):
        prod_worker.save_caches(encoder_cache={f"x{i}": torch.randn(1024, 1024)},
                                mm_hash=f"x{i}")
    prod_worker.wait_for_saves()
    assert not prod_worker.cache.contains("llava", "x0"), "the churn evicted nothing"
    encoder_cache = {}
    cons_worker.bind_connector_metadata(out.ec_connector_metadata)
    cons_worker.start_load_caches(encoder_cache=encoder_cache)
    assert torch.equal(encoder_cache[hit].view(torch.int16), computed[hit].view(torch.int16))
    for c in (prod_worker, cons_worker, prod_sched.ec_connector, cons_sched.ec_connector):
        c.shutdown()
